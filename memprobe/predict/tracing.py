"""Trace every precision of a prediction: build the sessions, trace the trials each needs (several at once
where there are cores), make the batch models, and check a sequence-length model at its edge."""

from __future__ import annotations

import copy
import gc
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from memprobe.core.workload.registry import Workload
from memprobe.predict.batch_model import MODEL_BATCHES, PrecisionTraces, model_batches, traced_part_fits
from memprobe.predict.fakecuda import H100, Target
from memprobe.predict.parallel import Job, Then, trace_jobs
from memprobe.predict.progress import TraceProgress, silent
from memprobe.predict.sessions import trace_sessions
from memprobe.predict.trace import PredictError, Trace, TraceSession


@dataclass
class Traced:
    """The sessions a prediction traced in, and where the time went; `traces_for(precision)` gives a
    precision's PrecisionTraces (traced on its first call)."""

    sessions: list[TraceSession] = field(default_factory=list)
    trace_seconds: float = 0.0  # wall seconds spent tracing (several traces may run at once)
    shared: dict[str, str] = field(default_factory=dict)  # precision -> the precision whose traces it uses
    traces: dict[str, PrecisionTraces] = field(default_factory=dict)

    @property
    def build_seconds(self) -> float:
        return sum(s.build_seconds for s in self.sessions)


def axis_of(workload: Workload) -> str:
    """ "seq_len" when the workload's n is the sequence length (--search seq-len), else "batch"."""
    return "seq_len" if (workload.params or {}).get("axis") == "seq_len" else "batch"


