"""The data-parallel strategies memprobe runs on several GPUs: one list for the wrapper (training/wrap.py), the
commands that take `--strategy` and the result files that record one, and the workloads they cannot wrap. No torch."""

from __future__ import annotations

from memprobe.core.workload.registry import Workload

STRATEGIES = ("ddp", "fsdp")  # DistributedDataParallel; FSDP2's fully_shard per block
NONE = "none"  # one rank, no wrapper: the 1-GPU baseline of the scaling efficiency


class StrategyError(ValueError):
    """The strategy is unknown, or cannot wrap this workload."""


# Families whose step the wrappers do not cover, and why.
UNSUPPORTED_FAMILIES = {
    "pix2pixhd": "--gpus N wraps one model trained by one optimizer; Pix2PixHD's step updates a "
    "generator and a discriminator with two optimizers (not supported yet)"
}


def check_workload(workload: Workload) -> None:
    """Raise StrategyError for a workload (a registry Workload) the wrappers cannot train data-parallel."""
    if workload.family in UNSUPPORTED_FAMILIES:
        raise StrategyError(f"{workload.name}: {UNSUPPORTED_FAMILIES[workload.family]}")
