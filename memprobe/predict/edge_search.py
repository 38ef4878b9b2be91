"""The max batch a replayed run holds: a search over the batch that does not trust fitting to be monotone."""

from __future__ import annotations

from typing import Callable

from memprobe.predict.allocator import ReplayResult

MAX_SEARCH_BATCH = 1 << 16
FIRST_GUESS = 2  # the smallest batch a search starts from: the first traced (batch_model.MODEL_BATCHES)
# How far below a found edge max_batch_for probes for a failing batch (a share of the edge): the failing islands seen
# below an edge (levit_256 inference, see max_batch_for) lay within 1% of it.
PROBE_DEPTH = 1 / 16


def max_batch_for(
    replay_at: Callable[[int, int], ReplayResult],
    capacity: int,
    guess: int = FIRST_GUESS,
    limit: int = MAX_SEARCH_BATCH,
) -> tuple[int, ReplayResult | None]:
    """The largest batch whose replayed run, `replay_at(batch, capacity)`, fits in `capacity` bytes (0 when batch
    1 does not), and the replay that failed at max + 1 (None when everything up to `limit` fits).

    Walks from `guess` (e.g. a linear estimate) with steps 1, 2, 4, ... until the edge is bracketed, then bisects.
    Batch 1 is only replayed when 2 does not fit. Fitting is not monotone in the batch where a run needs the
    allocator to give back its cached segments and retry (release_cached_blocks): which blocks are free then
    depends on how each size was served, and at huge inference batches fitting and failing batches interleave
    (levit_256 bf16 on an H200 at batch 41,000-42,000: failing islands a few to a few tens of batches wide,
    the model and the GPU failing at 41,472 alike, with the same 132.35 GiB reserved). So the edge found is
    then checked from below (`_probe_below`): the answer is an edge under which the batches probed down to
    PROBE_DEPTH of it all fit, not an island above a failure a user raising the batch would meet first.
    """
    cache: dict[int, ReplayResult] = {}

    def fits(b: int) -> bool:
        if b not in cache:
            cache[b] = replay_at(b, capacity)
        return cache[b].fits

    lo, hi = 0, limit + 1  # lo fits (0: nothing known), hi does not (limit + 1: unknown)
    b = min(max(guess, FIRST_GUESS), limit)
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
            b = max(hi - step, FIRST_GUESS) if hi > FIRST_GUESS else 1
            if fits(b):
                lo = b
            else:
                hi = b
            step *= 2
    lo, hi = _bisect(fits, lo, hi)
    while (failed := _probe_below(fits, lo)) is not None:
        lo, hi = _bisect(fits, _fit_below(fits, failed), failed)
    return lo, cache.get(hi)


def _bisect(fits: Callable[[int], bool], lo: int, hi: int) -> tuple[int, int]:
    """Narrow (lo fits or is 0, hi fails) to neighbours."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi


def _probe_below(fits: Callable[[int], bool], edge: int) -> int | None:
    """The first of edge - 1, edge - 2, edge - 4, ... (down to PROBE_DEPTH of `edge` below it) that fails, or None."""
    step = 1
    while step <= edge * PROBE_DEPTH and edge - step >= 1:
        if not fits(edge - step):
            return edge - step
        step *= 2
    return None


def _fit_below(fits: Callable[[int], bool], failed: int) -> int:
    """A batch below `failed` that fits (failed - 1, - 2, - 4, ...), or 0 when none down to batch 1 does."""
    step = 1
    while failed - step >= 1:
        if fits(failed - step):
            return failed - step
        step *= 2
    return 1 if failed > 1 and fits(1) else 0
