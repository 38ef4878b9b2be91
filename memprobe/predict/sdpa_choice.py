"""Which scaled_dot_product_attention kernel CUDA runs for a call: cuDNN, flash, memory-efficient or math.

The constraints of each fused backend as cuda/sdp_utils.cpp and sdp_utils_cpp.h (torch 2.11) check them, on
the emulated target's compute capability and cuDNN version, and the order they are tried in. A backend's memory
differs by the square of the sequence length (math materializes the attention matrix for backward; the fused ones
keep the output and a log-sum-exp), so the choice is where a prediction of an attention model stands or falls.
"""

from __future__ import annotations

from typing import Any

import torch

FLASH_MAX_HEAD_DIM = 256  # flash_attn/static_switch.h HEADDIM_SWITCH: the largest head dim with a kernel
CUDNN_MAX_DIM = 65535  # check_cudnn_tensor_shapes: batch and heads at most this
CUDNN_MAX_HEAD_DIM = 128  # check_cudnn_tensor_shapes: 256 only with cuDNN newer than 9.22 (192/128 from 9.11 on sm90)


class _SdpaChecks:
    """The constraints of each fused SDPA backend on CUDA (cuda/sdp_utils.cpp, sdp_utils_cpp.h), for one call.
    Each method says whether that backend can run it; the order they are tried in is sdpa_backend's."""

    def __init__(self, target: Any, query, key, value, attn_mask, dropout_p, is_causal, enable_gqa) -> None:
        self.target, self.q, self.k, self.v, self.mask = target, query, key, value, attn_mask
        self.dropout, self.causal, self.gqa = dropout_p, is_causal, enable_gqa
        self.sm = target.compute_capability

    def _dense(self, ignore_singleton: bool, supports_gqa: bool = True) -> bool:
        """4-D q, k, v of one batch size, nonzero lengths, last dims of stride 1 (the mask's too), and the
        same number of heads unless enable_gqa on a backend that supports it (then key/value heads dividing the
        query's): check_batch_size_and_num_heads_dense<supports_gqa>."""
        q, k, v = self.q, self.k, self.v
        if not (q.dim() == k.dim() == v.dim() == 4):
            return False
        if q.size(-2) == 0 or k.size(-2) == 0:
            return False
        strides = q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1
        if ignore_singleton:
            strides = strides or q.size(-1) == 1
        if not strides or (self.mask is not None and self.mask.stride(-1) != 1):
            return False
        if not (q.size(0) == k.size(0) == v.size(0)):
            return False
        if self.gqa and supports_gqa:
            return k.size(-3) == v.size(-3) and q.size(-3) % k.size(-3) == 0
        return q.size(-3) == k.size(-3) == v.size(-3)

    def _low_precision(self) -> bool:
        dtypes = (torch.float16, torch.bfloat16) if self.sm >= (8, 0) else (torch.float16,)
        return self.q.dtype == self.k.dtype == self.v.dtype and self.q.dtype in dtypes

    def _mask_shape(self) -> bool:
        """check_attn_mask_shape: no gradient for the mask; 2-D, or 4-D broadcastable over batch and heads."""
        m, q, k = self.mask, self.q, self.k
        if m is None:
            return True
        if m.requires_grad:
            return False
        if m.size(-2) not in (q.size(2), 1) or m.size(-1) not in (k.size(2), 1):
            return False
        return m.dim() == 2 or (m.dim() == 4 and m.size(0) in (1, q.size(0)) and m.size(1) in (1, q.size(1)))

    def cudnn(self) -> bool:
        if not torch.backends.cuda.cudnn_sdp_enabled() or not (8, 0) <= self.sm <= (12, 1):
            return False
        if torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled():
            return False
        if not (self.q.dim() == self.k.dim() == self.v.dim() == 4) or not self._low_precision():
            return False
        if not self._mask_shape() or not self._dense(ignore_singleton=True):
            return False
        version = self.target.cudnn_version
        if self.dropout > 0.0 and 91100 < version < 91400:  # no dropout in cuDNN 9.11-9.13
            return False
        b, h, s_q, d_qk = self.q.shape
        s_k, d_v = self.k.size(2), self.v.size(3)
        if b > CUDNN_MAX_DIM or h > CUDNN_MAX_DIM:
            return False
        limit = CUDNN_MAX_HEAD_DIM
        if self.sm[0] in (9, 10) and version >= 91100 and d_qk == 192 and d_v == 128:
            limit = 192
        if d_qk > limit or d_v > limit or d_qk % 8 or d_v % 8:
            return False
        return s_k != 1 and not (self.dropout != 0.0 and s_q == 1)

    def flash(self) -> bool:
        q, k, v = self.q, self.k, self.v
        if not torch.backends.cuda.flash_sdp_enabled() or not (8, 0) <= self.sm <= (12, 1):
            return False
        if not (q.dim() == k.dim() == v.dim() == 4) or self.mask is not None:
            return False
        head = q.size(-1)
        if not (head == k.size(-1) == v.size(-1)) or head > FLASH_MAX_HEAD_DIM:
            return False
        if self.causal and q.size(-2) != k.size(-2):  # check_flash_causal_non_square_seqlens
            return False
        return self._low_precision() and self._dense(ignore_singleton=True)

    def efficient(self) -> bool:
        q, k, v = self.q, self.k, self.v
        if not torch.backends.cuda.mem_efficient_sdp_enabled() or not (5, 0) <= self.sm <= (12, 1):
            return False
        if not (q.dim() == k.dim() == v.dim() == 4):
            return False
        half = q.dtype in (torch.float16, torch.bfloat16)
        # minimum_gemm_alignment: 4 elements from sm80 on, 8 for half on tensor cores
        align = 8 if half and self.sm >= (7, 0) else 4 if self.sm >= (8, 0) or half else 1
        head, vhead = q.size(-1), v.size(-1)
        if not (head == k.size(-1) and head % align == 0 and vhead % align == 0 and head > 0 and vhead > 0):
            return False
        if self.sm >= (8, 0) and any(t.storage_offset() % align for t in (q, k, v) if t.numel()):
            return False  # check_data_ptr_alignment_mem_efficient
        if not self._dense(ignore_singleton=False, supports_gqa=False):  # memory-efficient attention has no GQA
            return False
        dtypes = (torch.float16, torch.float32, torch.bfloat16) if self.sm >= (8, 0) else (torch.float16, torch.float32)
        return q.dtype == k.dtype == v.dtype and q.dtype in dtypes


def choose_backend(target: Any, query, key, value, attn_mask, dropout_p, is_causal, enable_gqa) -> str:
    """ "cudnn", "flash", "efficient" or "math": what select_sdp_backend returns for these arguments on `target`
    (a fakecuda.Target). cuDNN is tried first where the target prefers it (Target.prefers_cudnn_attention)."""
    checks = _SdpaChecks(target, query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
    order = ("cudnn", "flash", "efficient") if target.prefers_cudnn_attention else ("flash", "efficient")
    for backend in order:
        if getattr(checks, backend)():
            return backend
    return "math"
