"""Scaling arithmetic (no torch): efficiency of N GPUs against one, both at the same per-GPU batch."""

from __future__ import annotations

from typing import Any


def scaling_efficiency(throughput_n: float, throughput_1: float, world_size: int) -> float:
    """throughput_N / (N x throughput_1): 1.0 is perfect linear scaling. Raises ValueError for a
    world size below 1 or a throughput that is not positive."""
    if world_size < 1:
        raise ValueError(f"world size must be at least 1, got {world_size}")
    if not (throughput_n > 0 and throughput_1 > 0):
        raise ValueError(f"throughputs must be positive (N GPUs: {throughput_n}, 1 GPU: {throughput_1})")
    return throughput_n / (world_size * throughput_1)


def scaling_record(
    world_size: int, per_gpu_batch: int, group: dict[str, Any] | None, single: dict[str, Any] | None, note: str = ""
) -> dict[str, Any]:
    """The scaling entry of a result file: both timed runs' throughput (samples/s and units/s of the
    whole group, of the one GPU), the speed-up and the efficiency, or None where a run did not fit."""
    fitted = [m if m and m.get("outcome") == "fit" else None for m in (group, single)]
    record: dict[str, Any] = {
        "world_size": world_size,
        "per_gpu_batch": per_gpu_batch,
        "throughput_n": fitted[0]["samples_per_s"] if fitted[0] else None,
        "throughput_1": fitted[1]["samples_per_s"] if fitted[1] else None,
        "units_per_s_n": fitted[0].get("units_per_s") if fitted[0] else None,
        "units_per_s_1": fitted[1].get("units_per_s") if fitted[1] else None,
        "unit": (fitted[0] or fitted[1] or {}).get("unit"),
        "speedup": None,
        "efficiency": None,
        "note": note,
        "single_gpu_run": single,
    }
    if fitted[0] and fitted[1]:
        record["speedup"] = fitted[0]["samples_per_s"] / fitted[1]["samples_per_s"]
        record["efficiency"] = scaling_efficiency(fitted[0]["samples_per_s"], fitted[1]["samples_per_s"], world_size)
    return record
