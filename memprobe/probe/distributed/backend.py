"""The N-GPU trial back-end: every trial a fresh torchrun launch (a fresh process group), for the scan pipeline.

No torch here. The search runs batch 1 and 2 in the first launch (which also reports the capacity), then one
launch per batch; a fresh check of a fit also times the group in its launch with throughput on, and only fits if
that run completes on every rank. A soak run, a timed run and a curve point are each a launch of their own. Once
B is timed, the 1-GPU baseline is timed at the same per-GPU batch in a 1-rank launch with no wrapper (plain
training on one GPU), and the scaling efficiency is throughput_N / (N x throughput_1). Where B does not fit on one
GPU (FSDP shards state, so its per-GPU edge can lie above the single-GPU one), both are timed at halved batches
until it does.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from memprobe.core.memory_model import Attempt, MemoryModel
from memprobe.core.outcomes import ERROR, FIT, OOM
from memprobe.core.records import CurvePoint, Timed
from memprobe.core.registry import Workload
from memprobe.core.results import PrecisionResult
from memprobe.probe.backend import Progress
from memprobe.probe.curve import curve_point
from memprobe.probe.distributed.efficiency import scaling_record
from memprobe.probe.distributed.launch import LaunchRequest, LaunchResult
from memprobe.probe.options import ScanOptions
from memprobe.probe.protocol import Flops
from memprobe.training.wrap import NONE

Launcher = Callable[[LaunchRequest], LaunchResult]
BASELINE_HALVINGS = 3  # how often the common batch is halved when B does not train on one GPU
PG_TIMEOUT_S = 180.0  # a collective blocked this long ends its rank (a BERT-Large step takes < 1 s on an H100)


class Launches:
    """Launches for one workload, precision, world size and strategy; announces each to `progress`."""

    def __init__(
        self,
        workload: Workload,
        precision: str,
        opts: ScanOptions,
        world_size: int,
        strategy: str,
        progress: Progress,
        launcher: Launcher,
    ) -> None:
        self.workload, self.precision, self.opts = workload, precision, opts
        self.world_size, self.strategy, self.progress, self.launcher = world_size, strategy, progress, launcher
        self.label = f"{world_size}x{strategy}"
        self.count = 0
        self.started = time.perf_counter()
        self.pg_timeout_s = min(PG_TIMEOUT_S, opts.timeout_s)

    def run(
        self,
        batches: list[int],
        measure: dict[str, Any] | None = None,
        world_size: int | None = None,
        strategy: str | None = None,
        steps: int | None = None,
    ) -> LaunchResult:
        """One launch of `batches` (`steps` steps each, default the trial's), then the timed run `measure`
        ({"warmup", "steps"}) of the last one when given."""
        world = world_size or self.world_size
        where = f"{self.precision} {self.label if world > 1 else '1 GPU'}"
        self.count += 1
        self.progress.trial_start(self.workload.name, where, self.count, batches[0], True)
        request = LaunchRequest(
            self.workload.to_dict(),
            self.precision,
            strategy or self.strategy,
            world,
            batches,
            steps or self.opts.steps,
            measure,
            self.opts.device,
            self.opts.cpu_budget_bytes,
            settings={"cudnn_benchmark": self.opts.cudnn_benchmark},
            pg_timeout_s=self.pg_timeout_s,
            timeout_s=self.opts.timeout_s,
        )
        result = self.launcher(request)
        for index, attempt in enumerate(result.attempts):
            attempt.done_at_s = round(time.perf_counter() - self.started, 3)
            if index:  # a later batch of the same launch (same process group)
                self.count += 1
                self.progress.trial_start(self.workload.name, where, self.count, attempt.batch, False)
            self.progress.trial_end(attempt)
        return result

    @property
    def timed(self) -> dict[str, Any]:
        """The timed run at B (and at requested batches): the scan's warm-up and timed steps. No time budget cuts
        them: each rank would cut by its own clock, and a rank that runs one step more waits in a collective."""
        return {"warmup": self.opts.warmup, "steps": self.opts.timed_steps}


class SearchLaunches:
    """try_batch for the search: the first launch runs batch 1 and 2 (it also reports the capacity),
    every later trial is a launch of its own, i.e. a fresh process group."""

    def __init__(self, launches: Launches, max_batch: int) -> None:
        self.launches = launches
        self.cached: dict[int, Attempt] = {}
        self.predicted: int | None = None  # every trial is fresh here: the predicted max batch changes nothing
        self.first = launches.run([1, 2] if max_batch >= 2 else [1])
        for attempt in self.first.attempts:
            self.cached[attempt.batch] = attempt

    @property
    def capacity_bytes(self) -> int | None:
        """The smallest capacity any rank reported (free + reserved after building the model)."""
        values = [r["setup"]["capacity_bytes"] for r in self.first.ranks if r and r.get("setup")]
        values = [v for v in values if v]
        return min(values) if values else None

    def __call__(self, batch: int) -> Attempt:
        if batch in self.cached:
            return self.cached.pop(batch)
        return self.launches.run([batch]).attempts[0]

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
        result = self.launches.run([batch], {"warmup": warmup, "steps": steps})
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
    """probe.backend.TrialBackend on `world_size` ranks under `strategy`, launched by `launcher` (torchrun)."""

    counts_flops = False  # a group's MFU against one GPU's peak would mislead; the scaling record says more

    def __init__(
        self,
        workload: Workload,
        precision: str,
        opts: ScanOptions,
        world_size: int,
        strategy: str,
        progress: Progress,
        launcher: Launcher,
        on_setup: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> None:
        self.opts, self.world_size, self.strategy, self.on_setup = opts, world_size, strategy, on_setup
        self.launches = Launches(workload, precision, opts, world_size, strategy, progress, launcher)
        self.measurements: dict[int, Timed] = {}
        self.trials: SearchLaunches | None = None
        self.setup: dict[str, Any] | None = None

    def open(self, result: PrecisionResult, on_environment: Callable[[dict[str, Any]], None]) -> bool:
        """The first launch (batch 1 and 2). False, with `result` an error, when no rank got as far as building
        the model and not for lack of memory: the launch itself failed (an import, the launcher, NCCL)."""
        trials = self.trials = SearchLaunches(self.launches, self.opts.max_batch)
        setup = self.setup = trials.first.setup
        result.capacity_bytes = trials.capacity_bytes
        result.settings = {
            "world_size": self.world_size,
            "strategy": self.strategy,
            "per_gpu": True,
            "wrap": (setup or {}).get("wrap"),
            "task": (setup or {}).get("task"),
            "weights_bytes": (setup or {}).get("weights_bytes"),
            "weights_after_wrap_bytes": (setup or {}).get("weights_after_wrap_bytes"),
            "flags": ((setup or {}).get("environment") or {}).get("flags", {}),
        }
        if setup is None and trials.first.attempts and trials.first.attempts[0].outcome != OOM:
            result.status, result.error = "error", trials.first.attempts[0].message
            return False
        if setup is not None:
            on_environment(self.on_setup(setup))
        return True

    def flops(self) -> Flops:
        return Flops()

    def search_trials(self) -> SearchLaunches:
        assert self.trials is not None, "open() first"
        return self.trials

    def check(self, batch: int, time_it: Callable[[Attempt], bool] | None = None) -> Attempt:
        """A fresh launch at `batch`; with throughput on, a fit also runs the timed steps in that launch."""
        measure = self.opts.measure
        result = self.launches.run([batch], self.launches.timed if measure else None)
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
        attempt = self.launches.run([batch], steps=steps).attempts[0]
        attempt.fresh = True
        return attempt

    def measure(self, batch: int) -> Timed:
        result = self.launches.run([batch], self.launches.timed)
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
        if self.opts.measure and (result.max_batch or 0) > 0:
            result.settings["scaling"] = self._baseline(result.max_batch, result.throughput)

    def _baseline(self, batch: int, group: Timed | None) -> dict[str, Any]:
        """Time one GPU (1 rank, no wrapper) at `batch`; halve the common batch while it does not fit."""
        note = ""

        def record(group: Timed | None, single: Timed | None, note: str) -> dict[str, Any]:
            return scaling_record(
                self.world_size, batch, group.to_dict() if group else None, single.to_dict() if single else None, note
            )

        for _ in range(BASELINE_HALVINGS + 1):
            single = self.launches.run([batch], self.launches.timed, world_size=1, strategy=NONE).measure
            if single and single.outcome == FIT and group and group.outcome == FIT:
                return record(group, single, note)
            if group is None or group.outcome != FIT or batch <= 1:
                return record(group, single, note or "a timed run did not complete")
            note = (
                f"per-GPU max batch does not train on one GPU ({single and single.outcome}); "
                f"both timed at batch {batch // 2}"
            )
            batch //= 2
            group = self.launches.run([batch], self.launches.timed).measure
        return record(group, None, note)

    def close(self) -> None:
        """Nothing to end between launches."""


def _unmeasured(batch: int, attempt: Attempt) -> Timed:
    """The timed run of a launch that brought none back: the trial's failure, or an error when the trial fitted."""
    return Timed(
        batch=batch,
        outcome=attempt.outcome if not attempt.fits else ERROR,
        error=attempt.message or "no measurement came back",
    )
