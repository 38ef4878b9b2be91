"""Throughput curve of one precision: the ladder of batch sizes up to B, the order they are timed in, and b*.

No torch here: pure functions, tested with fakes. The points are timed by probe/curve_run.py (processes, budget,
the knee's bisection); the knee itself is core/estimates/knee.py, a point's estimated cost probe/curve_cost.py.
"""

from __future__ import annotations

from typing import Any

from memprobe.core.process.outcomes import FIT
from memprobe.core.records.records import CurvePoint, Timed

DEFAULT_POINTS = 8  # at most this many batches per curve, B included
DEFAULT_BUDGET_S = 45.0  # no curve point starts that its estimated cost says would end past this (seconds)
SKIPPED = "skipped"  # a curve point not timed (its estimate would overrun the budget); not a trial outcome
# A power of two this close under B adds little to the curve (the step differs from B's by < 1/8)
# and costs a whole timed run: skipped.
NEAR_MAX_SHARE = 7 / 8
PHASES = ("max", "coarse", "knee", "refine")  # why a point was timed: B, the coarse pass, bisection, the rest


class CurveError(ValueError):
    """An explicit ladder that cannot be used (no batch size >= 1)."""


def ladder(max_batch: int, points: int = DEFAULT_POINTS, requested: list[int] | None = None) -> list[int]:
    """The batch sizes to time, ascending, B last.

    Default: the largest powers of two below B (at most `points` - 1 of them, none within
    NEAR_MAX_SHARE of B), then B itself. `requested` replaces the powers of two (sizes above B are
    dropped: they do not train); B is always added, since the like-for-like figures need it.
    Empty when B < 1. Raises CurveError for `points` < 1 or a requested size < 1.
    """
    if points < 1:
        raise CurveError(f"a curve needs at least 1 point, got {points}")
    if requested is not None and any(b < 1 for b in requested):
        raise CurveError(f"curve batch sizes must be at least 1, got {sorted(requested)}")
    if max_batch < 1:
        return []
    if requested:
        below = sorted({b for b in requested if b < max_batch})
    else:
        below, power = [], 1
        while power < max_batch:
            if power <= NEAR_MAX_SHARE * max_batch:
                below.append(power)
            power *= 2
    return below[len(below) - (points - 1) :] + [max_batch] if points > 1 else [max_batch]


def spread_order(batches: list[int]) -> list[int]:
    """`batches` in the order that covers their range soonest: the largest (the neighbour of B, where a fall
    to B shows), the smallest, then each time the batch in the middle of the widest gap left (in ladder
    steps; the upper middle on a tie). A curve cut short by its budget thus still spans small to large."""
    ordered = sorted(set(batches))
    if len(ordered) <= 2:
        return ordered[::-1]
    chosen = [len(ordered) - 1, 0]
    while len(chosen) < len(ordered):
        index = sorted(chosen)
        _, lo, hi = max((b - a, a, b) for a, b in zip(index, index[1:]))
        chosen.append((lo + hi + 1) // 2)
    return [ordered[i] for i in chosen]


def phases(below: list[int]) -> tuple[list[int], list[int]]:
    """The batches below B as two passes: coarse (every other batch, counted down from the largest) and refine
    (the rest), each in spread_order. The knee's bisection runs between the two."""
    descending = sorted(set(below), reverse=True)
    return spread_order(descending[::2]), spread_order(descending[1::2])


def curve_point(measured: Timed, fresh: bool) -> CurvePoint:
    """One curve entry from a timed run (worker.measure's answer): batch, outcome, samples/s, units/s,
    step time median/p10/p90 and first/warm-up step (seconds) and peak allocated/reserved bytes; failures keep
    their error."""
    point = CurvePoint(measured.batch, measured.outcome, fresh)  # type: ignore[arg-type]
    if measured.outcome == FIT:
        times = measured.step_time
        point.samples_per_s, point.units_per_s = measured.samples_per_s, measured.units_per_s
        if times is not None:
            point.step_median_s, point.step_p10_s = times.get("median_s"), times.get("p10_s")
            point.step_p90_s, point.timed_steps = times.get("p90_s"), times.get("steps")
        point.first_step_s, point.warmup_step_s = measured.first_step_seconds, measured.warmup_step_seconds
        point.prefill_tokens_per_s, point.decode_tokens_per_s = (
            measured.prefill_tokens_per_s,
            measured.decode_tokens_per_s,
        )
    else:
        point.error = str(measured.error or "")[:300]
    point.peak_allocated, point.peak_reserved = measured.peak_allocated, measured.peak_reserved
    return point


def skipped_point(batch: int, phase: str, estimate_s: float, left_s: float, budget_s: float) -> CurvePoint:
    """A point that was not started: its estimate would have ended past the curve's budget."""
    return CurvePoint(
        batch,
        SKIPPED,
        False,
        phase=phase,
        estimated_s=round(estimate_s, 1),
        error=f"estimated {estimate_s:.1f} s, {max(0.0, left_s):.1f} s of the {budget_s:g} s curve budget left",
    )


def curve_text(point: CurvePoint, unit: str = "samples", n_name: str = "batch") -> str:
    """One progress line for a curve point in the workload's unit and axis, e.g.
    "curve: batch 512 -> 6216.0 images/s (shared process)" or "curve: seq len 8192 -> 31583.9 tokens/s (...)"."""
    where = "fresh process" if point.fresh else "shared process"
    if point.phase == "knee":
        where = f"knee bisection, {where}"
    head = f"curve: {n_name} {point.batch} ->"
    if point.outcome == SKIPPED:
        return f"{head} skipped ({point.phase or 'ladder'}): {point.error or ''}"
    if point.outcome != FIT:
        return f"{head} {point.outcome} ({where}): {(point.error or '')[:120]}"
    speed = point.units_per_s
    if speed is None:  # a point from before units were recorded: samples are all it has
        speed, unit = point.samples_per_s, "samples"
    return f"{head} {speed:.1f} {unit}/s ({where})"


def best_point(points: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The fitting point with the highest samples/s (ties: the smaller batch); None when none fits."""
    fits = [p for p in points if p.get("outcome") == FIT and p.get("samples_per_s")]
    if not fits:
        return None
    return max(fits, key=lambda p: (p["samples_per_s"], -p["batch"]))


def summary(points: list[dict[str, Any]]) -> dict[str, Any]:
    """best_batch, best_samples_per_s and best_units_per_s of a curve (None when no point fits)."""
    best = best_point(points)
    return {
        "best_batch": best["batch"] if best else None,
        "best_samples_per_s": best["samples_per_s"] if best else None,
        "best_units_per_s": best.get("units_per_s") if best else None,
    }
