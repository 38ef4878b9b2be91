"""Which SDPA kernel the emulation says CUDA runs (predict/sdpa_choice.py), against what torch 2.11 ran on an H200.

The cases are the calls benchmarks/trace_diff.py recorded there (reports/zoo/h200/traces), with the backend
torch._fused_sdp_choice returned, plus each constraint of the fused backends on its own.
"""

from __future__ import annotations

import torch

from memprobe.predict.fakecuda import H100, Target
from memprobe.predict.sdpa_choice import choose_backend

A100 = Target("NVIDIA A100 (sm80)", (8, 0))


def qkv(b=2, h=16, s=512, d=64, dtype=torch.bfloat16, bshd=True, grad=True):
    """Query, key and value as transformers makes them: (B, S, H, D) projections viewed as (B, H, S, D)."""
    out = []
    for _ in range(3):
        t = torch.empty(b, s, h, d, dtype=dtype).transpose(1, 2) if bshd else torch.empty(b, h, s, d, dtype=dtype)
        out.append(t.requires_grad_(grad))
    return out


def choice(q, k, v, mask=None, dropout=0.0, causal=False, gqa=False, target=H100):
    return choose_backend(target, q, k, v, mask, dropout, causal, gqa)


def test_half_precision_without_a_mask_runs_cudnn_on_an_h100_even_with_dropout():
    # gpt2-medium (causal, dropout 0.1) and roberta-large (dropout 0.1) bf16: cuDNN on the H200
    assert choice(*qkv(), dropout=0.1, causal=True) == "cudnn"
    assert choice(*qkv(), dropout=0.1) == "cudnn"


def test_the_default_order_elsewhere_is_flash_first():
    assert choice(*qkv(), dropout=0.1, causal=True, target=A100) == "flash"
    assert choice(*qkv(), target=Target("old cuDNN", (9, 0), cudnn_version=91000)) == "flash"


def test_a_mask_that_needs_a_gradient_or_has_a_strided_last_dim_takes_the_math_path():
    # T5's self-attention: the relative-position bias (1, H, L, L), a permuted view of an embedding, needs a
    # gradient; the H200 ran math for every such call
    bias = torch.empty(512, 512, 16).permute(2, 0, 1).unsqueeze(0).requires_grad_()
    assert bias.stride(-1) != 1
    assert choice(*qkv(), bias, dropout=0.1) == "math"
    # without the gradient, the strided last dim still rules out cuDNN and efficient
    assert choice(*qkv(), bias.detach(), dropout=0.1) == "math"
    # T5's cross-attention: a contiguous bias without a gradient runs cuDNN
    assert choice(*qkv(), torch.empty(1, 16, 512, 512, dtype=torch.bfloat16), dropout=0.1) == "cudnn"


def test_fp32_runs_memory_efficient_attention_where_aligned():
    assert choice(*qkv(dtype=torch.float32)) == "efficient"
    assert choice(*qkv(d=66, dtype=torch.float32)) == "math"  # 66 is not a multiple of 4


def test_cudnn_limits_fall_through_to_flash():
    assert choice(*qkv(d=256)) == "flash"  # cuDNN 9.19: head dim at most 128
    assert choice(*qkv(b=65536, s=8, h=2)) == "flash"  # cuDNN: batch at most 65535
    assert choice(*qkv(d=60)) == "flash"  # cuDNN: head dim a multiple of 8; flash pads it
    q, k, v = qkv()
    assert choice(q, k[:, :, :1], v[:, :, :1]) == "flash"  # cuDNN: key length 1 (flash: not causal, fine)


def test_backends_switched_off_are_not_chosen():
    try:
        torch.backends.cuda.enable_cudnn_sdp(False)
        assert choice(*qkv()) == "flash"
        torch.backends.cuda.enable_flash_sdp(False)
        assert choice(*qkv()) == "efficient"
    finally:
        torch.backends.cuda.enable_cudnn_sdp(True)
        torch.backends.cuda.enable_flash_sdp(True)
