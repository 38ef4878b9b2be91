"""What a prediction's notes say of how it was made: the traces, what the trace sessions counted, the time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from memprobe.predict.fakecuda import Target

if TYPE_CHECKING:  # summary.py imports this module
    from memprobe.predict.summary import PrecisionPrediction


def trace_notes(results: Mapping[str, PrecisionPrediction], traced: Any, precisions: Sequence[str]) -> list[str]:
    """How each precision was traced where it was not the usual way (no batch model; tf32 as fp32)."""
    notes = []
    for precision, result in results.items():
        if precision in traced.shared or result.how != "traced":
            continue
        if traced.traces[precision].small:
            notes.append(
                f"{precision}: batch 2 does not fit the largest memory here, so batches 1 and 2 were traced and "
                "no batch model was made; the line is through those two."
            )
        else:
            notes.append(
                f"{precision}: the traces at small batches do not extrapolate (the op sequence or a size "
                "changes with the batch), so every batch needed was traced."
            )
    if traced.shared:
        notes.append("tf32: fp32's traces (TF32 changes the math, not the tensors).")
    elif "tf32" in precisions:
        notes.append("tf32: traced like fp32 (TF32 changes the math, not the tensors).")
    return notes


def sessions_notes(sessions: Sequence[Any], target: Target) -> list[str]:
    """What the trace sessions counted: the attention back-ends emulated, the data-dependent values answered,
    and their own notes."""
    sdpa: dict = {}
    answers: dict = {}
    behaviour_notes: list[str] = []
    for session in sessions:
        for key, n in session.behaviour.sdpa_choices.items():
            sdpa[key] = sdpa.get(key, 0) + n
        for key, n in session.recorder.answers.items():
            answers[key] = answers.get(key, 0) + n
        behaviour_notes += [n for n in session.behaviour.notes if n not in behaviour_notes]
    notes = []
    choices = ", ".join(f"{backend} ({dtype}) x{n}" for (backend, dtype), n in sorted(sdpa.items()))
    if choices:
        notes.append(f"scaled-dot-product attention calls, emulated as on {target.name}: {choices}.")
    answered = ", ".join(f"{op} -> {value} x{n}" for (op, value), n in sorted(answers.items(), key=str))
    if answered:
        notes.append(f"data-dependent values answered on fake tensors: {answered}.")
    return notes + behaviour_notes


def time_note(traced: Any, workers: int, seconds: float) -> str:
    """Where the prediction's `seconds` went: building, tracing (`workers` at a time), replaying."""
    build_seconds, trace_seconds = traced.build_seconds, traced.trace_seconds
    at_once = f" ({workers} at a time)" if workers > 1 else ""
    return (
        f"time: {build_seconds:.1f} s to import and build the model, {trace_seconds:.1f} s tracing trials"
        f"{at_once}, {seconds - build_seconds - trace_seconds:.1f} s replaying them through the allocator model."
    )
