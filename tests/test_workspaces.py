"""Kernel workspaces predict adds around attention kernels (predict/workspaces.py), against what an H200 allocated.

The byte counts are the ones benchmarks/trace_diff.py recorded with torch 2.11 on an H200 (reports/zoo/h200/traces):
beit_base_patch16_224 bf16 (memory-efficient attention, 12 heads, 197 tokens, head dim 64) and bart-large bf16
(cuDNN attention, 16 heads, 512 tokens, head dim 64), at batch 2.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from memprobe.predict.workspaces import kernel_workspaces

aten = torch.ops.aten


def _sizes(func, args) -> list[int]:
    return [w.nbytes for w in kernel_workspaces(func, args, None)]


def test_memory_efficient_backward_in_bf16_accumulates_the_query_gradient_in_fp32():
    with FakeTensorMode():
        q = torch.empty(2, 12, 197, 64, dtype=torch.bfloat16)
        args = (q, q, q, q, None, q)  # grad_out, query, key, value, bias, out: only shapes are read
        assert _sizes(aten._scaled_dot_product_efficient_attention_backward.default, args) == [18_912, 1_574_400]


def test_memory_efficient_backward_in_fp32_makes_its_own_delta():
    with FakeTensorMode():
        q = torch.empty(2, 12, 197, 64)
        args = (q, q, q, q, None, q)
        assert _sizes(aten._scaled_dot_product_efficient_attention_backward.default, args) == [
            4 * 2 * 12 * 197 * 64,
            4 * 2 * 12 * 197,
        ]


def test_cudnn_backward_workspace():
    with FakeTensorMode():
        q = torch.empty(2, 16, 512, 64, dtype=torch.bfloat16)
        assert _sizes(aten._scaled_dot_product_cudnn_attention_backward.default, (q, q, q, q)) == [4_260_096]
        kv = torch.empty(2, 4, 1024, 64, dtype=torch.bfloat16)  # grouped-query attention (a Mixtral-style model)
        q = torch.empty(2, 16, 1024, 64, dtype=torch.bfloat16)
        assert _sizes(aten._scaled_dot_product_cudnn_attention_backward.default, (q, q, kv, kv)) == [16_908_544]
