"""The trial process's end of the breakdown request: the step at B under PyTorch's MemTracker (probe/breakdown_run.py
asks for it)."""

from __future__ import annotations

from typing import Any

from memprobe.core.process.protocol import BreakdownAnswer, BreakdownRequest


def serve(session: Any, req: BreakdownRequest) -> BreakdownAnswer:
    """The trial process's side: the breakdown's record, or the outcome and error when the step failed (an OOM at
    B, where the tracker's own bookkeeping pushed it over, is reported, never raised)."""
    from memprobe.core.process.outcomes import classify_error
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
    return failure or BreakdownAnswer(breakdown=record)
