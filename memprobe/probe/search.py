"""Find the exact largest batch that fits, over an abstract `try_batch(n) -> Attempt`.

Pure arithmetic, no torch: the GPU side lives in the trial worker, so this module can be tested
against fake trial functions and reused for any resource with a monotone "fits" predicate.

Strategy (see DESIGN.md, "Finding the max batch in few trials"):
1. try batch 1 and 2 and fit peak(b) = static + per_sample * b to their measured peaks;
2. jump to the batch that model predicts for the usable memory;
3. walk from there towards the edge with steps 1, 2, 4, ... (refitting on the largest successes
   after each fit), so a prediction off by d costs O(log d) trials; after an out-of-memory trial the
   bytes its failed allocation lacked (from PyTorch's message) bound how far back the next guess goes;
4. once the edge is bracketed, alternate the model's guess (clamped into the bracket) with halving.
Without a capacity figure the jump is replaced by doubling.
Batch and trial count are bounded, so the worst case stays logarithmic in the cap.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from memprobe.probe.errors import FIT, STOPPING

MAX_GROWTH = 8  # largest jump, as a multiple of the largest batch known to fit, before a failure is seen


@dataclass
class Attempt:
    """One trial: a batch size, what happened, the peak memory it reached, and how long it took."""

    batch: int
    outcome: str
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    seconds: float = 0.0
    message: str = ""
    fresh: bool = False  # True when it ran in a process that had run nothing else (a proof check)
    steps: int | None = None  # steps the trial ran (more than asked when fp16 loss scaling skipped updates)
    wall_seconds: float | None = None  # fresh trials: start to end of their own process (fork, build, trial, exit)
    loss_scale: float | None = None  # fp16 fits: the GradScaler's scale at the end (the next trial starts there)
    done_at_s: float | None = None  # seconds from the precision's start to this trial's end: the search's timeline

    @property
    def fits(self) -> bool:
        return self.outcome == FIT

    @property
    def shortfall(self) -> float | None:
        """Bytes the failed allocation lacked, from PyTorch's out-of-memory message (None if unsaid)."""
        return None if self.fits else oom_shortfall(self.message)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Attempt":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


_SIZE = r"([\d.]+) (GiB|MiB|KiB|bytes|B)\b"
_OOM_NUMBERS = re.compile(rf"Tried to allocate {_SIZE}.*?of which {_SIZE} is free", re.S)
_UNITS = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10, "bytes": 1, "B": 1}


def oom_shortfall(message: str) -> float | None:
    """Bytes a failed CUDA allocation lacked (requested minus free on the device), read from
    PyTorch's out-of-memory message ("Tried to allocate 8.23 GiB. ... of which 3.42 GiB is free");
    None when the message does not say, or says nothing was lacking."""
    found = _OOM_NUMBERS.search(message or "")
    if not found:
        return None
    requested = float(found.group(1)) * _UNITS[found.group(2)]
    free = float(found.group(3)) * _UNITS[found.group(4)]
    return requested - free if requested > free else None


@dataclass
class MemoryModel:
    """Linear model of peak memory: peak(b) = static_bytes + per_sample_bytes * b."""

    static_bytes: float
    per_sample_bytes: float
    basis: str  # which measured peak it was fitted to: "peak_reserved" or "peak_allocated"
    points: int  # number of distinct batch sizes it was fitted on
    max_residual_bytes: float = 0.0

    def predict(self, batch: float) -> float:
        return self.static_bytes + self.per_sample_bytes * batch

    def max_batch_for(self, capacity_bytes: float) -> int:
        """The largest batch whose predicted peak stays within capacity (0 if none)."""
        if not self.per_sample_bytes > 0:  # also refuses NaN
            raise ValueError(f"memory model has no positive per-sample cost ({self.per_sample_bytes})")
        return max(0, math.floor((capacity_bytes - self.static_bytes) / self.per_sample_bytes))

    def to_dict(self) -> dict:
        return asdict(self)


def fit_memory_model(
    attempts: Iterable[Attempt], basis: str = "peak_reserved", largest: int | None = None
) -> MemoryModel | None:
    """Least-squares fit of peak memory against batch over the successful attempts.

    `largest` keeps only that many of the largest distinct batch sizes (the curve near the edge is
    what matters for prediction). Returns None with fewer than two distinct batches or a non-positive
    slope. Repeated batch sizes are averaged.
    """
    by_batch: dict[int, list[float]] = {}
    for a in attempts:
        value = getattr(a, basis)
        if a.fits and value is not None:
            by_batch.setdefault(a.batch, []).append(float(value))
    batches = sorted(by_batch)
    if largest is not None:
        batches = batches[-largest:]
    if len(batches) < 2:
        return None
    xs = [float(b) for b in batches]
    ys = [sum(by_batch[b]) / len(by_batch[b]) for b in batches]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    if slope <= 0:
        return None
    static = my - slope * mx
    residual = max(abs(y - (static + slope * x)) for x, y in zip(xs, ys))
    return MemoryModel(static, slope, basis, n, residual)


