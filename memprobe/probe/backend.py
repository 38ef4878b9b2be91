"""The trial back-end a scan's pipeline runs over: what it must do, not how (trial processes or torchrun ranks).

No torch here. Two implementations: probe/local.py (one GPU: a shared trial process and fresh ones forked from
the fork server) and probe/distributed/backend.py (N GPUs: every trial a fresh torchrun launch). The pipeline
(probe/pipeline.py) runs search, proof, soak, timed runs and the curve the same way over either.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from memprobe.core.estimates.memory_model import Attempt, MemoryModel
from memprobe.core.process.protocol import Flops
from memprobe.core.records.records import CurvePoint, Timed
from memprobe.core.records.results import PrecisionResult


class ScanProgress(Protocol):
    """Where a scan says what it does (the CLI prints it; the API keeps quiet or prints a line per trial)."""

    def precision_start(self, workload: str, precision: str) -> None: ...
    def trial_start(self, workload: str, precision: str, index: int, batch: int, fresh: bool) -> None: ...
    def trial_end(self, attempt: Attempt) -> None: ...
    def note(self, text: str) -> None: ...


class SearchTrials(Protocol):
    """try_batch for search.find_max_batch; `predicted` is set to the predicted max batch once the search tries it."""

    predicted: int | None

    def __call__(self, batch: int) -> Attempt: ...
    def kill(self) -> None: ...
    def close(self) -> None: ...


class CurveTimer(Protocol):
    """Times one curve point at a time (probe/curve_run.measure_curve); never raises for a failed point."""

    def needs_process(self, batch: int) -> bool: ...
    def time(self, batch: int) -> CurvePoint: ...
    def close(self) -> None: ...


class TrialBackend(Protocol):
    """The trials of one workload and precision. Every trial reports itself to the progress (trial_start, and
    trial_end with `done_at_s` stamped); `measurements` holds the timed runs of fresh fits, by batch."""

    measurements: dict[int, Timed]
    counts_flops: bool  # whether flops() can count (the pipeline then adds MFU to every timed run)

    def open(self, result: PrecisionResult, on_environment: Callable[[dict[str, Any]], None]) -> bool:
        """Start the first trial process (or launch): fill `result.capacity_bytes` and `result.settings`, give the
        environment to `on_environment`. False when setup failed and `result` is final (status and error set)."""
        ...

    def flops(self) -> Flops:
        """The FLOP count per sample (and why not, where it could not be counted); asked only where `counts_flops`."""
        ...

    def search_trials(self) -> SearchTrials: ...

    def check(self, batch: int, time_it: Callable[[Attempt], bool] | None = None) -> Attempt:
        """Batch `batch` in a fresh process (group); with throughput on, a fit goes on to the timed run (kept in
        `measurements`) unless `time_it(attempt)` says not, and only fits if that completes too."""
        ...

    def soak(self, batch: int, steps: int) -> Attempt:
        """A trial of `steps` steps at `batch` in a fresh process (group), for --soak."""
        ...

    def measure(self, batch: int) -> Timed:
        """The timed run at `batch` in a fresh process (group); a failure is its answer, never raised."""
        ...

    def curve_timer(self, model: MemoryModel | None, capacity_bytes: float | None, max_batch: int) -> CurveTimer: ...

    def fit_check(self) -> str:
        """What one fresh check runs, in words, for the proof record."""
        ...

    def finish(self, result: PrecisionResult) -> None:
        """What this back-end adds once B is timed (N GPUs: the 1-GPU baseline and the scaling efficiency)."""
        ...

    def close(self) -> None: ...
