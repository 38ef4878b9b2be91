"""The memory breakdown at B in its own fresh trial process, after the proof: both ends of the request.

The trial process answers the "breakdown" request (serve, called by child/worker.py) by running the step at B
under PyTorch's MemTracker (training/breakdown.py); the scan asks for it once per precision (measure_at_max)
in a process that has run nothing else, so the tracker's hooks never touch the trials that find and prove B.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from memprobe.core.breakdown import Breakdown, check_sum
from memprobe.core.protocol import BreakdownAnswer, BreakdownRequest
from memprobe.core.results import PrecisionResult
from memprobe.probe.runner import WorkerError, WorkerFactory, WorkerSpec
from memprobe.probe.scan_trials import fresh_worker


def serve(session: Any, req: BreakdownRequest) -> BreakdownAnswer:
    """The trial process's side: the breakdown's record, or the outcome and error when the step failed (an OOM at
    B, where the tracker's own bookkeeping pushed it over, is reported, never raised)."""
    import torch  # noqa: F401 - the trial process has it; this module's scan side must not need it

    from memprobe.core.outcomes import classify_error
    from memprobe.training.breakdown import measure_breakdown

    session._drop_kept()
    failure = None
    try:
        record = measure_breakdown(
            session.task,
            session.precision,
            int(req.batch),
            int(req.steps),
            session.memory,
            per_sample_bytes=req.per_sample_bytes,
            loss_scale=req.loss_scale,
            before=session.apply_cap,
        )
    except Exception as exc:  # noqa: BLE001 - classified and reported; the scan's B stands either way
        failure = BreakdownAnswer(
            outcome=classify_error(type(exc).__name__, str(exc)), error=f"{type(exc).__name__}: {exc}"[:500]
        )
        del exc
    session.memory.reset()  # outside the except block: the traceback held the step's tensors
    return failure or BreakdownAnswer(breakdown=record.to_dict())


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
    record = Breakdown.from_dict(answer.breakdown)
    record.note = f"fresh process at B, {round(time.perf_counter() - started, 1)} s wall in all"
    wrong = check_sum(record)
    if wrong:
        note(f"memory breakdown: {wrong}")
    result.breakdown = record