EDGE_BASELINE = 0.9  # the edge model's second point is at most this share of the largest fit's batch


def edge_pair(attempts: Sequence[Attempt], basis: str) -> list[Attempt]:
    """The fits at the two batches the edge model extrapolates from (see edge_model), counting only
    fits that measured `basis`; [] with fewer than two such batches."""
    fits = sorted({a.batch for a in attempts if a.fits and getattr(a, basis) is not None})
    if len(fits) < 2:
        return []
    top = fits[-1]
    partner = max((b for b in fits[:-1] if b <= EDGE_BASELINE * top), default=fits[-2])
    return [a for a in attempts if a.batch in (partner, top) and a.fits]


def edge_model(attempts: Iterable[Attempt]) -> MemoryModel | None:
    """The memory model that extrapolates to the edge, in reserved bytes where the trials measured them.

    Two fits define it: the largest, and the largest at most EDGE_BASELINE of its batch (else the
    next smaller fit): batch 1 carries fixed costs (workspaces, rounding) that bend a line through
    it, while adjacent batches near the edge differ by workspace noise (on the H100, NasNet-Large
    fp32 peaked lower at batch 77 than at 76). Where both fits have both peaks, it is the line
    through their allocated peaks scaled by the largest fit's reserved/allocated ratio: allocated
    bytes grow linearly with the batch, while the cache's overhead on top of them is near zero at
    small batches and levels off at a few percent, so a line through two reserved peaks comes out
    too steep (BERT-Large fp16 on the H100: 1.4% overhead at batch 2, 5.7% at 16, 5.5% at 108; the
    reserved line from 2 and 16 put the edge at 105, the scaled one at the true 108). Over the 41
    first jumps of the committed H100 scans, real and capped (benchmarks/first_guess.py), it was off
    by 6.5% on average against 8.7% for the reserved line, and exact 8 times against 2. Otherwise
    (no allocated peaks, or no positive slope) it is the line through the two reserved peaks, then
    least squares over every fit. None with fewer than two fits or no positive slope.
    """
    attempts = list(attempts)
    basis = "peak_reserved" if any(a.peak_reserved for a in attempts if a.fits) else "peak_allocated"
    pair = edge_pair(attempts, basis)
    if not pair:
        return None
    if basis == "peak_reserved" and all(a.peak_allocated and a.peak_reserved for a in pair):
        allocated = fit_memory_model(pair, basis="peak_allocated")
        if allocated is not None:
            top = max(a.batch for a in pair)
            tops = [a for a in pair if a.batch == top]
            ratio = sum(a.peak_reserved / a.peak_allocated for a in tops) / len(tops)
            return MemoryModel(ratio * allocated.static_bytes, ratio * allocated.per_sample_bytes,
                               "peak_allocated x reserved/allocated of the largest fit", allocated.points,
                               ratio * allocated.max_residual_bytes)
    return fit_memory_model(pair, basis=basis) or fit_memory_model(attempts, basis=basis)


@dataclass
class SearchResult:
    """Outcome of the search. `max_batch` fits; `first_failure` (= max_batch + 1 when
    `stop == "edge"`) does not."""

    max_batch: int
    first_failure: int | None
    stop: str  # "edge" | "nothing-fits" | "cap" | "trial-limit" | "error" | "user-error"
    attempts: list[Attempt] = field(default_factory=list)
    error: str = ""
    hinted: int | None = None  # the predicted batch tried first, if any

    @property
    def trials(self) -> int:
        return len(self.attempts)


class _Stop(Exception):
    pass


