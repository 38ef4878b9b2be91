"""The trial processes of a scan's search and proof: which batch runs in a shared process, which in a fresh one.

No torch here: the steps run in trial processes (runner.Worker). A fresh run is a trial in a process that
has run nothing else, followed, with throughput on, by the timed run in the same process; the search's
fresh trials and the proof's checks are both such runs, so one serves as the other and no batch size is
built twice in fresh processes (a new size can cost 16-25 s of cuDNN set-up: NasNet-Large on the H200).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator

from memprobe.core.estimates.memory_model import Attempt, edge_model
from memprobe.core.process.outcomes import CRASH, ERROR, FIT, OUTCOMES, TIMEOUT
from memprobe.core.records.records import Timed
from memprobe.probe.options import ScanOptions
from memprobe.probe.runner import Worker, WorkerError, WorkerFactory, WorkerSpec

# With the fork server, a search trial runs in a fresh process once its predicted peak passes this
# share of the capacity. Far below the edge, the few GiB by which an in-process run can differ from
# a fresh one (fragmentation: 4.3 GiB seen on the H100 at 80 GB) cannot change the outcome, and the
# shared process skips a fresh process's start-up (~2 s on the H100: CUDA context, lazy kernels).
FRESH_ABOVE_SHARE = 0.5


@contextmanager
def fresh_worker(factory: WorkerFactory, spec: WorkerSpec) -> Iterator[Worker]:
    """A new trial process for one job, ended after it: closed (which waits for the exit, so the next
    process finds the memory free), or killed at once when the job is interrupted (Ctrl-C), rather
    than left to finish its running steps. Raises WorkerError when the process cannot be set up."""
    worker = factory.fresh(spec)
    try:
        yield worker
    except BaseException:
        worker.kill()
        raise
    finally:
        worker.close()


def in_fresh_process(factory: WorkerFactory, spec: WorkerSpec, batch: int, run: Callable[[Worker], Attempt]) -> Attempt:
    """Run `run` in a new trial process and end the process; the Attempt is marked fresh and
    carries the process's wall time. A process that cannot be set up becomes a failed Attempt."""
    started = time.perf_counter()
    try:
        with fresh_worker(factory, spec) as worker:
            attempt = run(worker)
    except WorkerError as exc:
        return Attempt(batch, exc.kind if exc.kind in OUTCOMES else ERROR, message=str(exc), fresh=True)
    attempt.fresh = True
    attempt.wall_seconds = round(time.perf_counter() - started, 3)
    return attempt


def measure_fresh(factory: WorkerFactory, spec: WorkerSpec, batch: int, opts: ScanOptions) -> Timed:
    """The timed run at `batch` in a new process (its answer; a process that cannot be set up is a failed run)."""
    try:
        with fresh_worker(factory, spec) as worker:
            return opts.timed_run(worker, batch)
    except WorkerError as exc:
        return Timed(batch=batch, outcome=exc.kind, error=str(exc))


class FreshRuns:
    """run(n) for the search's fresh trials and the proof's checks alike: batch n in a new process that has
    run nothing else, announced first.

    With throughput on, a batch that completes the trial then runs the timed steps in the same process,
    and only counts as fitting if those complete too: at the edge, fragmentation can grow after the third
    step (seen on an H100 with BERT-Large in fp16: batch 108 ran 3 steps, then ran out of memory during the
    timed steps). So a fresh fit is one that trains for the whole measured run, whichever of the two asked
    for it, and its timed run (kept in `measurements`) is the throughput at B when it turns out to be B.
    """

    def __init__(
        self,
        factory: WorkerFactory,
        spec: WorkerSpec,
        opts: ScanOptions,
        announce: Callable[[int, bool], None],
        report: Callable[[Attempt], Attempt] = lambda a: a,
    ) -> None:
        self.factory, self.spec, self.opts, self.announce, self.report = factory, spec, opts, announce, report
        self.measurements: dict[int, Timed] = {}

    def __call__(self, batch: int, time_it: Callable[[Attempt], bool] | None = None) -> Attempt:
        """Run `batch` fresh; with throughput on, a fit goes on to the timed run unless `time_it(attempt)` says
        not (then it is the trial alone, and a proof check of that batch will run it again). Announced first,
        reported (`report`) when done."""
        self.announce(batch, True)
        return self.report(
            in_fresh_process(self.factory, self.spec, batch, lambda worker: self._run(worker, batch, time_it))
        )

    def _run(self, worker: Worker, batch: int, time_it: Callable[[Attempt], bool] | None) -> Attempt:
        # With throughput on, a fit keeps its training state, so the timed steps go on from the trial as one run.
        attempt = worker.trial(
            batch, self.opts.trial_steps, keep=self.opts.measure, decode_steps=self.opts.trial_decode(fresh=True)
        )
        attempt.trial_fit = attempt.fits
        if not (attempt.fits and self.opts.measure and (time_it is None or time_it(attempt))):
            return attempt
        measured = self.opts.timed_run(worker, batch, cont=True)
        if measured.outcome == FIT:
            self.measurements[batch] = measured
            attempt.peak_allocated = max(attempt.peak_allocated or 0, measured.peak_allocated or 0)
            attempt.peak_reserved = max(attempt.peak_reserved or 0, measured.peak_reserved or 0)
            attempt.timed_steps = measured.step_time.get("steps") if measured.step_time else None
            return attempt
        total = (0 if self.opts.mode == "generate" else 1) + self.opts.timed_count
        # The whole error (at most 500 characters from the worker): its out-of-memory figures are read back.
        return Attempt(
            batch,
            measured.outcome or ERROR,
            measured.peak_allocated,
            measured.peak_reserved,
            attempt.seconds,
            f"ran the {self.opts.trial_steps}-step trial, then failed at step "
            f"{measured.failed_at_step} of the {total} steps that followed it: {measured.error or ''}",
            trial_fit=True,
        )