class _Tracing:
    """Builds sessions and traces precisions for traced_precisions (see there)."""

    def __init__(
        self,
        workload: Workload,
        precisions: Sequence[str],
        capacities: Sequence[int],
        check: bool,
        workers: int,
        progress: TraceProgress,
        world: Any,
        session_for: Any,
        mode: str = "train",
    ) -> None:
        self.workload, self.capacities, self.check = workload, list(capacities), check
        self.workers, self.progress, self.world, self.session_for = workers, progress, world, session_for
        # a session per precision (a data-parallel wrapper's, or a generation's weights in the precision's dtype),
        # each built and traced in turn: only the newest is in use
        self.apart = world is not None or mode == "generate"
        self.axis = axis_of(workload)
        self.own = [p for p in precisions if not (p == "tf32" and "fp32" in precisions)]
        self.out = Traced(shared={p: "fp32" for p in precisions if p not in self.own})
        self.sessions: dict[str, TraceSession] = {}

    def run(self, jobs: list[Job], then: Then | None = None) -> dict[Job, Trace | PredictError]:
        started, built = time.perf_counter(), self.out.build_seconds
        try:
            return trace_jobs(jobs, self.workers, self.progress, then)
        finally:
            # a session rebuilt before a trace here (fresh) counts that as building, not tracing
            self.out.trace_seconds += time.perf_counter() - started - (self.out.build_seconds - built)

    def job(self, precision: str, batch: int, repeat_last: bool = False) -> Job:
        unit = "length" if self.axis == "seq_len" else "batch"
        what = f"{self.workload.name} {precision} at {unit} {batch}"
        return Job(self.sessions[precision], precision, batch, what, repeat_last)

    def tracer(self, precision: str):
        return lambda batches: {j.batch: r for j, r in self.run([self.job(precision, b) for b in batches]).items()}

    def traces_for(self, precision: str) -> PrecisionTraces:
        if precision in self.out.traces:
            return self.out.traces[precision]
        like = self.out.shared.get(precision)
        if like is not None:
            shared = copy.copy(self.traces_for(like))
            shared.precision = precision
            self.out.traces[precision] = shared
            return shared
        # One GPU: one session serves every precision, so all are traced at once. Data-parallel: a session per
        # precision (the wrapper depends on it), each built and traced in turn: only the newest is in use.
        group = [precision] if self.apart else self.own
        self._build(group)
        first = self._first(group)
        for p in group:
            made = {j.batch: r for j, r in first.items() if j.precision == p}
            small = self.axis == "batch" and 1 in made
            self.out.traces[p] = PrecisionTraces(
                self.sessions[p], p, self.check, traced=made, tracer=self.tracer(p), axis=self.axis, small=small
            )
        edges = {p: self.out.traces[p].needs_edge_check(self.capacities) for p in group}
        for j, result in self.run([self.job(p, e) for p, e in edges.items() if e is not None]).items():
            self.out.traces[j.precision].check_at(result)
        for p in group:
            self.out.traces[p].drop_unchecked()
        # Batch 1 takes its own paths (it is never extrapolated): traced now for every precision whose batch 2
        # does not fit the smallest capacity, at once, rather than one after another when each asks for it.
        ones = [p for p in group if self.out.traces[p].needs_batch_one(self.capacities)]
        for j, result in self.run([self.job(p, 1) for p in ones]).items():
            self.out.traces[j.precision].add(j.batch, result)
        return self.out.traces[precision]

    def _first(self, group: list[str]) -> dict[Job, Trace | PredictError]:
        """Trace the batches the precisions' models are made from. They repeat their last step (a third less
        tracing) where a check, traced in full, will compare the model with a trace of every step: batch 4, or
        along the length the edge (or, where the edge is among the traced lengths, the repeated traces are
        dropped and traced again in full). Along the batch, batch 2 comes first: where even its traced part does
        not fit the largest capacity, only batch 1 is traced after it (PrecisionTraces' `small`)."""
        batches = model_batches(self.axis, self.check)
        if self.axis == "seq_len":
            return self.run([self.job(p, b, self.check) for p in group for b in batches])
        rest = [b for b in reversed(batches) if b != MODEL_BATCHES[0]]  # the check first: it takes longest
        largest = max(self.capacities, default=None)

        def then(job: Job, result: Trace | PredictError) -> list[Job]:
            if job.batch != MODEL_BATCHES[0]:
                return []
            if largest is not None and isinstance(result, Trace) and not traced_part_fits(result, largest):
                self.progress.plan(1 - len(rest))
                return [self.job(job.precision, 1)]
            return [self.job(job.precision, b, self.check and b in MODEL_BATCHES) for b in rest]

        self.progress.plan(len(group) * len(rest))
        return self.run([self.job(p, MODEL_BATCHES[0], self.check) for p in group], then)

    def _build(self, group: list[str]) -> None:
        for precision in group:
            if self.apart or not self.out.sessions:
                where = f" for {precision}" if self.apart else ""
                self.progress.phase(f"building {self.workload.name} on fake tensors{where}")
            self.sessions[precision] = self.session_for(precision)
            if self.sessions[precision] not in self.out.sessions:
                self.out.sessions.append(self.sessions[precision])
        # What was built stays: the collector no longer walks it in every trace, nor copies its pages in a fork.
        gc.collect()
        gc.freeze()


@contextmanager
def traced_precisions(
    workload: Workload,
    precisions: Sequence[str],
    capacities: Sequence[int],
    steps: int = 3,
    target: Target = H100,
    world: Any = None,
    mode: str = "train",
    check: bool = True,
    workers: int = 1,
    progress: TraceProgress | None = None,
) -> Iterator[tuple[Any, Traced]]:
    """Yields (traces_for, Traced): traces_for(precision) is the precision's PrecisionTraces; the sessions stay
    open inside (a batch the models do not give is traced on demand). `capacities`: the allocator capacities the
    max batch is asked at (a sequence-length model is checked at the largest edge among them). tf32 uses
    fp32's traces when both are asked for (TF32 changes the math, not the tensors). `workers` > 1 traces that
    many trials at once (parallel.py). traces_for raises PredictError when a precision cannot be built or traced.
    """
    with trace_sessions(workload, steps, target, world, mode) as session_for:
        tracing = _Tracing(
            workload, precisions, capacities, check, workers, progress or silent(), world, session_for, mode
        )
        try:
            yield tracing.traces_for, tracing.out
        finally:
            gc.unfreeze()
