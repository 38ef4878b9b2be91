"""Scan one workload on one GPU in each precision: the pipeline (probe/pipeline.py) over the one-GPU back-end.

No torch here: all GPU work happens in trial processes (probe/local.py). The result file is rewritten
atomically after every precision, so an interrupted scan keeps what it finished.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping

from memprobe.core.process.child_env import child_env
from memprobe.core.records.results import PrecisionResult, ScanResult, result_filename
from memprobe.core.workload.registry import Workload
from memprobe.probe.backend import ScanProgress  # noqa: F401
from memprobe.probe.device import host_environment
from memprobe.probe.hint import PredictedStart
from memprobe.probe.local import LocalBackend, NoCudaError

# ScanOptions and its constants, the progress protocol and the pipeline's names are re-exported: callers import
# them from here.
from memprobe.probe.options import (  # noqa: F401
    CURVE_TIMED_STEPS,
    CURVE_WARMUP,
    INFER_TRIAL_STEPS,
    INFER_WARMUP,
    MODES,
    ScanOptions,
)
from memprobe.probe.pipeline import (  # noqa: F401
    CurveInterrupted,
    ResultWriter,
    ScanInterrupted,
    add_mfu,
    memory_models,
    run_precision,
    scan_precisions,
)
from memprobe.probe.runner import WorkerFactory

__all__ = ["NoCudaError", "ScanInterrupted", "ScanOptions", "scan_precision", "scan_workload"]


def scan_precision(
    workload: Workload,
    precision: str,
    opts: ScanOptions,
    factory: WorkerFactory,
    progress: ScanProgress,
    on_environment: Callable[[dict[str, Any]], None],
    start: PredictedStart | None = None,
) -> PrecisionResult:
    """Search, prove and measure one precision in trial processes from `factory`; `start` predicts the max batch
    beside the search (polled, never waited for). Raises NoCudaError when there is no CUDA device."""
    backend = LocalBackend(workload, precision, opts, factory, progress)
    return run_precision(backend, workload, precision, opts, progress, on_environment, start)


def scan_workload(
    workload: Workload, opts: ScanOptions, out_dir: str | Path, progress: ScanProgress
) -> tuple[ScanResult, Path]:
    """Scan every requested precision of one workload, writing the result file after each.

    Returns the result and its path. Raises NoCudaError (nothing written) when there is no CUDA
    device; on KeyboardInterrupt writes what finished, marked partial, and raises ScanInterrupted.
    """
    seen = child_env({**os.environ, **opts.env})  # the environment the scan's processes see
    result = ScanResult(workload=workload.to_dict(), environment=host_environment(seen), settings=opts.to_dict())
    writer = ResultWriter(
        result, out_dir, lambda gpu: result_filename(gpu or _nvml_gpu_name(opts.device, seen), workload.name, opts.mode)
    )
    factory = WorkerFactory(workload, env=opts.env)
    start = (
        PredictedStart(workload, opts.precisions, opts.trial_steps, mode=opts.mode, env=opts.env)
        if opts.uses_predicted_start
        else None
    )
    try:
        # scan_precision by its module name, so that a test can replace it
        return scan_precisions(
            workload,
            opts,
            writer,
            progress,
            lambda precision, hint, on_env: scan_precision(workload, precision, opts, factory, progress, on_env, hint),
            start=start,
        )
    finally:
        factory.close()


def _nvml_gpu_name(device: str, env: Mapping[str, str] | None = None) -> str:
    """The GPU's name from NVML (the one the trial processes see in `env`), for file names when no trial process
    reported one."""
    if device == "cpu":
        return "cpu"
    try:
        from memprobe.probe.device import visible_gpu

        return visible_gpu(env).name
    except Exception:  # noqa: BLE001 - only a file name is at stake
        return "unknown-gpu"
