"""Explain a trial process that ran out of memory before its first trial: who else holds the GPU. No torch.

Out of memory while creating the CUDA context or building the model means either that the model does
not fit the card at all (max batch 0) or that other processes hold the memory (a scan killed earlier,
another job). The two need different answers, so the other processes are read from NVML and named.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from memprobe.core.process.child_env import child_env
from memprobe.core.process.outcomes import OOM
from memprobe.core.records.results import PrecisionResult
from memprobe.core.text.units import gib
from memprobe.probe.runner import WorkerError

# Memory held by other processes from which a setup OOM is blamed on them, not on the model.
OTHERS_MATTER_BYTES = 256 * 2**20


def other_gpu_processes(device: str, env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Processes other than this one holding memory on the GPU trial processes use (the one they see, with `env` on
    top of this process's environment): [{pid, name, used_bytes}]. [] on the CPU, or when NVML cannot say. Never
    raises."""
    if device != "cuda":
        return []
    try:
        from memprobe.probe.device import visible_gpu

        gpu = visible_gpu(child_env({**os.environ, **(env or {})}))
    except Exception:  # noqa: BLE001 - no NVML: nothing can be named
        return []
    return [{"pid": p.pid, "name": p.name, "used_bytes": p.used_bytes} for p in gpu.processes if p.pid != os.getpid()]


def setup_oom_report(message: str, stage: str, others: list[dict[str, Any]]) -> tuple[bool, str]:
    """(blame_others, one-line explanation) for an out-of-memory at setup. `stage` says what was being done
    (cuda-context, build or setup); blame_others is True when other processes hold enough memory to explain
    it, and the text then names them (pid, GiB) and says what to do."""
    held = sum(p.get("used_bytes") or 0 for p in others)
    named = ", ".join(
        f"pid {p['pid']}{' ' + p['name'] if p.get('name') else ''} holds {gib(p.get('used_bytes'), 2)} GiB"
        for p in others
    )
    where = {"cuda-context": "creating the CUDA context", "build": "building the model"}.get(
        stage, "setting up the trial"
    )
    if others and held >= OTHERS_MATTER_BYTES:
        return True, (
            f"out of memory while {where}, while other processes hold GPU memory ({named}): end them or wait "
            f"for them (`memprobe device` lists them), then scan again. [{message[:200]}]"
        )
    return False, (
        f"out of memory while {where}: the model does not fit this card even before its first batch"
        + (f" (other processes: {named})" if others else "")
        + f". [{message[:200]}]"
    )


def record_setup_oom(
    result: PrecisionResult, exc: WorkerError, device: str, env: Mapping[str, str] | None = None
) -> PrecisionResult:
    """Out of memory before the first trial: the model does not fit (max batch 0, nothing-fits), or, when
    other processes hold the GPU, an error that names them. Recorded under settings.setup_failure."""
    others = other_gpu_processes(device, env)
    blame_others, text = setup_oom_report(str(exc), exc.stage, others)
    result.settings.setup_failure = {
        "outcome": OOM,
        "stage": exc.stage,
        "message": str(exc)[:500],
        "other_processes": others,
    }
    result.error = text
    if blame_others:
        result.status = "error"
    else:
        result.status, result.max_batch, result.stop = "done", 0, "nothing-fits"
    return result
