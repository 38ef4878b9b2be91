"""The data-parallel strategies memprobe runs on several GPUs: one list for the wrapper (training/wrap.py), the
commands that take `--strategy` and the result files that record one. No torch."""

from __future__ import annotations

STRATEGIES = ("ddp", "fsdp")  # DistributedDataParallel; FSDP2's fully_shard per block
