"""The one-GPU trial back-end: a shared trial process far below the edge, fresh ones (forked) near it.

No torch here: the steps run in trial processes (runner.Worker from runner.WorkerFactory). The pipeline
(probe/pipeline.py) drives it; which batch runs where is probe/scan_trials.py, a curve point probe/curve_run.py.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from memprobe.core.estimates.memory_model import Attempt, MemoryModel
from memprobe.core.process.outcomes import OOM, USER_ERROR
from memprobe.core.process.protocol import Flops, TrialSettings
from memprobe.core.process.wire import to_wire
from memprobe.core.records.records import Timed
from memprobe.core.records.results import PrecisionResult
from memprobe.core.records.settings import PrecisionSettings, Task
from memprobe.core.workload.registry import Workload
from memprobe.probe.backend import ScanProgress
from memprobe.probe.breakdown_run import measure_at_max
from memprobe.probe.curve_run import PointTimer
from memprobe.probe.options import ScanOptions
from memprobe.probe.pipeline import reported
from memprobe.probe.runner import Worker, WorkerError, WorkerFactory, WorkerSpec
from memprobe.probe.scan_trials import FRESH_ABOVE_SHARE, FreshRuns, SearchTrials, in_fresh_process, measure_fresh
from memprobe.probe.setup_failure import record_setup_oom


class NoCudaError(RuntimeError):
    """The trial process found no usable CUDA device."""


class LocalBackend:
    """probe.backend.TrialBackend on one GPU (or the CPU's fake allocator), for one workload and precision."""

    counts_flops = True

    def __init__(
        self, workload: Workload, precision: str, opts: ScanOptions, factory: WorkerFactory, progress: ScanProgress
    ) -> None:
        self.workload, self.precision, self.opts, self.factory, self.progress = (
            workload,
            precision,
            opts,
            factory,
            progress,
        )
        self.spec = WorkerSpec(
            workload,
            precision,
            opts.mode,
            opts.device,
            opts.cpu_budget_bytes,
            TrialSettings(opts.cudnn_benchmark, opts.memory_cap_bytes, opts.compile),
            opts.timeout_s,
        )
        self.count = 0
        self.started = time.perf_counter()
        self.fresh = FreshRuns(factory, self.spec, opts, self._announce, self._report)
        self.measurements: dict[int, Timed] = self.fresh.measurements
        self.worker: Worker | None = None
        self.capacity_bytes: float | None = None

    def _announce(self, batch: int, fresh: bool) -> None:
        self.count += 1
        self.progress.trial_start(self.workload.name, self.precision, self.count, batch, fresh)

    def _report(self, attempt: Attempt) -> Attempt:
        return reported(attempt, self.progress, self.started)

    def open(self, result: PrecisionResult, on_environment: Callable[[dict[str, Any]], None]) -> bool:
        """The first trial process (the first waits for the fork server's imports). Raises NoCudaError when there
        is no CUDA device; an out-of-memory or an error at setup is recorded in `result` (False)."""
        try:
            worker = self.factory.fresh(self.spec)
        except WorkerError as exc:
            if exc.kind == "no_cuda":
                raise NoCudaError(str(exc)) from exc
            if exc.kind == OOM:
                record_setup_oom(result, exc, self.opts.device, self.opts.env)
                return False
            result.status, result.error = "error", str(exc)
            if exc.kind == USER_ERROR:  # the user's build raised or the name cannot be built: no trial ran
                result.stop = USER_ERROR
            return False
        self.worker, info = worker, worker.info
        assert info is not None, "set up by factory.fresh"
        environment = info.environment
        emulation = to_wire(info.emulation) if info.emulation else None  # recorded as the result's section
        on_environment({**environment, "emulation": emulation} if emulation else environment)
        result.capacity_bytes = self.capacity_bytes = info.capacity_bytes
        result.settings = PrecisionSettings(
            task=Task.from_dict(info.task),
            flags=environment.get("flags", {}),
            weights_bytes=info.weights_bytes,
            build_seconds=info.build_seconds,
            cuda_init_seconds=info.cuda_init_seconds,
            first_process_ready_seconds=round(time.perf_counter() - self.started, 3),
            emulation=emulation,
        )
        return True

    def flops(self) -> Flops:
        assert self.worker is not None, "open() first"
        return self.worker.flops()

    def search_trials(self) -> SearchTrials:
        """The search's trials: the first process is the shared one (probe/scan_trials.py)."""
        trials, self.worker = SearchTrials(self.fresh, self.worker, self.capacity_bytes), None
        return trials

    def check(self, batch: int, time_it: Callable[[Attempt], bool] | None = None) -> Attempt:
        return self.fresh(batch, time_it)

    def soak(self, batch: int, steps: int) -> Attempt:
        self._announce(batch, True)
        return self._report(in_fresh_process(self.factory, self.spec, batch, lambda worker: worker.trial(batch, steps)))

    def measure(self, batch: int) -> Timed:
        return measure_fresh(self.factory, self.spec, batch, self.opts)

    def curve_timer(self, model: MemoryModel | None, capacity_bytes: float | None, max_batch: int) -> PointTimer:
        """Curve points below FRESH_ABOVE_SHARE of the capacity share a process; the others, and B, run fresh."""
        return PointTimer(
            self.factory,
            self.spec,
            self.opts.curve_run,
            model,
            FRESH_ABOVE_SHARE * capacity_bytes if capacity_bytes else None,
            max_batch,
        )

    def fit_check(self) -> str:
        opts = self.opts
        if opts.mode == "generate":
            cut = opts.trial_decode(fresh=True)
            if cut is None:
                return f"{opts.trial_steps} whole generations"
            return (
                f"{opts.trial_steps} generations cut after the prefill and {cut} decode forwards, then in the same"
                f" run {opts.timed_count} whole timed generation(s)"
            )
        return f"{opts.trial_steps} steps (1 warm-up + {opts.trial_steps - 1})" + (
            f", then in the same run 1 more warm-up + {opts.timed_steps} timed steps"
            + (f" (fewer past {opts.timed_budget_s:g} s)" if opts.timed_budget_s else "")
            if opts.measure
            else ""
        )

    def finish(self, result: PrecisionResult) -> None:
        """With --breakdown: where the memory goes at B, measured in its own fresh process (breakdown_run.py), so it
        cannot change B; a failure is recorded in the precision's settings, never raised."""
        if self.opts.measures_breakdown and (result.max_batch or 0) > 0:
            measure_at_max(self.factory, self.spec, result, self.opts.trial_steps, self.progress.note)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
