"""Scan one workload on N GPUs under one strategy: the pipeline (probe/pipeline.py) over torchrun ranks.

No torch here. Every trial is a fresh torchrun launch (probe/distributed/backend.py), so every scan option
means on N GPUs what it means on one, per GPU: the max batch, its proof, --soak, the timed runs (--batch) and
the curve, plus the 1-GPU baseline and the scaling efficiency. Options a group cannot honour are refused by
check_options before anything runs.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from memprobe.core.process.rank_record import RankSetup
from memprobe.core.records.results import PrecisionResult, ScanResult, result_filename
from memprobe.core.text.textlists import visible_devices
from memprobe.core.workload.registry import Workload
from memprobe.core.workload.strategies import STRATEGIES, StrategyError, check_workload
from memprobe.probe.backend import ScanProgress
from memprobe.probe.device import host_environment
from memprobe.probe.distributed.backend import Launcher, RankJob, RanksBackend
from memprobe.probe.distributed.launch import launch, launch_env, nccl_env
from memprobe.probe.distributed.standby import Prestarted, prestart_on
from memprobe.probe.distributed.topology import interconnect, visible_indices
from memprobe.probe.hint import PredictedStart
from memprobe.probe.options import ScanOptions
from memprobe.probe.pipeline import ResultWriter, run_precision, scan_precisions


class DistributedScanError(ValueError):
    """Options a multi-GPU scan cannot honour (a user error: one line)."""


def check_options(opts: ScanOptions, world_size: int, strategy: str, workload: Workload | None = None) -> None:
    """Raise DistributedScanError for what a multi-GPU scan does not support (and for a workload a strategy
    cannot wrap, when given). Every other option works on N GPUs as on one."""
    if world_size < 2:
        raise DistributedScanError("a multi-GPU scan needs at least 2 GPUs (--gpus 1 is the single-GPU scan)")
    if strategy not in STRATEGIES:
        raise DistributedScanError(f"unknown strategy '{strategy}'; choose from {', '.join(STRATEGIES)}")
    if opts.mode != "train":
        raise DistributedScanError("--gpus N measures training (data parallelism): use --mode train")
    if opts.compile:
        raise DistributedScanError("--compile is not supported with --gpus N yet")
    if opts.memory_cap_bytes is not None:
        raise DistributedScanError("--memory-cap is not supported with --gpus N")
    if workload is not None:
        try:
            check_workload(workload)
        except StrategyError as exc:
            raise DistributedScanError(str(exc)) from None


def distributed_environment(world_size: int, strategy: str, device: str, setup: RankSetup | None) -> dict[str, Any]:
    """What a multi-GPU result file records about the group: world size, strategy, backend, NCCL
    version and NCCL_* variables in force, and the GPUs' interconnect."""
    env = launch_env()
    facts: dict[str, Any] = {
        "world_size": world_size,
        "strategy": strategy,
        "backend": "nccl" if device == "cuda" else "gloo",
        "launcher": "torch.distributed.run (torchrun) --standalone",
        "nccl_version": setup.environment.get("nccl_version") if setup else None,
        "nccl_env": nccl_env(env),
    }
    if device == "cuda":
        facts["interconnect"] = interconnect(visible_indices(world_size, env.get("CUDA_VISIBLE_DEVICES")))
    return facts


def _backend(job: RankJob) -> RanksBackend:
    def group_environment(setup: RankSetup) -> dict[str, Any]:
        return {
            **setup.environment,
            "distributed": distributed_environment(job.world_size, job.strategy, job.opts.device, setup),
        }

    return RanksBackend(job, group_environment)


def scan_precision_distributed(
    workload: Workload,
    precision: str,
    opts: ScanOptions,
    world_size: int,
    strategy: str,
    progress: ScanProgress,
    launcher: Launcher = launch,
    start: PredictedStart | None = None,
) -> tuple[PrecisionResult, RankSetup | None]:
    """Search, prove, soak, time and curve one precision on `world_size` GPUs; returns the result and what
    building the model gave on rank 0. `start` gives the search a predicted first batch (predict --gpus N, on the CPU)."""
    with _prestarted(launcher, opts) as chosen:
        backend = _backend(RankJob(workload, precision, opts, world_size, strategy, progress, chosen))
        result = run_precision(backend, workload, precision, opts, progress, lambda env: None, start)
    return result, backend.setup


@contextmanager
def _prestarted(launcher: Launcher, opts: ScanOptions) -> Iterator[Launcher]:
    """The launcher to use: memprobe's own starts each launch's successor ahead (standby.Prestarted) where
    prestart_on says so, and ends what it did not use when the block ends."""
    if launcher is not launch or not prestart_on(opts.device):
        yield launcher
        return
    prestarted = Prestarted()
    try:
        yield prestarted
    finally:
        prestarted.close()


def scan_distributed(
    workload: Workload,
    opts: ScanOptions,
    world_size: int,
    strategy: str,
    out_dir: str | Path,
    progress: ScanProgress,
    launcher: Launcher = launch,
) -> tuple[ScanResult, Path]:
    """Scan every requested precision of one workload on `world_size` GPUs under `strategy`, writing
    the result file after each. Raises DistributedScanError for unsupported options; on
    KeyboardInterrupt writes what finished, marked partial, and raises ScanInterrupted."""
    check_options(opts, world_size, strategy, workload)
    result = ScanResult(
        workload=workload.to_dict(),
        environment=host_environment(),
        settings=opts.to_dict() | {"world_size": world_size, "strategy": strategy},
    )
    writer = ResultWriter(
        result,
        out_dir,
        lambda gpu: result_filename(f"{world_size}x {gpu or opts.device}", f"{workload.name}-{strategy}", opts.mode),
    )
    start = (
        PredictedStart(workload, opts.precisions, opts.steps, world=(world_size, strategy))
        if opts.uses_predicted_start
        else None
    )

    with _prestarted(launcher, opts) as chosen:

        def run_one(precision: str, hint: PredictedStart | None, on_environment: Any) -> PrecisionResult:
            backend = _backend(RankJob(workload, precision, opts, world_size, strategy, progress, chosen))
            return run_precision(backend, workload, precision, opts, progress, on_environment, hint)

        return scan_precisions(
            workload,
            opts,
            writer,
            progress,
            run_one,
            label=lambda precision: f"{precision} on {world_size} GPUs ({strategy})",
            start=start,
        )


def gpu_count(visible: str | None = None) -> int:
    """How many GPUs the ranks may use: CUDA_VISIBLE_DEVICES's entries when set (none when set empty), else NVML's
    count. Raises NoGPUError without a driver."""
    devices = visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible)
    if devices is not None:
        return len(devices)
    from memprobe.probe.device import gpus

    return len(gpus())
