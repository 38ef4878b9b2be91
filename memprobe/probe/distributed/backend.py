"""The N-GPU trial back-end for the scan pipeline: torchrun launches of N ranks.

No torch here. The search runs its trials in a served group (group.py: one launch that runs trial after trial
while that is sound, a new one after a failure it cannot go on from; batch 1 and 2 first, which also report the
capacity), or with MEMPROBE_SERVED_GROUPS=0 one launch per trial. The proof's checks are each a launch of their
own (a fresh process group); a fresh check of a fit also times the group in its launch with throughput on, and
only fits if that run completes on every rank. A soak run, a timed run and a curve point are each a launch of their own. Once
B is timed, the 1-GPU baseline is timed at the same per-GPU batch in a 1-rank launch with no wrapper (plain
training on one GPU), and the scaling efficiency is throughput_N / (N x throughput_1). Where B does not fit on one
GPU (FSDP shards state, so its per-GPU edge can lie above the single-GPU one), both are timed at halved batches
until it does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from memprobe.core.estimates.memory_model import Attempt, MemoryModel
from memprobe.core.process.outcomes import ERROR, FIT, OOM
from memprobe.core.process.protocol import Flops, TrialSettings
from memprobe.core.process.rank_record import RankSetup, TimedSteps
from memprobe.core.records.records import CurvePoint, Timed
from memprobe.core.records.results import PrecisionResult
from memprobe.core.records.settings import PrecisionSettings, Scaling, Task
from memprobe.core.workload.registry import Workload
from memprobe.core.workload.strategies import NONE
from memprobe.probe.backend import ScanProgress
from memprobe.probe.curve import curve_point
from memprobe.probe.distributed.efficiency import scaling_record
from memprobe.probe.distributed.group import Group, SearchTrials, ServedGroup, ServedSearch, served_groups_on
from memprobe.probe.distributed.launch import LaunchRequest, LaunchResult, launch
from memprobe.probe.options import ScanOptions

Launcher = Callable[[LaunchRequest], LaunchResult]
BASELINE_HALVINGS = 3  # how often the common batch is halved when B does not train on one GPU
PG_TIMEOUT_S = 180.0  # a collective blocked this long ends its rank (a BERT-Large step takes < 1 s on an H100)


@dataclass(frozen=True)
class RankJob:
    """One precision of one workload on `world_size` ranks under `strategy`: what every launch of it shares, the
    progress it is announced to and the launcher that starts it (torchrun; tests give fakes)."""

    workload: Workload
    precision: str
    opts: ScanOptions
    world_size: int
    strategy: str
    progress: ScanProgress
    launcher: Launcher


class Launches:
    """Launches for one workload, precision, world size and strategy; announces each trial to `progress` and
    counts the process groups started (`launched`, of which `search` for the search), into `settings`."""

    def __init__(self, job: RankJob) -> None:
        self.workload, self.precision, self.opts = job.workload, job.precision, job.opts
        self.world_size, self.strategy = job.world_size, job.strategy
        self.progress, self.launcher = job.progress, job.launcher
        self.label = f"{job.world_size}x{job.strategy}"
        self.count = 0
        self.started = time.perf_counter()
        self.pg_timeout_s = min(PG_TIMEOUT_S, job.opts.timeout_s)
        self.counts: dict[str, Any] = {"process_groups": 0, "search_process_groups": 0, "served_search": False}

    def request(
        self,
        batches: list[int],
        measure: TimedSteps | None = None,
        world_size: int | None = None,
        strategy: str | None = None,
        steps: int | None = None,
    ) -> LaunchRequest:
        """The request of a launch of `batches` (`steps` steps each, default the trial's), then the timed run
        `measure` of the last one when given."""
        return LaunchRequest(
            self.workload,
            self.precision,
            strategy or self.strategy,
            world_size or self.world_size,
            batches,
            steps or self.opts.steps,
            measure,
            self.opts.device,
            self.opts.cpu_budget_bytes,
            settings=TrialSettings(cudnn_benchmark=self.opts.cudnn_benchmark),
            pg_timeout_s=self.pg_timeout_s,
            timeout_s=self.opts.timeout_s,
        )

    def _where(self, world: int) -> str:
        return f"{self.precision} {self.label if world > 1 else '1 GPU'}"

    def announce(self, batch: int, fresh: bool, world: int | None = None) -> None:
        """Say that a trial at `batch` starts (`fresh`: in a process group that ran nothing else)."""
        self.count += 1
        self.progress.trial_start(self.workload.name, self._where(world or self.world_size), self.count, batch, fresh)

    def answered(self, attempt: Attempt) -> None:
        """Stamp a trial with its place on the precision's timeline and report it."""
        attempt.done_at_s = round(time.perf_counter() - self.started, 3)
        self.progress.trial_end(attempt)

    def timed_launch(self, marks: dict[str, Any] | None, what: str) -> None:
        """Keep where a launch's time went (launch.timeline), with what it ran, under settings.launches."""
        if marks is not None:
            self.counts.setdefault("timelines", []).append({"for": what, **marks})

    def started_group(self, search: bool = True) -> None:
        """Count a process group started (by the search, unless `search` is False)."""
        self.counts["process_groups"] += 1
        if search:
            self.counts["search_process_groups"] += 1

    def run(
        self,
        batches: list[int],
        measure: TimedSteps | None = None,
        search: bool = False,
        what: str = "",
        **shape: Any,
    ) -> LaunchResult:
        """One launch of the request() of `batches`, `measure` and `shape` (world_size, strategy, steps); `search`: a
        search trial's launch; `what` names it in the launch's timeline (settings.launches.timelines)."""
        world = shape.get("world_size") or self.world_size
        self.announce(batches[0], True, world)
        self.started_group(search)
        result = self.launcher(self.request(batches, measure, **shape))
        self.timed_launch(
            getattr(result, "timeline", None), f"{what or ('search' if search else 'launch')} at {batches[-1]}"
        )
        for index, attempt in enumerate(result.attempts):
            if index:  # a later batch of the same launch (same process group)
                self.announce(attempt.batch, False, world)
            self.answered(attempt)
        return result

    @property
    def timed(self) -> TimedSteps:
        """The timed run at B (and at requested batches): the scan's warm-up and timed steps. No time budget cuts
        them: each rank would cut by its own clock, and a rank that runs one step more waits in a collective."""
        return TimedSteps(self.opts.warmup, self.opts.timed_steps)


class SearchLaunches(SearchTrials):
    """try_batch for the search with served groups off (MEMPROBE_SERVED_GROUPS=0): the first launch runs batch 1
    and 2 (it also reports the capacity), every later trial is a launch of its own, i.e. a fresh process group."""

    def __init__(self, launches: Launches, max_batch: int) -> None:
        super().__init__()
        self.launches = launches
        first = launches.run([1, 2] if max_batch >= 2 else [1], search=True)
        self.setup = first.setup
        self.ranks = first.ranks
        self._keep_first(first.attempts)

    def _run(self, batch: int) -> Attempt:
        return self.launches.run([batch], search=True).attempts[0]

    def kill(self) -> None:
        """Nothing to end: a launch ends its ranks itself, also when interrupted."""

    def close(self) -> None:
        """Nothing to end between launches."""


class LaunchTimer:
    """A curve point is a launch of its own: the trial at the batch, then the curve's timed run on every rank."""

    def __init__(self, launches: Launches) -> None:
        self.launches = launches

    def needs_process(self, batch: int) -> bool:
        return True

    def time(self, batch: int) -> CurvePoint:
        warmup, steps, _budget = self.launches.opts.curve_steps  # no step budget across ranks (Launches.timed)
        started = time.perf_counter()
        result = self.launches.run([batch], TimedSteps(warmup, steps), what="curve")
        attempt = result.attempts[0]
        point = curve_point(result.measure or _unmeasured(batch, attempt), fresh=True)
        point.wall_seconds = round(time.perf_counter() - started, 3)
        # What the launch cost beyond the timed steps (start-up, the trial, the warm-up): the curve's cost estimate
        # of the next point (probe/curve_cost.py) counts it as the process's start.
        timed_s = float(point.first_step_s or 0.0) + (point.timed_steps or 0) * float(point.step_median_s or 0.0)
        point.process_s = round(max(0.0, result.wall_seconds - timed_s), 3)
        return point

    def close(self) -> None:
        """Nothing to end between launches."""


class RanksBackend:
    """probe.backend.TrialBackend on a RankJob's `world_size` ranks under its `strategy`, launched by its `launcher`;
    `on_setup` makes the result's environment from what building the model gave on rank 0."""

    counts_flops = False  # a group's MFU against one GPU's peak would mislead; the scaling record says more

    def __init__(self, job: RankJob, on_setup: Callable[[RankSetup], dict[str, Any]]) -> None:
        self.opts, self.world_size, self.strategy, self.on_setup = job.opts, job.world_size, job.strategy, on_setup
        self.launcher = job.launcher
        self.launches = Launches(job)
        self.measurements: dict[int, Timed] = {}
        self.trials: SearchLaunches | ServedSearch | None = None
        self.setup: RankSetup | None = None

    def open(self, result: PrecisionResult, on_environment: Callable[[dict[str, Any]], None]) -> bool:
        """The first search trials (batch 1 and 2), in a served group unless MEMPROBE_SERVED_GROUPS=0. False, with
        `result` an error, when no rank got as far as building the model and not for lack of memory: the launch
        itself failed (an import, the launcher, NCCL)."""
        # The real launcher serves groups (group.ServedGroup); a test's fake launcher may offer its own `serve`.
        factory: Callable[[LaunchRequest], Group] | None = (
            ServedGroup if self.launcher is launch else getattr(self.launcher, "serve", None)
        )
        served = factory is not None and served_groups_on()
        self.launches.counts["served_search"] = served
        trials = self.trials = (
            ServedSearch(self.launches, self.opts.max_batch, factory)
            if factory is not None and served
            else SearchLaunches(self.launches, self.opts.max_batch)
        )
        setup = self.setup = trials.setup
        first = trials.first_attempts
        result.capacity_bytes = trials.capacity_bytes
        result.settings = PrecisionSettings(
            world_size=self.world_size,
            strategy=self.strategy,
            per_gpu=True,
            wrap=setup.wrap if setup else None,
            task=Task.from_dict(setup.task) if setup else None,
            weights_bytes=setup.weights_bytes if setup else None,
            weights_after_wrap_bytes=setup.weights_after_wrap_bytes if setup else None,
            flags=setup.environment.get("flags", {}) if setup else {},
            launches=self.launches.counts,  # the same dict: counted on as the precision goes on
        )
        if setup is None and first and first[0].outcome != OOM:
            result.status, result.error = "error", first[0].message
            return False
        if setup is not None:
            on_environment(self.on_setup(setup))
        return True

    def flops(self) -> Flops:
        return Flops()

    def search_trials(self) -> SearchLaunches | ServedSearch:
        assert self.trials is not None, "open() first"
        return self.trials

    def check(self, batch: int, time_it: Callable[[Attempt], bool] | None = None) -> Attempt:
        """A fresh launch at `batch`; with throughput on, a fit also runs the timed steps in that launch."""
        measure = self.opts.measure
        expect = getattr(self.launcher, "expect", None)
        if measure and expect is not None:  # the 1-GPU baseline comes after the proof: start it ahead
            expect(self.launches.request([batch], world_size=1, strategy=NONE))
        result = self.launches.run([batch], self.launches.timed if measure else None, what="check")
        attempt = result.attempts[0]
        if not (attempt.fits and measure):
            return attempt
        measured = result.measure or Timed(outcome=ERROR, error="no measurement came back")
        if measured.outcome == FIT:
            self.measurements[batch] = measured
            return attempt
        return Attempt(
            batch,
            measured.outcome or ERROR,
            measured.peak_allocated,
            measured.peak_reserved,
            attempt.seconds,
            f"ran the {self.opts.steps}-step trial, then failed in the timed run "
            f"(step {measured.failed_at_step}): {str(measured.error or '')[:200]}",
            fresh=True,
            wall_seconds=attempt.wall_seconds,
            trial_fit=True,
        )

    def soak(self, batch: int, steps: int) -> Attempt:
        attempt = self.launches.run([batch], steps=steps, what="soak").attempts[0]
        attempt.fresh = True
        return attempt

    def measure(self, batch: int) -> Timed:
        result = self.launches.run([batch], self.launches.timed, what="timed")
        return result.measure or _unmeasured(batch, result.attempts[0])

    def curve_timer(self, model: MemoryModel | None, capacity_bytes: float | None, max_batch: int) -> LaunchTimer:
        return LaunchTimer(self.launches)

    def fit_check(self) -> str:
        opts = self.opts
        return f"{opts.steps} steps on each of {self.world_size} ranks in a fresh process group" + (
            f", then {opts.warmup} warm-up + {opts.timed_steps} timed steps" if opts.measure else ""
        )

    def finish(self, result: PrecisionResult) -> None:
        """The 1-GPU baseline at B and the scaling efficiency, under settings.scaling."""
        if self.opts.measure and result.max_batch:
            result.settings.scaling = Scaling.from_dict(self._baseline(result.max_batch, result.throughput))

    def _baseline(self, batch: int, group: Timed | None) -> dict[str, Any]:
        """Time one GPU (1 rank, no wrapper) at `batch`; halve the common batch while it does not fit."""
        note = ""

        def record(group: Timed | None, single: Timed | None, note: str) -> dict[str, Any]:
            return scaling_record(
                self.world_size, batch, group.to_dict() if group else None, single.to_dict() if single else None, note
            )

        for _ in range(BASELINE_HALVINGS + 1):
            single = self.launches.run([batch], self.launches.timed, world_size=1, strategy=NONE, what="1 GPU").measure
            if single and single.outcome == FIT and group and group.outcome == FIT:
                return record(group, single, note)
            if group is None or group.outcome != FIT or batch <= 1:
                return record(group, single, note or "a timed run did not complete")
            note = (
                f"per-GPU max batch does not train on one GPU ({single and single.outcome}); "
                f"both timed at batch {batch // 2}"
            )
            batch //= 2
            group = self.launches.run([batch], self.launches.timed, what="timed").measure
        return record(group, None, note)

    def close(self) -> None:
        """Stop the search's served group if it is still up (the pipeline closes it after the search; not where
        the precision ended before searching)."""
        if self.trials is not None:
            self.trials.close()


def _unmeasured(batch: int, attempt: Attempt) -> Timed:
    """The timed run of a launch that brought none back: the trial's failure, or an error when the trial fitted."""
    return Timed(
        batch=batch,
        outcome=attempt.outcome if not attempt.fits else ERROR,
        error=attempt.message or "no measurement came back",
    )
