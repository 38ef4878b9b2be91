"""Kernel workspaces: memory a CUDA kernel allocates for itself and frees before returning, never seen as a tensor.

Each is recorded with the tensor dimensions its size comes from (`Workspace`), so a trace extrapolated to
another batch or sequence length (batch_model.py) recomputes the size with the kernel's own rounding
instead of drawing a line through two sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

aten = torch.ops.aten
_FLASH_BACKWARD = "aten._scaled_dot_product_flash_attention_backward.default"
_EFFICIENT_BACKWARD = "aten._scaled_dot_product_efficient_attention_backward.default"
_CUDNN_BACKWARD = "aten._scaled_dot_product_cudnn_attention_backward.default"


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclass(frozen=True)
class Workspace:
    """One workspace of a kernel: the op, which of its workspaces, and the dims its size is computed from."""

    op: str
    index: int
    dims: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.op} workspace"

    @property
    def nbytes(self) -> int:
        """Its size in bytes (the formulas of `kernel_workspaces`). Raises ValueError for an unknown one."""
        if self.op == _FLASH_BACKWARD:
            b, h, m, k = self.dims
            m128 = _round_up(m, 128)
            if self.index == 0:
                return b * h * m128 * 4
            return b * m128 * h * (_round_up(k, 32) if k <= 192 else 256) * 4
        if self.op == _EFFICIENT_BACKWARD:
            if self.index == 3:  # half types: the query gradient accumulated in fp32, and per-head counters
                b, h, m, k = self.dims
                return 4 * b * h * _round_up(m, 128) * k + 64 * b * h
            size = 4
            for d in self.dims:
                size *= d
            return size
        if self.op == _CUDNN_BACKWARD:
            b, h, m, k, kv_heads, n, kv = self.dims
            size = 4 * b * h * m * k + 4 * b * h * m + 256
            if kv_heads != h:  # grouped-query attention: key and value gradients per query head, then summed
                size += 2 * 2 * b * h * n * kv
            return size
        raise ValueError(f"no workspace formula for {self.op}")

    def same_kind(self, other: Any) -> bool:
        """Whether `other` is the same workspace of the same op (dims may differ)."""
        return (
            isinstance(other, Workspace)
            and (self.op, self.index) == (other.op, other.index)
            and len(self.dims) == len(other.dims)
        )


def kernel_workspaces(func, args: tuple, out: Any) -> list[Workspace]:
    """The workspaces the CUDA kernel of `func` allocates for itself and frees before returning.

    Sources:
    - flash attention backward (flash_api.cpp mha_bwd): softmax_d (B, H, round128(M)) fp32 and
      dq_accum (B, round128(M), H, round32(K)) fp32;
    - memory-efficient attention backward (attention_backward.cu): for fp32, where the kernel does not
      compute delta itself, (grad_out.float() * out.float()) (B, M, H, K) and its sum (B, H, M) fp32; for fp16 and
      bf16, delta (B, H, M) fp32 and the kernel's workspace, the query gradient accumulated in fp32 (B, H,
      round128(M), K) and 16 fp32 counters per (batch, head) (measured on an H200 with torch 2.11 by
      benchmarks/trace_diff.py: beit_base_patch16_224 bf16, M = 197, K = 64: 18,912 and 1,574,400 bytes at batch 2);
    - cuDNN attention backward (cudnn/MHA.cpp asks the caching allocator for the plan's workspace each call):
      measured with torch 2.11 and cuDNN 9.19 on an H200 (benchmarks/trace_diff.py, bart-large, roberta-large,
      gpt2-medium and a Mixtral-style model): a query-gradient accumulator (B, H, M, K) fp32, the softmax
      statistics (B, H, M) fp32 and 256 bytes; with grouped-query attention also key and value gradients per
      query head (B, H, N, Kv) in the input's 2-byte type, two of them.
    """
    if func is aten._scaled_dot_product_flash_attention_backward.default:
        dims = tuple(args[1].shape)
        return [Workspace(_FLASH_BACKWARD, 0, dims), Workspace(_FLASH_BACKWARD, 1, dims)]
    if func is aten._scaled_dot_product_efficient_attention_backward.default:
        q, out_t = args[1], args[5]
        b, h, m, k = q.shape
        if q.dtype == torch.float32:  # kKernelComputesDelta is false for fp32 kernels
            return [Workspace(_EFFICIENT_BACKWARD, 0, tuple(out_t.shape)), Workspace(_EFFICIENT_BACKWARD, 1, (b, h, m))]
        # half types: output_t is not the fp32 accumulator, so the query gradient is accumulated in the workspace
        return [Workspace(_EFFICIENT_BACKWARD, 2, (b, h, m)), Workspace(_EFFICIENT_BACKWARD, 3, (b, h, m, k))]
    if func is aten._scaled_dot_product_cudnn_attention_backward.default:
        q, k, v = args[1], args[2], args[3]
        b, h, m, d = q.shape
        return [Workspace(_CUDNN_BACKWARD, 0, (b, h, m, d, k.size(1), k.size(2), v.size(3)))]
    return []