def find_max_batch(
    try_batch: Callable[[int], Attempt],
    capacity_bytes: float | None = None,
    max_batch: int = 65536,
    max_trials: int = 40,
    on_attempt: Callable[[Attempt], None] | None = None,
    hint: Callable[[], int | None] | None = None,
) -> SearchResult:
    """Search the largest batch n with try_batch(n).fits, assuming fits is monotone in n.

    hint: asked once batch 1 fits, for a predicted max batch h (probe/hint.py); h is tried first, then the
    search walks from it (h+1, h+3, h+7, ... while they fit; h-1, h-3, ... while they do not) and goes on
    from the bracket. None: no hint.

    capacity_bytes: memory the workload may use, in the same terms as the attempts' peaks
    (peak_reserved, else peak_allocated); without it the search doubles until the first failure.
    A trial whose outcome is ERROR or USER_ERROR stops the search (another batch will not help; the
    stop is named after the outcome);
    every other non-fit outcome bounds the edge from above. Never raises for trial outcomes.
    """
    if max_batch < 1:
        raise ValueError("max_batch must be at least 1")
    attempts: list[Attempt] = []
    lo, hi = 0, max_batch + 1  # invariant: lo fits (0 = nothing known), hi does not (cap+1 = unknown)
    state = {"lo": lo, "hi": hi}

    def run(batch: int) -> Attempt:
        if len(attempts) >= max_trials:
            raise _Stop("trial-limit")
        attempt = try_batch(batch)
        attempts.append(attempt)
        if on_attempt is not None:
            on_attempt(attempt)
        if attempt.outcome in STOPPING:
            raise _Stop(attempt.outcome)
        if attempt.fits:
            state["lo"] = max(state["lo"], batch)
        else:
            state["hi"] = min(state["hi"], batch)
        return attempt

    def predict() -> int | None:
        if capacity_bytes is None:
            return None
        model = edge_model(attempts)
        if model is None:
            return None
        guess = model.max_batch_for(capacity_bytes)
        # The lowest failure's out-of-memory message says how many bytes it lacked: at least that
        # many samples' worth must go. Near the edge peaks can grow faster than the line (a large
        # block that no longer fits in a fragmented cache), so this can undercut the line's guess.
        lacked = next((a.shortfall for a in attempts if a.batch == state["hi"] and not a.fits), None)
        if lacked:
            guess = min(guess, state["hi"] - math.ceil(lacked / model.per_sample_bytes))
        return guess

    stop = "edge"
    state["hinted"] = None
    try:
        if not run(1).fits:
            return SearchResult(0, 1, "nothing-fits", attempts)
        _start_from_hint(hint, max_batch, run, state)
        if max_batch >= 2 and 2 < state["hi"] and sum(a.fits for a in attempts) < 2:
            run(2)  # the edge model needs two fits
        step = base_step = 1
        direction = 0  # +1 walking up from a fit, -1 walking down from a failure, 0 not walking
        bracketed_by_walk = False
        guessed_last = False
        while state["hi"] - state["lo"] > 1:
            lo, hi = state["lo"], state["hi"]
            guess = predict()
            stepped = False
            if bracketed_by_walk or (guess is None and hi <= max_batch):
                # Inside a bracket the guess (clamped into it: a guess at or below the fit says
                # "try one more") is tried, but never twice in a row: alternating with halving
                # keeps the worst case logarithmic.
                if bracketed_by_walk and not guessed_last and guess is not None:
                    candidate, guessed_last = guess, True
                else:
                    candidate, guessed_last = (lo + hi) // 2, False
            elif guess is None:
                candidate = 2 * lo  # no model: double until a failure
            elif direction == 0:
                candidate = guess  # the jump
                # After the jump, try b+1 (or b-1) first; if the model was off, the walk grows from
                # ~0.4% of the batch, so large batches do not crawl by one.
                step, base_step = 1, max(1, guess // 256)
            elif direction > 0:
                stepped = lo + step > guess
                candidate = max(lo + step, guess)
            else:
                stepped = hi - step < guess
                candidate = min(hi - step, guess)
            capped = hi > max_batch and candidate > lo * MAX_GROWTH
            if capped:
                # A fit from tiny batches can be far off (allocator rounding dominates), so never
                # go more than MAX_GROWTH x past a known fit before the model is refitted there.
                candidate = lo * MAX_GROWTH
            candidate = min(max(candidate, lo + 1), hi - 1)
            attempt = run(candidate)
            if capped and attempt.fits and direction == 0:
                continue  # still approaching the predicted edge: the next step is a new jump
            new_direction = 1 if attempt.fits else -1
            if direction != 0 and new_direction != direction:
                bracketed_by_walk = True  # the walk overshot: the edge lies inside a known interval
            # Steps grow only while the model keeps lagging behind the walk.
            if direction != 0:
                step = max(step * 2, base_step) if stepped and new_direction == direction else max(1, step // 2)
            direction = new_direction
        if state["lo"] >= max_batch:
            stop = "cap"
    except _Stop as reason:
        stop = str(reason)
    lo, hi = state["lo"], state["hi"]
    error = attempts[-1].message if stop in STOPPING else ""
    return SearchResult(lo, hi if hi <= max_batch else None, stop, attempts, error, state["hinted"])


HINT_WALK = 4  # steps 1, 2, 4, 8 from a hint (15 batches either side), then the memory model takes over


def _start_from_hint(hint: Callable[[], int | None] | None, max_batch: int, run: Callable[[int], Attempt],
                     state: dict) -> None:
    """Try the hinted batch h, then walk from it by steps 1, 2, 4, 8 (up while it fits, down while it does
    not) until the edge is bracketed or HINT_WALK steps are spent, leaving the rest to the search's memory
    model; state["hinted"] = h (None without a usable hint). A walk first, because a prediction is off by
    a few samples when it is off, and a model fitted on batch 1 and h cannot say by how much (an LLM's
    longest sequence: predicted 17408, edge 17401). Raises what run raises (_Stop)."""
    h = hint() if hint is not None else None
    if h is None or h < 2:
        return
    h = state["hinted"] = min(h, max_batch)
    up = run(h).fits
    batch, step = h, 1
    for _ in range(HINT_WALK):
        batch = batch + step if up else batch - step
        if (up and batch > max_batch) or (not up and batch < 2):
            return
        if run(batch).fits != up:
            return  # bracketed: the search bisects from here
        step *= 2


@dataclass
class EdgeCheck:
    """The proof pair re-checked in fresh processes: `fits` fits and `fails` does not."""

    max_batch: int
    fits: int | None
    fails: int | None
    agreed: bool  # True when the fresh checks confirmed the search's answer unchanged
    verified: bool  # True when both halves of the pair were seen in fresh processes
    checks: list[Attempt] = field(default_factory=list)
    reused: list[int] = field(default_factory=list)  # batches whose fresh search trial served as the check


def confirm_edge(
    check: Callable[[int], Attempt],
    found: SearchResult,
    max_checks: int = 6,
    max_batch: int = 65536,
    known: Mapping[int, Attempt] | None = None,
) -> EdgeCheck:
    """Re-check the search's answer in fresh processes and move it if the fresh edge differs.

    `check(n)` must run batch n in a process that ran nothing else. `known` holds search trials that
    already ran in fresh processes by the same definition: a batch found there is taken as its check
    instead of being run again (listed in `reused`; it still counts towards `max_checks`).
    The pair is checked failure-side first (B+1), then B, so that the last fresh process is the one
    that proved B fits (the caller can measure throughput in it). If the edge moved, walk in the
    direction the checks say (steps 1, 1, 2, 4, ...) and bisect once bracketed, at most `max_checks`
    checks in all. When no fresh check fits, `max_batch` is the bound below the lowest fresh
    failure and `verified` is False.
    """
    checks: list[Attempt] = []
    reused: list[int] = []
    known = dict(known or {})

    def run(batch: int) -> Attempt:
        if batch in known:
            attempt = known.pop(batch)
            reused.append(batch)
        else:
            attempt = check(batch)
        attempt.fresh = True
        checks.append(attempt)
        return attempt

    claimed = found.max_batch
    if found.stop in STOPPING:
        return EdgeCheck(claimed, None, None, False, False, checks, reused)
    if claimed >= max_batch:  # everything fit up to the cap: only B can be checked
        ok = run(claimed).fits
        return EdgeCheck(claimed, claimed if ok else None, None, ok, ok, checks, reused)

    # Walk from the claimed pair towards the fresh edge with steps 1, 1, 2, 4, ... and bisect once
    # a fresh fit and a fresh failure bracket it: an edge that moved by one costs one extra check.
    fit_at: int | None = None
    fail_at: int | None = None
    walked = 0
    batch = claimed + 1
    while len(checks) < max_checks:
        if run(batch).fits:
            fit_at = batch if fit_at is None else max(fit_at, batch)
        else:
            fail_at = batch if fail_at is None else min(fail_at, batch)
        if fit_at is not None and fail_at is not None:
            if fail_at - fit_at == 1:
                break
            batch = (fit_at + fail_at) // 2
            continue
        step = 1 if walked < 2 else 2 ** (walked - 1)
        walked += 1
        if fail_at is None:  # everything checked so far fits: walk up
            batch = min(fit_at + step, max_batch)
            if batch == fit_at:
                break  # the cap itself fits
        else:  # everything checked so far fails: walk down
            if fail_at == 1:
                fit_at = 0  # batch 1 does not train in a fresh process either
                break
            batch = max(1, fail_at - step)
    verified = fit_at is not None and fail_at is not None and fail_at == fit_at + 1
    agreed = verified and fit_at == claimed
    if fit_at is not None:
        best = fit_at
    else:
        # No fresh process fitted within the check limit: all that is known is that nothing from
        # `fail_at` up trains, so report the bound below it, unverified.
        best = fail_at - 1
    return EdgeCheck(best, fit_at, fail_at, agreed, verified, checks, reused)
