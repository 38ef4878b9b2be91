"""The trace at any batch from two traced batches, and the max batch a capacity holds.

Tracing is the slow part (about a second per step for BERT-Large), so each precision is traced at two batch
sizes (2 and 3) only: every allocation of a transformer step is affine in the batch, so the two traces give
the trace at any batch; a third traced batch (4) checks that byte for byte. Batch 1, and every batch of a
workload whose op sequence changes with the batch, is traced directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from memprobe.predict.allocator import ALLOC, ReplayResult, replay
from memprobe.predict.trace import CHECK_BATCH, MODEL_BATCHES, TRIAL_MARK, Trace, TraceSession


FIT_BATCHES = (2, 4, 8, 16, 32, 64, 128, 256, 512)  # replayed for the reported linear fit (up to the edge)


MAX_SEARCH_BATCH = 1 << 16


@dataclass
class BatchModel:
    """Traces of one precision at two batches; gives the trace at any batch (sizes affine in the batch)."""

    low: Trace
    high: Trace
    checked: Trace | None = None
    exact: bool = False  # the extrapolation reproduced the checked trace byte for byte

    def aligned(self) -> bool:
        """Whether the two traces have the same events in the same order (only ALLOC sizes may differ)."""
        a, b = self.low.events, self.high.events
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            if x[0] != y[0] or x[1] != y[1] or (x[0] == ALLOC and x[3] != y[3]):
                return False
        return True

    def events_at(self, batch: int) -> list[tuple]:
        """The trace at `batch`. Raises ValueError if the two traces do not align or a size goes negative."""
        lo, hi = self.low, self.high
        span = hi.batch - lo.batch
        out = []
        for x, y in zip(lo.events, hi.events):
            if x[0] != ALLOC:
                out.append(x)
                continue
            step, rem = divmod(y[2] - x[2], span)
            if rem:
                raise ValueError("allocation sizes are not affine in the batch")
            size = x[2] + step * (batch - lo.batch)
            if size < 0:
                raise ValueError("an allocation size would be negative at this batch")
            out.append((ALLOC, x[1], size, x[3]))
        return out


def _replay(events: list[tuple], capacity: int | None = None) -> ReplayResult:
    return replay(events, capacity=capacity, measure_from=TRIAL_MARK)


def max_batch_for(events_at: Callable[[int], list[tuple]], capacity: int, guess: int = 2,
                  limit: int = MAX_SEARCH_BATCH) -> tuple[int, ReplayResult | None]:
    """The largest batch whose replayed trial fits in `capacity` bytes (0 when batch 1 does not), and
    the replay that failed at max + 1 (None when everything up to `limit` fits).

    Walks from `guess` (e.g. a linear estimate) with steps 1, 2, 4, ... until the edge is bracketed,
    then bisects; assumes fitting is monotone in the batch. Batch 1 is only replayed when 2 does not fit.
    """
    cache: dict[int, ReplayResult] = {}

    def fits(b: int) -> bool:
        if b not in cache:
            cache[b] = _replay(events_at(b), capacity)
        return cache[b].fits

    lo, hi = 0, limit + 1  # lo fits (0: nothing known), hi does not (limit + 1: unknown)
    b = min(max(guess, MODEL_BATCHES[0]), limit)
    step = 1
    if fits(b):
        lo = b
        while hi == limit + 1 and lo < limit:
            b = min(lo + step, limit)
            if fits(b):
                lo = b
            else:
                hi = b
            step *= 2
    else:
        hi = b
        while lo == 0 and hi > 1:
            b = max(hi - step, MODEL_BATCHES[0]) if hi > MODEL_BATCHES[0] else 1
            if fits(b):
                lo = b
            else:
                hi = b
            step *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, cache.get(hi)


class PrecisionTraces:
    """The trial of one precision at any batch: extrapolated from two traces, or traced (and kept)."""

    def __init__(self, session: TraceSession, precision: str, check: bool = True) -> None:
        self.session = session
        self.precision = precision
        self.model, traces = batch_model(session, precision, check)
        self._traced: dict[int, list[tuple]] = {b: t.events for b, t in traces.items()}
        if self.model is None:
            self.how = "traced"
        else:
            self.how = "checked" if self.model.exact else "unchecked"

    def events_at(self, batch: int) -> list[tuple]:
        """The trace at `batch` (build + trial). Raises PredictError if tracing fails."""
        if batch in self._traced:
            return self._traced[batch]
        if self.model is not None and batch >= MODEL_BATCHES[0]:
            return self.model.events_at(batch)
        self._traced[batch] = self.session.trace(self.precision, batch).events
        return self._traced[batch]

    def peaks(self, batch: int, capacity: int | None = None) -> ReplayResult:
        return _replay(self.events_at(batch), capacity)

    def max_batch(self, capacity: int) -> tuple[int, ReplayResult | None]:
        """max_batch_for at `capacity` bytes, walking from the line's guess where the traces extrapolate
        (from batch 2 where every batch is traced). Raises PredictError if a trace it needs fails."""
        guess = self.linear_guess(capacity) if self.model is not None else MODEL_BATCHES[0]
        return max_batch_for(self.events_at, capacity, guess)

    def linear_guess(self, capacity: int) -> int:
        """Where a line through the peaks reserved at two batches puts the edge (a starting point only)."""
        a, b = MODEL_BATCHES[0], 4 * MODEL_BATCHES[0]
        ra, rb = self.peaks(a).peak_reserved, self.peaks(b).peak_reserved
        per = (rb - ra) / (b - a)
        if per <= 0:
            return MODEL_BATCHES[0]
        return max(1, int((capacity - (ra - per * a)) / per))


def batch_model(session: TraceSession, precision: str, check: bool = True) -> tuple[BatchModel | None, dict[int, Trace]]:
    """Trace `precision` at MODEL_BATCHES (and CHECK_BATCH, to check the extrapolation byte for byte).

    Returns (None, traces) when the traces do not line up: every batch is then traced instead.
    """
    low = session.trace(precision, MODEL_BATCHES[0])
    high = session.trace(precision, MODEL_BATCHES[1])
    model = BatchModel(low, high)
    traces = {low.batch: low, high.batch: high}
    if not model.aligned():
        return None, traces
    if check:
        checked = session.trace(precision, CHECK_BATCH)
        traces[CHECK_BATCH] = checked
        model.checked = checked
        try:
            model.exact = model.events_at(CHECK_BATCH) == checked.events
        except ValueError:
            model.exact = False
        if not model.exact:
            return None, traces
    return model, traces
