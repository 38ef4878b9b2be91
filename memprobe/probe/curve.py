"""Throughput curve of one precision: pick a ladder of batch sizes up to B, time each, find the best batch b*.

No torch here. The ladder and the best-batch choice are pure functions (tested with fakes); `measure_curve`
times the ladder in trial processes: batches far below the edge share one process (no fresh start-up
per point), batches whose predicted peak is near the capacity each get a fresh one, as in the search.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from memprobe.probe.errors import CRASH, FIT, TIMEOUT
from memprobe.probe.runner import WorkerError, WorkerFactory, WorkerSpec
from memprobe.probe.search import MemoryModel

DEFAULT_POINTS = 8  # at most this many batches per curve, B included
DEFAULT_BUDGET_S = 45.0  # no new curve point starts after this many seconds of one precision's curve
SKIPPED = "skipped"  # a curve point not timed (budget spent); not a trial outcome
# A power of two this close under B adds little to the curve (the step differs from B's by < 1/8)
# and costs a whole timed run: skipped.
NEAR_MAX_SHARE = 7 / 8


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
    return below[len(below) - (points - 1):] + [max_batch] if points > 1 else [max_batch]


def curve_point(measured: dict[str, Any], fresh: bool) -> dict[str, Any]:
    """One curve entry from a timed run (worker.measure's answer): batch, outcome, samples/s, units/s,
    step time median/p10/p90 (seconds) and peak allocated/reserved bytes; failures keep their error."""
    point: dict[str, Any] = {"batch": measured.get("batch"), "outcome": measured.get("outcome"), "fresh": fresh}
    if measured.get("outcome") == FIT:
        times = measured.get("step_time") or {}
        point.update(samples_per_s=measured.get("samples_per_s"), units_per_s=measured.get("units_per_s"),
                     step_median_s=times.get("median_s"), step_p10_s=times.get("p10_s"),
                     step_p90_s=times.get("p90_s"), timed_steps=times.get("steps"))
    else:
        point["error"] = str(measured.get("error", ""))[:300]
    point.update(peak_allocated=measured.get("peak_allocated"), peak_reserved=measured.get("peak_reserved"))
    return point


def curve_text(point: dict[str, Any]) -> str:
    """One progress line for a curve point, e.g. "curve: batch 512 -> 6216.0 samples/s (shared process)"."""
    where = "fresh process" if point.get("fresh") else "shared process"
    if point.get("outcome") != FIT:
        return f"curve: batch {point.get('batch')} -> {point.get('outcome')} ({where}): {point.get('error', '')[:120]}"
    return f"curve: batch {point['batch']} -> {point['samples_per_s']:.1f} samples/s ({where})"


def best_point(points: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The fitting point with the highest samples/s (ties: the smaller batch); None when none fits."""
    fits = [p for p in points if p.get("outcome") == FIT and p.get("samples_per_s")]
    if not fits:
        return None
    return max(fits, key=lambda p: (p["samples_per_s"], -p["batch"]))


def summary(points: list[dict[str, Any]]) -> dict[str, Any]:
    """best_batch, best_samples_per_s and best_units_per_s of a curve (None when no point fits)."""
    best = best_point(points)
    return {"best_batch": best["batch"] if best else None,
            "best_samples_per_s": best["samples_per_s"] if best else None,
            "best_units_per_s": best.get("units_per_s") if best else None}


def measure_curve(factory: WorkerFactory, spec: WorkerSpec, batches: list[int], at_max: dict[str, Any] | None,
                  max_batch: int, measure: Callable[[Any, int], dict[str, Any]], model: MemoryModel | None,
                  fresh_above_bytes: float | None, report: Callable[[dict[str, Any]], None],
                  budget_s: float | None = None) -> list[dict[str, Any]]:
    """Time every batch of the ladder and return the curve's points, ascending.

    B's point is `at_max` (the timed run of the fresh-process proof) when given. `measure(worker, batch)`
    runs one timed run in a worker. A batch whose predicted peak (`model`) exceeds `fresh_above_bytes`
    runs in a fresh process when the factory forks cheaply; the others share one process, replaced
    after a crash or a timeout. Batches run from the largest down (b* is rarely among the smallest),
    and once `budget_s` seconds have passed the rest are kept as "skipped" points: a new batch size
    can cost seconds of set-up (NasNet-Large: ~14 s per new size on the H100, however small).
    `report` gets each point when it is done. Never raises for a failed point: it is kept with its outcome.
    """
    points: list[dict[str, Any]] = []
    shared = None
    started = time.perf_counter()
    try:
        for batch in sorted(batches, reverse=True):
            if budget_s is not None and time.perf_counter() - started > budget_s and batch != max_batch:
                points.append({"batch": batch, "outcome": SKIPPED, "fresh": False,
                               "error": f"curve time budget of {budget_s:g} s spent"})
                report(points[-1])
                continue
            if batch == max_batch and at_max is not None:
                points.append(curve_point(at_max, fresh=True))
                report(points[-1])
                continue
            fresh = factory.forks and (batch == max_batch or model is None or fresh_above_bytes is None
                                       or model.predict(batch) > fresh_above_bytes)
            if fresh and shared is not None:
                shared.close()  # its model and caches must not hold memory while a near-edge point runs
                shared = None
            try:
                worker = factory.fresh(spec) if fresh or shared is None else shared
            except WorkerError as exc:
                points.append({"batch": batch, "outcome": exc.kind, "fresh": True, "error": str(exc)[:300]})
                report(points[-1])
                continue
            started = time.perf_counter()
            try:
                measured = measure(worker, batch)
            except BaseException:
                worker.kill()
                raise
            point = curve_point(measured, fresh=fresh)
            point["wall_seconds"] = round(time.perf_counter() - started, 3)
            points.append(point)
            report(point)
            if fresh or measured.get("outcome") in (CRASH, TIMEOUT):
                worker.close()
                shared = None
            else:
                shared = worker
    finally:
        if shared is not None:
            shared.close()
    return sorted(points, key=lambda p: p["batch"])
