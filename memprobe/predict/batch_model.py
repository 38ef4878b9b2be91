"""The trace at any batch (or sequence length) from a few traced ones, and the max batch a capacity holds.

Tracing is the slow part (seconds per trial), so each precision is traced at a few small batches only.
Along the batch every allocation of a step is affine in the batch: the traces at 2 and 3 give the trace at
any batch, and a third traced batch (4) checks that byte for byte. Along the sequence length some sizes
are quadratic (an attention mask is length x length): the traces at lengths 2, 3 and 4 give the trace at
any length, checked byte for byte against a trace at the longest length predicted, where an error would
show. A kernel workspace's size is recomputed from its extrapolated dims (workspaces.py), with the
kernel's rounding. Batch 1, and every batch of a workload whose op sequence changes with the batch or
whose check fails, is traced directly. The traces at 2 and 3 repeat their last step rather than trace it
(trace.repeat_last_step, a third less work), and so do the lengths 2, 3 and 4; the check at batch 4, or
at the edge length, traces every step, so it checks that too. Where batch 2 does not fit the largest
memory asked about (even its traced steps), no model is made: batches 1 and 2 are all that is needed
(PrecisionTraces' `small`).
"""

from __future__ import annotations

from typing import Callable, Sequence

from memprobe.core.workload.run_length import steps_at_fit
from memprobe.predict.allocator import ALLOC, FREE, ReplayResult, replay
from memprobe.predict.edge_search import FIRST_GUESS, max_batch_for
from memprobe.predict.fakecuda import INT32_MAX
from memprobe.predict.trace import TRIAL_MARK, PredictError, Trace, TraceSession
from memprobe.predict.workspaces import Workspace

MODEL_BATCHES = (
    FIRST_GUESS,
    FIRST_GUESS + 1,
)  # traced and extrapolated from; batch 1 can take other paths (size-1 dims broadcast)
CHECK_BATCH = 4  # traced to check the extrapolation byte for byte
LENGTH_BATCHES = (2, 3, 4)  # along the sequence length: sizes up to quadratic in it
FIT_BATCHES = (2, 4, 8, 16, 32, 64, 128, 256, 512)  # replayed for the reported linear fit (up to the edge)

Tracer = Callable[[Sequence[int]], dict[int, "Trace | PredictError"]]


def _binomial(n: int, k: int) -> int:
    """n choose k for any integer n (n (n-1) ... (n-k+1) / k!, exact: k consecutive integers' product)."""
    top, bottom = 1, 1
    for i in range(k):
        top *= n - i
        bottom *= i + 1
    return top // bottom


def _differences(values: Sequence[int]) -> tuple[int, ...]:
    """Newton's forward differences at the first point: values[0], its first difference, second, ..."""
    out, row = [], list(values)
    while row:
        out.append(row[0])
        row = [b - a for a, b in zip(row, row[1:])]
    return tuple(out)


def _weighted(terms: tuple[int, ...], weights: list[int]) -> int:
    """The polynomial through the points the differences came from, at the point whose binomial weights
    (steps choose k) are given. Raises ValueError when the value is negative."""
    value = terms[0]
    for k in range(1, len(terms)):
        value += terms[k] * weights[k]
    if value < 0:
        raise ValueError("an allocation size would be negative at this batch")
    return value