class SearchTrials:
    """try_batch for the search.

    Batch 1 and 2 (which only feed the memory model) run in the process that was set up first, as
    does any later trial whose peak the memory model puts below FRESH_ABOVE_SHARE of the capacity.
    When fresh processes are cheap (forked from the fork server), trials nearer the edge each run in
    a fresh process (a predicted max batch tried before the model exists too): the pair that brackets
    the edge is then already the fresh-process proof, so it is not run twice, and no near-edge trial
    inherits another's fragmentation. With throughput on, a fresh fit that could be B (see could_be_edge)
    goes on to the timed run in its process, so that when it is B, its trial is the proof and the
    throughput at once. Without the fork server (a fresh process costs the imports) all trials share one
    process, replaced after a crash.
    """

    def __init__(self, fresh: FreshRuns, worker: Worker | None, capacity_bytes: float | None) -> None:
        self.fresh, self.worker, self.capacity_bytes = fresh, worker, capacity_bytes
        self.attempts: list[Attempt] = []
        self.predicted: int | None = None  # the predicted max batch, once the search tries it (probe/hint.py)

    def _near_edge(self, batch: int) -> bool:
        if not self.fresh.factory.forks or batch <= 2:
            return False
        if not self.capacity_bytes:
            return True
        model = edge_model(self.attempts)
        return model is None or model.predict(batch) > FRESH_ABOVE_SHARE * self.capacity_bytes

    def could_be_edge(self, attempt: Attempt) -> bool:
        """Whether a fresh fit may turn out to be B, so that its timed run is worth having now: it lies just
        below a failure, or it is the predicted max batch, or the memory model refitted on it puts the edge at
        it, or no model can say.
        Timing every fresh fit would cost more than it saves: the committed H100 scans had 2.8 fresh fits per
        precision that were not B; this rule times 0.6 of them and misses B in 1 precision of 5 (which then
        re-runs B, as every precision did before), against a new process and its per-size set-up for each."""
        failed = [a.batch for a in self.attempts if not a.fits]
        if (failed and attempt.batch == min(failed) - 1) or attempt.batch == self.predicted:
            return True
        capacity = self.capacity_bytes
        model = edge_model([*self.attempts, attempt]) if capacity else None
        return model is None or capacity is None or model.max_batch_for(capacity) <= attempt.batch

    def __call__(self, batch: int) -> Attempt:
        if self._near_edge(batch):
            self.close()  # the shared process's model and optimizer state must not hold GPU memory now
            attempt = self.fresh(batch, self.could_be_edge)
        else:
            attempt = self._shared(batch)
        self.attempts.append(attempt)
        return attempt

    def _shared(self, batch: int) -> Attempt:
        self.fresh.announce(batch, False)
        if self.worker is None:
            try:
                self.worker = self.fresh.factory.fresh(self.fresh.spec)
            except WorkerError as exc:
                return self.fresh.report(Attempt(batch, ERROR, message=f"could not restart the trial process: {exc}"))
        opts = self.fresh.opts
        attempt = self.worker.trial(batch, opts.trial_steps, decode_steps=opts.trial_decode(fresh=False))
        if attempt.outcome in (CRASH, TIMEOUT) or not self.worker.alive:
            self.close()  # the context is unusable; the next trial gets a new process
        return self.fresh.report(attempt)

    def kill(self) -> None:
        if self.worker is not None:
            self.worker.kill()

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
