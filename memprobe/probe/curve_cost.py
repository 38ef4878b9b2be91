"""What a throughput-curve point will cost, estimated before it starts from what the precision already measured.

No torch. A point's wall time is: a trial process started (when the point needs a new one), the first step at a
batch size new to that process (it carries the size's set-up: NasNet-Large pays 16-25 s of cuDNN set-up per new
size on an H200, ResNet-50 under a second), the other warm-up steps and the timed steps (cut to fit the timed-step
budget as the trial process cuts them). The parts come from the precision's own record:

- process start: fresh search trials and failed proof checks, wall time minus trial time (without them, the time
  the precision's first process took to be ready, which includes the fork server's imports: an upper bound);
- set-up of a new size: the fitting trials' time minus their steps (the first trial of the first process is left
  out: it also pays the process's lazy initialisation), and the first step's excess in the timed run at B;
- step time: the timed run at B, then every curve point timed, interpolated linearly in the batch.

Each point timed updates the estimate (its step time, its first step's excess, its process start), and every
estimate is scaled by COST_MARGIN before the curve holds it against its budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Sequence

from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.process.outcomes import FIT
from memprobe.core.records.records import CurvePoint, Timed
from memprobe.core.records.settings import PrecisionSettings
from memprobe.core.workload.run_length import timed_steps_within

# Step times vary by a few percent, a new size's set-up by more (NasNet-Large: 16-28 s between sizes), so an
# estimate is scaled by this before it is held against the curve's budget.
COST_MARGIN = 1.25


@dataclass
class PointCost:
    """Seconds a curve point will take. `steps` maps a batch to its measured seconds per step; `warmup` and
    `timed` are the point's warm-up and timed steps, `timed_budget_s` the budget its timed steps are cut to."""

    process_s: float
    setup_s: float
    warmup: int
    timed: int
    timed_budget_s: float | None = None
    steps: dict[int, float] = field(default_factory=dict)
    margin: float = COST_MARGIN

    def step_at(self, batch: int) -> float:
        """Seconds per step at `batch`: interpolated between measured batches, proportional beyond them (0.0
        when nothing was timed)."""
        known = sorted(self.steps.items())
        if not known:
            return 0.0
        for (b0, t0), (b1, t1) in pairwise(known):
            if b0 <= batch <= b1:
                return t0 + (t1 - t0) * (batch - b0) / (b1 - b0)
        b, t = known[0] if batch < known[0][0] else known[-1]
        return t * batch / b

    def estimate(self, batch: int, new_process: bool) -> float:
        """Seconds the point at `batch` should take, margin included; `new_process` when it needs a new trial
        process (a fresh one, or the first of the shared ones)."""
        step = self.step_at(batch)
        first = step + self.setup_s
        warmup = max(1, self.warmup)
        # The trial process estimates a step from the warm-up steps after the first; with one warm-up step,
        # from the first, set-up included (Session._steps_within).
        timed = timed_steps_within(self.timed, self.timed_budget_s, step if warmup > 1 else first)
        seconds = (self.process_s if new_process else 0.0) + first + (warmup - 1 + timed) * step
        return seconds * self.margin

    def learn(self, point: CurvePoint) -> None:
        """Take in a timed curve point: its step time, the excess of its first step (a new size's set-up) and the
        seconds its process took to start. Points that did not fit teach only the process start."""
        if point.process_s:
            self.process_s = max(self.process_s, float(point.process_s))
        if point.outcome != FIT or not point.step_median_s:
            return
        step = float(point.step_median_s)
        self.steps[int(point.batch)] = step
        if point.first_step_s:
            self.setup_s = max(self.setup_s, float(point.first_step_s) - float(point.warmup_step_s or step))

    def to_dict(self) -> dict[str, Any]:
        """What the estimates rest on, for the result file (seconds)."""
        return {
            "process_s": round(self.process_s, 3),
            "setup_s": round(self.setup_s, 3),
            "margin": self.margin,
            "warmup": self.warmup,
            "timed": self.timed,
            "timed_budget_s": self.timed_budget_s,
        }


def _excess(entry: Attempt, cost: PointCost, trial_steps: int) -> float:
    """Seconds a fitting trial took beyond its steps: the set-up of its batch size."""
    return float(entry.seconds or 0.0) - (entry.steps or trial_steps) * cost.step_at(int(entry.batch))


def from_precision(
    attempts: Sequence[Attempt],
    checks: Sequence[Attempt],
    at_max: Timed | None,
    settings: PrecisionSettings,
    trial_steps: int,
    warmup: int,
    timed: int,
    timed_budget_s: float | None,
) -> PointCost:
    """The estimator for one precision's curve from its search `attempts` and proof `checks`, the timed run at B
    (`at_max`), its `settings` (first_process_ready_seconds) and the curve point's steps (`trial_steps` is what a
    trial ran when an attempt does not say)."""
    cost = PointCost(0.0, 0.0, warmup, timed, timed_budget_s)
    median = at_max.step_time.get("median_s") if at_max and at_max.outcome == FIT and at_max.step_time else None
    if at_max and at_max.batch is not None and median:
        cost.steps[int(at_max.batch)] = float(median)
    starts = [
        float(a.wall_seconds) - float(a.seconds or 0.0)
        for a in [*attempts, *(c for c in checks if c.outcome != FIT)]
        if a.wall_seconds
    ]
    cost.process_s = max(starts) if starts else float(settings.first_process_ready_seconds or 0.0)
    fits = [a for a in attempts[1:] if a.outcome == FIT] + [c for c in checks if c.outcome == FIT]
    cost.setup_s = max([0.0, *(_excess(a, cost, trial_steps) for a in fits)])
    if at_max and at_max.first_step_seconds and at_max.warmup_step_seconds:
        # the timed run at B follows B's trial in its process, so its first step rarely sets anything up; when
        # it does (a compilation per size), it says so here
        cost.setup_s = max(cost.setup_s, float(at_max.first_step_seconds) - float(at_max.warmup_step_seconds))
    return cost