class BatchModel:
    """Traces of one precision at consecutive batches; gives the trace at any batch, each allocation size the
    polynomial through its sizes in the traces (degree: traces - 1; two traces: a line)."""

    def __init__(self, traces: Sequence[Trace]) -> None:
        batches = [t.batch for t in traces]
        if len(traces) < 2 or batches != list(range(batches[0], batches[0] + len(traces))):
            raise ValueError(f"a batch model needs traces at consecutive batches, got {batches}")
        self.traces = list(traces)
        self.first = batches[0]
        self.exact = False  # the model reproduced a trace it was not made from, byte for byte
        self.checked_at: int | None = None
        self._varying_terms: list | None = None  # _varying(), made at its first call

    def aligned(self) -> bool:
        """Whether the traces have the same events in the same order (only ALLOC sizes, and the dims of
        kernel workspaces, may differ)."""
        first = self.traces[0].events
        for other in self.traces[1:]:
            events = other.events
            if len(events) != len(first):
                return False
            for x, y in zip(first, events):
                if x[0] != y[0] or x[1] != y[1]:
                    return False
                if x[0] == ALLOC and x[3] != y[3] and not (isinstance(x[3], Workspace) and x[3].same_kind(y[3])):
                    return False
        return True

    def events_at(self, batch: int) -> list[tuple]:
        """The trace at `batch`. Raises ValueError if a size goes negative (call only when aligned())."""
        steps = batch - self.first
        weights = [_binomial(steps, k) for k in range(len(self.traces))]
        out = list(self.traces[0].events)  # the events whose size does not change with the batch stay as they are
        for index, terms in self._varying():
            event = out[index]
            if isinstance(event[3], Workspace):
                dims = tuple(_weighted(t, weights) for t in terms)
                workspace = Workspace(event[3].op, event[3].index, dims)
                out[index] = (ALLOC, event[1], workspace.nbytes, workspace)
            else:
                out[index] = (ALLOC, event[1], _weighted(terms, weights), event[3])
        return out

    def _varying(self) -> list[tuple[int, tuple]]:
        """(index, terms) of each allocation whose size (or a workspace dim) changes with the batch: the forward
        differences of its size, or of each workspace dim. A replay asks for tens of batches, and in a training
        step of a CNN half the allocations (weights, gradients, optimizer state) do not depend on the batch."""
        if self._varying_terms is None:
            varying: list = []
            for index, column in enumerate(zip(*(t.events for t in self.traces))):
                x = column[0]
                if x[0] != ALLOC:
                    continue
                if isinstance(x[3], Workspace):
                    terms: tuple = tuple(_differences(ds) for ds in zip(*(e[3].dims for e in column)))
                    if any(any(t[1:]) for t in terms):
                        varying.append((index, terms))
                else:
                    terms = _differences([e[2] for e in column])
                    if any(terms[1:]):
                        varying.append((index, terms))
            self._varying_terms = varying
        return self._varying_terms

    def reproduces(self, trace: Trace) -> bool:
        """Whether the model gives `trace`'s events exactly; records the check."""
        try:
            self.exact = self.events_at(trace.batch) == trace.events
        except ValueError:
            self.exact = False
        self.checked_at = trace.batch
        return self.exact


def _replay(
    events: list[tuple], capacity: int | None = None, repeat: list[tuple[int, int, int]] | None = None
) -> ReplayResult:
    return replay(events, capacity=capacity, measure_from=TRIAL_MARK, repeat=repeat)


def last_step_span(trace: Trace) -> tuple[int, int] | None:
    """(start, end) of `trace`'s last step in its events, where that step frees everything it allocates and
    nothing else (so it can be replayed again, as the steps after it run); None otherwise."""
    if len(trace.step_at) < 2:
        return None
    start, end = trace.step_at[-2], trace.step_at[-1]
    part = trace.events[start:end]
    allocated = {e[1] for e in part if e[0] == ALLOC}
    if allocated != {e[1] for e in part if e[0] == FREE}:
        return None
    return start, end


def traced_part_fits(trace: Trace, capacity: int) -> bool:
    """Whether the traced part of `trace` (all of it, or the steps before a repeated one) fits in `capacity`
    bytes. When it does not, no trace of that batch does: every step's trace begins with the same events."""
    return _replay(trace.events[: trace.traced], capacity).fits


def trace_each(session: TraceSession, precision: str) -> Tracer:
    """A Tracer that traces the batches here, one after another."""

    def trace(batches: Sequence[int]) -> dict[int, Trace | PredictError]:
        out: dict[int, Trace | PredictError] = {}
        for b in batches:
            try:
                out[b] = session.trace(precision, b)
            except PredictError as exc:
                out[b] = exc
        return out

    return trace


def model_batches(axis: str, check: bool = True) -> tuple[int, ...]:
    """The batches a precision is traced at before anything else: the model's, and the batch axis' check."""
    if axis == "seq_len":
        return LENGTH_BATCHES
    return MODEL_BATCHES + ((CHECK_BATCH,) if check else ())


