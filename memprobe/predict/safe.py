"""The safe batch: the largest batch that leaves a share of the usable memory unused, the one to run.

The predicted max batch is the best estimate of the edge; the safe batch leaves room for what the trace and the
allocator model do not hold. `predict`, `plan` and benchmarks/calibration.py take it from here.
"""

from __future__ import annotations

from typing import Any

from memprobe.predict.batch_model import PrecisionTraces

# The share of the usable memory a safe batch leaves unused. The predicted max batch is the best estimate of the edge;
# on models nobody tuned memprobe for (the held-out zoo, reports/zoo/accuracy.md) it came out above the measured B in
# 18 of 60 training scans, by up to 4.5% (a U-Net in bf16 on the H200; resnet50-like CNNs in fp32, whose cuDNN
# convolution workspaces are not emulated, by up to 2.2%). 5% is the smallest round margin under which no training
# scan's safe batch was above its measured B, on the H200 and on the H100.
SAFE_MARGIN = 0.05
# Under FSDP2 the per-GPU prediction was above the measured B by up to 6.2% on 2 and 4 H200s (transformer-big bf16:
# 1296 and 1292 predicted, 1220 and 1222 measured; reports/calibration_multi_gpu.md): FSDP2 all-gathers and
# reduce-scatters on streams of their own, the caching allocator keeps each stream's blocks apart, and the allocator
# model has one pool. 10% leaves every measured FSDP2 safe batch below B with room; DDP keeps SAFE_MARGIN (its
# buckets are on the compute stream).
FSDP_SAFE_MARGIN = 0.10


def safe_margin(world: Any = None) -> float:
    """The share of the usable memory a safe batch leaves unused: FSDP_SAFE_MARGIN per GPU under FSDP2 (`world`,
    a data_parallel.World), SAFE_MARGIN otherwise."""
    return FSDP_SAFE_MARGIN if world is not None and world.strategy == "fsdp" else SAFE_MARGIN


def safe_capacity(capacity_bytes: int, margin: float = SAFE_MARGIN) -> int:
    """The memory a safe batch may use of `capacity_bytes` (`margin` of it left over)."""
    return int(capacity_bytes * (1 - margin))


def safe_max_batch(traces: PrecisionTraces, capacity_bytes: int, margin: float, max_batch: int) -> int:
    """The largest batch whose trial fits `capacity_bytes` with `margin` of it left over: never above `max_batch`,
    the traces' max batch at the whole capacity (a staircase of allocator segments could put it there)."""
    return min(max_batch, traces.max_batch(safe_capacity(capacity_bytes, margin))[0])
