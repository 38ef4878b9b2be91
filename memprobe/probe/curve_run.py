"""Time one precision's throughput curve within its budget: cover the ladder, bisect the knee, store b* and the knee.

No torch: the points run in trial processes (runner.Worker). Order: B's point is the proof's timed run; then a
coarse pass over every other ladder batch (largest, smallest, then the middles: probe.curve.phases), then the
knee's bisection wherever throughput falls by a counted step (core/estimates/knee.py), then the rest of the ladder. No
point starts whose estimated cost (probe/curve_cost.py) would end past the budget: it is kept as a skipped point
with the reason, and b* is then the best of the points timed, over the range they cover.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from memprobe.core.estimates.knee import KNEE_RESOLUTION, bisect_batch, falls, knee, knee_fields, resolved
from memprobe.core.estimates.memory_model import MemoryModel
from memprobe.core.process.outcomes import CRASH, TIMEOUT
from memprobe.core.records.records import CurvePoint, Timed
from memprobe.core.records.results import PrecisionResult
from memprobe.core.workload.registry import Workload
from memprobe.core.workload.variants import axis_name
from memprobe.probe.backend import CurveTimer
from memprobe.probe.curve import curve_point, curve_text, ladder, phases, skipped_point, summary
from memprobe.probe.curve_cost import PointCost, from_precision
from memprobe.probe.options import ScanOptions
from memprobe.probe.runner import Worker, WorkerError, WorkerFactory, WorkerSpec


class PointTimer:
    """Runs one curve point's timed run (`measure(worker, batch)`) in a trial process.

    A batch whose predicted peak (`model`) exceeds `fresh_above_bytes`, and B, run in a fresh process when the
    factory forks cheaply; the others share one process, replaced after a crash or a timeout and closed before
    a fresh point runs (its model and caches must not hold memory then). Never raises for a failed point."""

    def __init__(
        self,
        factory: WorkerFactory,
        spec: WorkerSpec,
        measure: Callable[[Worker, int], Timed],
        model: MemoryModel | None,
        fresh_above_bytes: float | None,
        max_batch: int,
    ) -> None:
        self.factory, self.spec, self.measure, self.model = factory, spec, measure, model
        self.fresh_above_bytes, self.max_batch = fresh_above_bytes, max_batch
        self.shared: Worker | None = None

    def is_fresh(self, batch: int) -> bool:
        """Whether the point at `batch` runs in a process of its own."""
        return self.factory.forks and (
            batch == self.max_batch
            or self.model is None
            or self.fresh_above_bytes is None
            or self.model.predict(batch) > self.fresh_above_bytes
        )

    def needs_process(self, batch: int) -> bool:
        """Whether the point at `batch` must start a trial process (a fresh one, or the first shared one)."""
        return self.is_fresh(batch) or self.shared is None

    def time(self, batch: int) -> CurvePoint:
        """The curve point at `batch` (probe.curve.curve_point) with its wall time and, where it started a
        process, the seconds that took (`process_s`)."""
        fresh = self.is_fresh(batch)
        if fresh:
            self.close()
        started = time.perf_counter()
        try:
            worker = self.shared if self.shared is not None and not fresh else self.factory.fresh(self.spec)
        except WorkerError as exc:
            return CurvePoint(batch, exc.kind, True, error=str(exc)[:300])
        process_s = time.perf_counter() - started if worker is not self.shared else 0.0
        self.shared = None  # held by `worker` now; given back below when it may be reused
        try:
            measured = self.measure(worker, batch)
        except BaseException:
            worker.kill()
            raise
        point = curve_point(measured, fresh=fresh)
        if fresh or measured.outcome in (CRASH, TIMEOUT):
            closing = time.perf_counter()
            worker.close()
            process_s += time.perf_counter() - closing if fresh else 0.0
        else:
            self.shared = worker
        point.wall_seconds = round(time.perf_counter() - started, 3)
        if process_s:
            point.process_s = round(process_s, 3)
        return point

    def close(self) -> None:
        """End the shared process, if any."""
        if self.shared is not None:
            self.shared.close()
            self.shared = None


def measure_curve(
    timer: CurveTimer,
    batches: list[int],
    at_max: Timed | None,
    max_batch: int,
    cost: PointCost,
    budget_s: float | None,
    report: Callable[[CurvePoint], None],
    clock: Callable[[], float] = time.perf_counter,
) -> list[CurvePoint]:
    """Time the curve's points and return them ascending (B's is `at_max`, the proof's timed run, when given).

    Order: the coarse pass, then while a counted fall has an unresolved bracket its bisection (a ladder batch
    inside it first), else the next refine batch. A point whose estimate (`cost`, margin included) exceeds what
    is left of `budget_s` (None: no limit) is kept as skipped and not started; a bisection skipped ends that
    bracket. `report` gets each point when it is done. Never raises for a failed point; the shared process is
    ended on return (a point interrupted kills its own process)."""
    started = clock()
    points: dict[int, CurvePoint] = {}

    def add(point: CurvePoint, phase: str) -> None:
        point.phase = point.phase or phase
        points[point.batch] = point
        report(point)

    def run(batch: int, phase: str) -> bool:
        estimate = cost.estimate(batch, timer.needs_process(batch))
        if budget_s is not None and estimate > budget_s - (clock() - started):
            add(skipped_point(batch, phase, estimate, budget_s - (clock() - started), budget_s), phase)
            return False
        point = timer.time(batch)
        point.estimated_s = round(estimate, 1)
        cost.learn(point)
        add(point, phase)
        return True

    try:
        if at_max is not None:
            add(curve_point(at_max, fresh=True), "max")
        elif max_batch in batches:
            run(max_batch, "max")
        coarse, refine = phases([b for b in batches if b < max_batch])
        for planned in coarse:
            run(planned, "coarse")
        given_up: set[tuple[int, int]] = set()
        while True:
            fall = next(
                (
                    f
                    for f in falls(p.to_dict() for p in points.values())
                    if not f.resolved and (f.before, f.after) not in given_up
                ),
                None,
            )
            if fall is not None:
                middle = bisect_batch(fall, refine, points)
                if middle is None or not run(middle, "knee"):
                    given_up.add((fall.before, fall.after))
                continue
            rest = [b for b in refine if b not in points]
            if not rest:
                break
            run(rest[0], "refine")
    finally:
        timer.close()
    return sorted(points.values(), key=lambda p: p.batch)


def add_curve(
    result: PrecisionResult, timer: CurveTimer, workload: Workload, opts: ScanOptions, note: Callable[[str], None]
) -> None:
    """Time the curve up to B (B's point is the proof's timed run) with `timer` (the trial back-end's) and store the
    points, b* and the knee in `result`, also when interrupted (the points timed so far). `note` gets one line per
    point and a summary."""
    started = time.perf_counter()
    max_batch = result.max_batch or 0
    batches = ladder(max_batch, opts.curve_points, opts.curve_batches or None)
    at_max = result.throughput
    unit = str((at_max.unit if at_max is not None else None) or workload.unit)
    n_name = axis_name(workload.params)
    warmup, timed, timed_budget = opts.curve_steps
    cost = from_precision(
        result.attempts, result.checks, at_max, result.settings, opts.trial_steps, warmup, timed, timed_budget
    )
    budget = opts.curve_budget
    note(f"throughput curve at {n_name} {', '.join(map(str, batches))}" + (f" (budget {budget:g} s)" if budget else ""))
    done: list[CurvePoint] = []

    def report(point: CurvePoint) -> None:
        done.append(point)
        note(curve_text(point, unit, n_name))

    try:
        measure_curve(timer, batches, at_max, max_batch, cost, budget, report)
    finally:  # interrupted too: the points timed so far are kept
        result.curve = sorted(done, key=lambda p: p.batch)
        points = [p.to_dict() for p in result.curve]  # best point and knee: dict math over the file's points
        for key, value in {**summary(points), **knee_fields(knee(points))}.items():
            setattr(result, key, value)
        result.curve_seconds = round(time.perf_counter() - started, 2)
        result.settings.curve_cost = cost.to_dict() | {"budget_s": budget}
    for line in summary_lines(result, unit, n_name):
        note(line)


def summary_lines(result: PrecisionResult, unit: str, n_name: str) -> list[str]:
    """What a finished curve found, for the progress output: b* (and over what it is the best), the knee."""
    if result.best_batch is None:
        return [f"no curve point fits; curve took {result.curve_seconds:.1f} s"]
    at_max = next((p.units_per_s for p in result.curve if p.batch == result.max_batch and p.fits), None)
    best = result.best_units_per_s or result.best_samples_per_s or 0.0
    drop = (
        f" ({at_max / best - 1:+.1%} at B = {result.max_batch})"
        if at_max and result.best_batch != result.max_batch
        else " (b* = B)"
    )
    lines = [
        f"best {n_name} b* = {result.best_batch}: {best:.1f} {unit}/s{drop}; curve took {result.curve_seconds:.1f} s"
    ]
    skipped, timed = result.curve_skipped, result.curve_timed
    if skipped:
        lines.append(
            f"b* is the best of the {len(timed)} points timed ({n_name} {min(timed)}-{max(timed)}); "
            f"skipped by the budget: {', '.join(map(str, sorted(skipped)))}"
        )
    if result.knee_batch is not None and result.knee_after_batch is not None:
        before, after = result.knee_batch, result.knee_after_batch
        if resolved(before, after):
            how = f"located within {KNEE_RESOLUTION:.0%}"
        elif any(before < b < after for b in skipped):
            how = f"bracket not narrowed to {KNEE_RESOLUTION:.0%}: the budget ended"
        else:
            how = f"bracket not narrowed to {KNEE_RESOLUTION:.0%}: a point inside it did not fit"
        lines.append(f"knee at {n_name} {before}: throughput {result.knee_drop:+.1%} at {after} ({how})")
    return lines
