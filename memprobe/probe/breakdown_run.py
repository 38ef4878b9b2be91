"""The memory breakdown at B in its own fresh trial process, after the proof: the scan's end of the request.

The scan asks for it once per precision (measure_at_max) in a process that has run nothing else, so the tracker's
hooks never touch the trials that find and prove B; the trial process answers it (probe/child/breakdown.py) by
running the step at B under PyTorch's MemTracker (training/breakdown.py).
"""

from __future__ import annotations

import time
from typing import Callable

from memprobe.core.process.protocol import BreakdownAnswer, BreakdownRequest
from memprobe.core.records.breakdown import check_sum
from memprobe.core.records.results import PrecisionResult
from memprobe.probe.runner import WorkerError, WorkerFactory, WorkerSpec
from memprobe.probe.scan_trials import fresh_worker


def per_sample_bytes(result: PrecisionResult) -> int | None:
    """What one more sample costs, from the scan's fit on the reserved peaks (allocated where none)."""
    for basis in ("peak_reserved", "peak_allocated"):
        line = result.memory_model.get(basis)
        if line is not None and line.per_sample_bytes > 0:
            return int(line.per_sample_bytes)
    return None


def measure_at_max(
    factory: WorkerFactory, spec: WorkerSpec, result: PrecisionResult, steps: int, note: Callable[[str], None]
) -> None:
    """Measure the breakdown at result.max_batch in a fresh process and put it in `result.breakdown`; a failure
    goes to result.settings.breakdown_error and a note, and never changes B."""
    batch = int(result.max_batch or 0)
    note(f"memory breakdown at batch {batch} (a fresh process, under MemTracker)")
    started = time.perf_counter()
    request = BreakdownRequest(
        batch=batch, steps=steps, per_sample_bytes=per_sample_bytes(result), loss_scale=spec.loss_scale
    )
    try:
        with fresh_worker(factory, spec) as worker:
            answer = worker.request(request, spec.timeout_s)
            lost = None if isinstance(answer, BreakdownAnswer) else worker._lost(answer)
    except WorkerError as exc:
        answer, lost = None, (exc.kind, str(exc))
    if lost is not None or not isinstance(answer, BreakdownAnswer) or answer.breakdown is None:
        error = lost[1] if lost else getattr(answer, "error", None) or "no answer"
        result.settings.breakdown_error = error
        note(f"memory breakdown at batch {batch} failed: {error}")
        return
    record = answer.breakdown
    record.note = f"fresh process at B, {round(time.perf_counter() - started, 1)} s wall in all"
    wrong = check_sum(record)
    if wrong:
        note(f"memory breakdown: {wrong}")
    result.breakdown = record