class PrecisionTraces:
    """The trial of one precision at any batch: extrapolated from a few traces, or traced (and kept).

    `traced`: traces made already (batch -> Trace, or the PredictError tracing it raised); `tracer` traces
    the others (default: here, one after another). `axis` "seq_len": the batch is a sequence length (a
    quadratic model, checked at the edge by check_at). `small`: batch 2 does not fit the largest capacity
    asked (traced_part_fits), so batches 1 and 2, given in `traced`, are all the searches and the line need: no
    batch model is made. Raises PredictError when a trace it needs fails.

    Every replay is of the whole run a scan makes at a batch it calls a fit (core/workload/run_length.py): the trial,
    then its last step repeated for the warm-up and timed steps that follow it in the same process (`run_steps`
    steps in all; the repetitions stop once the cache has settled), since the allocator's state can keep
    changing after the trial (mobilenetv2_100 bf16 on an H200: the 3-step trial fitted 3720, the timed steps
    after it failed there). Where the last step keeps memory for a later one, the trial alone is replayed.
    """

    def __init__(
        self,
        session: TraceSession,
        precision: str,
        check: bool = True,
        traced: dict[int, Trace | PredictError] | None = None,
        tracer: Tracer | None = None,
        axis: str = "batch",
        small: bool = False,
    ) -> None:
        self.session = session
        self.precision = precision
        self.axis = axis
        self.small = small
        self._tracer = tracer or trace_each(session, precision)
        self._pending = dict(traced or {})
        self._traced: dict[int, list[tuple]] = {}
        self._found: dict[int, tuple[int, ReplayResult | None]] = {}
        self._unlimited: dict[int, ReplayResult] = {}
        self.model: BatchModel | None = None
        self.run_steps = steps_at_fit(session.mode, session.steps)
        # Repeated traces stand where a trace of every step showed the step repeating: the model's check, or
        # (small) batch 1's trace, whose last step is the one before it again.
        one = self._pending.get(1)
        self._repeats_shown = small and isinstance(one, Trace) and one.last_step_repeats()
        if small:
            self.drop_unchecked()
            return
        points = LENGTH_BATCHES if axis == "seq_len" else MODEL_BATCHES
        got = self._get(points)
        made = BatchModel([got[b] for b in points])
        self.model = made
        if not made.aligned():
            self.model = None
        elif check and axis != "seq_len" and not made.reproduces(self._get([CHECK_BATCH])[CHECK_BATCH]):
            self.model = None
        if axis != "seq_len":
            self.drop_unchecked()

    def drop_unchecked(self) -> None:
        """Unless the model has been checked against a trace of every step, drop the traces whose last step was
        repeated (TraceSession.trace's repeat_last). Along the sequence length, call it after the edge check."""
        if (self.model is None or not self.model.exact) and not self._repeats_shown:
            self._forget_repeated()

    def _forget_repeated(self) -> None:
        """Drop traces whose last step was repeated, not traced (TraceSession.trace's repeat_last): they stand
        only inside a model checked against a trace of every step. That model goes with them; a batch asked for
        again is traced in full, and what was replayed (the edge search that found nothing to check) is redone."""
        repeated = [b for b, t in self._pending.items() if isinstance(t, Trace) and t.repeated]
        for b in repeated:
            del self._pending[b]
            self._traced.pop(b, None)
        if repeated:  # the model was made from them too: from now on every batch is traced
            self.model = None
            self._found.clear()
            self._unlimited.clear()

    @property
    def how(self) -> str:
        """ "checked": extrapolated and checked byte for byte; "unchecked"; "traced": every batch traced (all
        of them, or with `small` the two needed)."""
        if self.model is None:
            return "traced"
        return "checked" if self.model.exact else "unchecked"

    def fit_batches(self, edge: int) -> list[int]:
        """The batches the reported line is fit through, for a largest max batch `edge`: 2, 4, 8, ... up to the
        edge (and the edge) where a model gives them; with `small`, the two traced (1 and 2)."""
        if self.small:
            return [1, MODEL_BATCHES[0]]
        batches = {b for b in FIT_BATCHES if b <= max(8, edge)}
        if edge > 8 and self.model is not None:
            batches.add(edge)
        return sorted(batches)

    def _get(self, batches: Sequence[int]) -> dict[int, Trace]:
        missing = [b for b in batches if b not in self._pending]
        if missing:
            self._pending.update(self._tracer(missing))
        out = {}
        for b in batches:
            got = self._pending[b]
            if isinstance(got, PredictError):
                raise got
            self._traced.setdefault(b, got.events)
            out[b] = got
        return out

    def needs_batch_one(self, capacities: Sequence[int]) -> bool:
        """Whether the max batch at some capacity will ask for batch 1 (batch 2 does not fit the smallest one).
        False where there is no model: batch 2 is then traced again first."""
        if self.model is None or not capacities or 1 in self._pending:
            return False
        smallest = min(capacities)
        if self.peaks(MODEL_BATCHES[0]).peak_reserved <= smallest:
            return False  # never more reserved than it holds: replayed at that capacity it runs the same way
        return not self.peaks(MODEL_BATCHES[0], smallest).fits

    def add(self, batch: int, trace: Trace | PredictError) -> None:
        """A trace of `batch` made elsewhere (or the PredictError tracing it raised), for when it is asked for."""
        self._pending.setdefault(batch, trace)

    def events_at(self, batch: int) -> list[tuple]:
        """The trace at `batch` (build + trial). Raises PredictError if tracing fails."""
        if batch in self._traced:
            return self._traced[batch]
        if self.model is not None and batch >= MODEL_BATCHES[0]:
            return self.model.events_at(batch)
        return self._get([batch])[batch].events

    def _source(self, batch: int) -> Trace:
        """The trace whose step positions `batch`'s events have: its own, or the model's first."""
        if self.model is not None and batch >= MODEL_BATCHES[0] and batch not in self._traced:
            return self.model.traces[0]
        return self._get([batch])[batch]

    def repeat_at(self, batch: int) -> list[tuple[int, int, int]]:
        """What `batch`'s replay runs again (allocator.replay's `repeat`): each generation's last traced decode forward
        for the decode forwards not traced, and the trial's last step for the steps after the trial, each as (start,
        end, more times); [] where nothing is repeated (or the last step cannot be)."""
        source = self._source(batch)
        spans = [(start, end, source.decode_more) for start, end in source.decode_spans()] if source.decode_more else []
        span = last_step_span(source)
        extra = self.run_steps - source.steps
        return spans + ([(*span, extra)] if span is not None and extra > 0 else [])

    def replay_at(self, batch: int, capacity: int | None = None) -> ReplayResult:
        """The run at `batch` (the trial and the steps after it, repeat_at) replayed at `capacity` (None:
        unlimited). Raises PredictError if a trace it needs fails."""
        return _replay(self.events_at(batch), capacity, self.repeat_at(batch))

    def peaks(self, batch: int, capacity: int | None = None) -> ReplayResult:
        """The run at `batch` replayed at `capacity` (None: unlimited; those replays are kept, for the line's
        guess and the fit ask for the same batches). Raises PredictError if a trace it needs fails."""
        if capacity is not None:
            return self.replay_at(batch, capacity)
        if batch not in self._unlimited:
            self._unlimited[batch] = self.replay_at(batch)
        return self._unlimited[batch]

    def max_batch(self, capacity: int) -> tuple[int, ReplayResult | None]:
        """max_batch_for at `capacity` bytes, walking from the line's guess where the traces extrapolate
        (from batch 2 where every batch is traced); a batch past a kernel limit (kernel_limit) does not run,
        whatever the memory. Raises PredictError if a trace it needs fails."""
        if capacity not in self._found:
            guess = self.linear_guess(capacity) if self.model is not None else MODEL_BATCHES[0]
            self._found[capacity] = max_batch_for(self._run_at, capacity, guess)
        return self._found[capacity]

    def _run_at(self, batch: int, capacity: int) -> ReplayResult:
        limit = self.kernel_limit(batch)
        return ReplayResult(0, 0, limit=limit) if limit else self.replay_at(batch, capacity)

    def kernel_limit(self, batch: int) -> str:
        """Why a CUDA kernel of the run at `batch` would refuse it whatever the memory (an op of INT32_COUNT_OPS
        past 2^31 - 1 output elements: "integer out of range"), or "". From the trace of `batch`, or scaled with
        the batch from the model's largest trace (such an output grows in proportion to it)."""
        if self.model is not None and batch >= MODEL_BATCHES[0] and batch not in self._traced:
            source = max(self.model.traces, key=lambda t: t.batch)
            counts = [(op, n * batch // source.batch) for op, n in source.int32_counts]
        else:
            counts = list(self._get([batch])[batch].int32_counts)
        over = [(op, n) for op, n in counts if n > INT32_MAX]
        if not over:
            return ""
        op, n = over[0]
        return f"{op}'s output of {n:,} elements passes 2^31 - 1, which its CUDA kernel counts in 32 bits"

    def linear_guess(self, capacity: int) -> int:
        """Where a line through the peaks reserved at two batches puts the edge (a starting point only)."""
        a, b = MODEL_BATCHES[0], 4 * MODEL_BATCHES[0]
        ra, rb = self.peaks(a).peak_reserved, self.peaks(b).peak_reserved
        per = (rb - ra) / (b - a)
        if per <= 0:
            return MODEL_BATCHES[0]
        return max(1, int((capacity - (ra - per * a)) / per))

    def needs_edge_check(self, capacities: Sequence[int]) -> int | None:
        """The batch to check an unchecked model at (the largest edge of `capacities`), or None when there is
        nothing to check (no model, checked already, or an edge among the traced batches)."""
        if self.model is None or self.model.exact:
            return None
        edge = max((self.max_batch(c)[0] for c in capacities), default=0)
        return edge if edge > max(LENGTH_BATCHES) else None

    def check_at(self, trace: Trace | PredictError) -> bool:
        """Compare the model with a trace it was not made from, byte for byte; on a mismatch drop the model
        (every batch is traced from then on). Returns whether it matched. Raises the trace's PredictError."""
        if isinstance(trace, PredictError):
            raise trace
        self._pending[trace.batch] = trace
        if self.model is None:
            return False
        if not self.model.reproduces(trace):
            self.model = None
            self._found.clear()
            self._unlimited.clear()
            self._forget_repeated()
        self._traced[trace.batch] = trace.events
        return self.model is not None
