"""Find the exact largest batch that fits, over an abstract `try_batch(n) -> Attempt`.

Pure arithmetic, no torch: the GPU side lives in the trial worker, so this module can be tested
against fake trial functions and reused for any resource with a monotone "fits" predicate.

Strategy (docs/definitions.md, "How B is found"):
1. try batch 1 and 2 and fit peak(b) = static + per_sample * b to their measured peaks;
2. jump to the batch that model predicts for the usable memory;
3. walk from there towards the edge with steps 1, 2, 4, ... (refitting on the largest successes
   after each fit), so a prediction off by d costs O(log d) trials; after an out-of-memory trial the
   bytes its failed allocation lacked (from PyTorch's message) bound how far back the next guess goes;
4. once the edge is bracketed, alternate the model's guess (clamped into the bracket) with halving.
Without a capacity figure the jump is replaced by doubling. A predicted max batch (probe/hint.py) is
polled before each trial, never waited for; when it comes while the bracket is still wide it is tried
next; when it fits, the search walks up from it (steps 1, 2, 4, 8); when it fails, the next trial comes from what that
trial measured: its out-of-memory message says how many bytes the failed allocation lacked, and the trials that fitted
how many bytes a sample costs, so the next batch leaves that many samples out (a prediction 2.6% high fails once, not
five times on the way down by 1, 2, 4, 8). The memory model goes on from there.
Batch and trial count are bounded, so the worst case stays logarithmic in the cap.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable

from memprobe.core.estimates.memory_model import Attempt, edge_model
from memprobe.core.process.outcomes import STOPPING, TOO_SMALL, oom_numbers

MAX_GROWTH = 8  # largest jump, as a multiple of the largest batch known to fit, before a failure is seen


# Where batch 1 is too small to train (batch norm over a 1x1 map: ResNeSt, LeViT), the search starts at these.
SMALLEST_BATCHES = (2, 4)
HINT_MIN_GAP = 3  # a prediction is tried only while more than this many batches lie between the fit and the failure
HINT_WALK = 4  # up from a prediction that fits: steps 1, 2, 4, 8; down from one that fails: at most 4 measured jumps


@dataclass
class HintUse:
    """What the search did with a predicted max batch: tried it next (`used`), or why not."""

    batch: int
    after_trials: int  # trials the search had run when it first saw the prediction
    used: bool
    why: str = ""  # why it was not used ("" when used)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class SearchResult:
    """Outcome of the search. `max_batch` fits; `first_failure` (= max_batch + 1 when
    `stop == "edge"`) does not."""

    max_batch: int
    first_failure: int | None
    stop: str  # "edge" | "nothing-fits" | "cap" | "trial-limit" | "error" | "user-error"
    attempts: list[Attempt] = field(default_factory=list)
    error: str = ""
    hinted: int | None = None  # the predicted batch the search tried, if any
    hint_use: HintUse | None = None  # what became of a prediction the search saw (None: none came)

    @property
    def trials(self) -> int:
        return len(self.attempts)


class _Stop(Exception):
    pass


@dataclass
class _State:
    """The search's state: the edge's bracket (`lo` fits, 0 while nothing is known; `hi` does not, the cap + 1
    while nothing failed), the trials run, the prediction not yet judged (`hint`), and what became of it."""

    lo: int
    hi: int
    attempts: list[Attempt] = field(default_factory=list)
    hint: Callable[[], int | None] | None = None
    hinted: int | None = None
    hint_use: HintUse | None = None


@dataclass
class _Walk:
    """One walk towards the edge from the memory model's jump (a new one after a prediction moved the bracket): its
    step, the step it grows from, its direction (+1 up from a fit, -1 down from a failure, 0 before the jump), whether
    it overshot and so bracketed the edge, and whether the last trial in that bracket was the model's guess."""

    step: int = 1
    base_step: int = 1
    direction: int = 0
    bracketed: bool = False
    guessed_last: bool = False

    def turn(self, fits: bool, stepped: bool) -> None:
        """Take a trial's outcome: its direction, a bracket where the walk overshot, and the next step, which grows
        only while the model keeps lagging behind the walk (`stepped`)."""
        direction = 1 if fits else -1
        if self.direction != 0 and direction != self.direction:
            self.bracketed = True  # the walk overshot: the edge lies inside a known interval
        if self.direction != 0:
            grow = stepped and direction == self.direction
            self.step = max(self.step * 2, self.base_step) if grow else max(1, self.step // 2)
        self.direction = direction


class _Search:
    """find_max_batch's trials over `try_batch`, the bracket they narrow, its memory model and the prediction."""

    def __init__(
        self,
        try_batch: Callable[[int], Attempt],
        capacity_bytes: float | None,
        max_batch: int,
        max_trials: int,
        on_attempt: Callable[[Attempt], None] | None,
        hint: Callable[[], int | None] | None,
        on_hint: Callable[[HintUse], None] | None,
    ) -> None:
        self.try_batch, self.capacity_bytes, self.max_batch, self.max_trials = (
            try_batch,
            capacity_bytes,
            max_batch,
            max_trials,
        )
        self.on_attempt, self.on_hint = on_attempt, on_hint
        self.state = _State(0, max_batch + 1, hint=hint)

    def run(self, batch: int) -> Attempt:
        """One trial, which narrows the bracket. Raises _Stop past the trial limit or on a stopping outcome."""
        state = self.state
        if len(state.attempts) >= self.max_trials:
            raise _Stop("trial-limit")
        attempt = self.try_batch(batch)
        state.attempts.append(attempt)
        if self.on_attempt is not None:
            self.on_attempt(attempt)
        if attempt.outcome in STOPPING:
            raise _Stop(attempt.outcome)
        if attempt.fits:
            state.lo = max(state.lo, batch)
        elif attempt.outcome != TOO_SMALL:  # a batch too small for batch norm says nothing of the edge above it
            state.hi = min(state.hi, batch)
        return attempt

    def predict(self) -> int | None:
        """The memory model's max batch for the capacity, or None without a capacity or a model."""
        if self.capacity_bytes is None:
            return None
        attempts, hi = self.state.attempts, self.state.hi
        model = edge_model(attempts)
        if model is None:
            return None
        guess = model.max_batch_for(self.capacity_bytes)
        # The lowest failure's out-of-memory message says how many bytes it lacked: at least that
        # many samples' worth must go. Near the edge peaks can grow faster than the line (a large
        # block that no longer fits in a fragmented cache), so this can undercut the line's guess.
        lacked = next((a.shortfall for a in attempts if a.batch == hi and not a.fits), None)
        if lacked:
            guess = min(guess, hi - math.ceil(lacked / model.per_sample_bytes))
        return guess

    def take_hint(self) -> bool:
        """Poll the prediction; True when it has just come, still useful, and was tried and walked from."""
        state = self.state
        if state.hint is None:
            return False
        predicted = state.hint()
        if predicted is None:
            return False
        state.hint = None  # judged once: a prediction that came too late stays unused
        use = state.hint_use = _judge_hint(min(predicted, self.max_batch), len(state.attempts), state.lo, state.hi)
        if self.on_hint is not None:
            self.on_hint(use)
        if use.used:
            state.hinted = use.batch
            _walk_from_hint(use.batch, self.run, state)
        return use.used

    def first(self) -> Attempt:
        """Batch 1, or where it is too small to train, the smallest batch that is not (SMALLEST_BATCHES)."""
        first = self.run(1)
        for larger in SMALLEST_BATCHES:  # batch norm in training needs more than one value per channel
            if first.outcome != TOO_SMALL or larger > self.max_batch:
                break
            first = self.run(larger)
        return first

    def close_in(self) -> None:
        """Walk to the edge until the bracket is closed (lo + 1 = hi): the model's jump, then steps 1, 2, 4, ...,
        then inside the bracket the model's guess and halving in turn."""
        state, walk = self.state, _Walk()
        while state.hi - state.lo > 1:
            if self.take_hint():
                walk = _Walk()  # the prediction's walk moved the bracket: the memory model starts over from it
                continue
            candidate, stepped, capped = self._candidate(walk)
            attempt = self.run(candidate)
            if capped and attempt.fits and walk.direction == 0:
                continue  # still approaching the predicted edge: the next step is a new jump
            walk.turn(attempt.fits, stepped)

    def _candidate(self, walk: _Walk) -> tuple[int, bool, bool]:
        """The next batch to try: (the batch, whether the walk's step went past the model's guess, whether the
        batch was capped at MAX_GROWTH x the largest fit)."""
        lo, hi = self.state.lo, self.state.hi
        guess = self.predict()
        stepped = False
        if walk.bracketed or (guess is None and hi <= self.max_batch):
            # Inside a bracket the guess (clamped into it: a guess at or below the fit says
            # "try one more") is tried, but never twice in a row: alternating with halving
            # keeps the worst case logarithmic.
            if walk.bracketed and not walk.guessed_last and guess is not None:
                candidate, walk.guessed_last = guess, True
            else:
                candidate, walk.guessed_last = (lo + hi) // 2, False
        elif guess is None:
            candidate = 2 * lo  # no model: double until a failure
        elif walk.direction == 0:
            candidate = guess  # the jump
            # After the jump, try b+1 (or b-1) first; if the model was off, the walk grows from
            # ~0.4% of the batch, so large batches do not crawl by one.
            walk.step, walk.base_step = 1, max(1, guess // 256)
        elif walk.direction > 0:
            stepped = lo + walk.step > guess
            candidate = max(lo + walk.step, guess)
        else:
            stepped = hi - walk.step < guess
            candidate = min(hi - walk.step, guess)
        capped = hi > self.max_batch and candidate > lo * MAX_GROWTH
        if capped:
            # A fit from tiny batches can be far off (allocator rounding dominates), so never
            # go more than MAX_GROWTH x past a known fit before the model is refitted there.
            candidate = lo * MAX_GROWTH
        return min(max(candidate, lo + 1), hi - 1), stepped, capped


def find_max_batch(
    try_batch: Callable[[int], Attempt],
    capacity_bytes: float | None = None,
    max_batch: int = 65536,
    max_trials: int = 40,
    on_attempt: Callable[[Attempt], None] | None = None,
    hint: Callable[[], int | None] | None = None,
    on_hint: Callable[[HintUse], None] | None = None,
) -> SearchResult:
    """Search the largest batch n with try_batch(n).fits, assuming fits is monotone in n.

    hint: a predicted max batch h (probe/hint.py), polled before each trial once batch 1 fits; it must answer
    at once, None while no prediction has come. The first h it answers is judged once (`on_hint` gets the
    HintUse): while the edge's bracket (lo, hi) holds h and more than HINT_MIN_GAP batches, h is tried next
    and the search goes from it (h+1, h+3, h+7, ... while they fit; when h fails, the batch its out-of-memory
    figures point to: _walk_from_hint), then on from the bracket with its memory model; otherwise h is only recorded. Until h comes the search
    goes on with its own memory model, so a slow prediction never delays it. None: no hint.

    capacity_bytes: memory the workload may use, in the same terms as the attempts' peaks
    (peak_reserved, else peak_allocated); without it the search doubles until the first failure.
    A trial whose outcome is ERROR or USER_ERROR stops the search (another batch will not help; the
    stop is named after the outcome);
    every other non-fit outcome bounds the edge from above. Never raises for trial outcomes.
    """
    if max_batch < 1:
        raise ValueError("max_batch must be at least 1")
    search = _Search(try_batch, capacity_bytes, max_batch, max_trials, on_attempt, hint, on_hint)
    state = search.state
    stop = "edge"
    try:
        first = search.first()
        if not first.fits:
            return SearchResult(0, first.batch, "nothing-fits", state.attempts)
        search.take_hint()
        nxt = state.lo + 1 if state.lo >= 2 else 2
        if max_batch >= nxt and nxt < state.hi and sum(a.fits for a in state.attempts) < 2:
            search.run(nxt)  # the edge model needs two fits
        search.close_in()
        if state.lo >= max_batch:
            stop = "cap"
    except _Stop as reason:
        stop = str(reason)
    lo, hi = state.lo, state.hi
    error = state.attempts[-1].message if stop in STOPPING else ""
    return SearchResult(lo, hi if hi <= max_batch else None, stop, state.attempts, error, state.hinted, state.hint_use)


def _judge_hint(predicted: int, after_trials: int, lo: int, hi: int) -> HintUse:
    """Whether a prediction that came after `after_trials` trials is still worth trying, with (lo, hi) the
    bracket known so far (hi = cap + 1 when nothing failed yet): it is while it lies inside the bracket
    and the bracket is wider than HINT_MIN_GAP batches (the memory model closes a narrower one as fast)."""
    if predicted <= lo:
        return HintUse(predicted, after_trials, False, f"at or below batch {lo}, which already fitted")
    if predicted >= hi:
        return HintUse(predicted, after_trials, False, f"at or above batch {hi}, which already failed")
    if hi - lo - 1 <= HINT_MIN_GAP:
        return HintUse(
            predicted,
            after_trials,
            False,
            f"the search had already narrowed the edge to between {lo} (fits) and {hi} (fails)",
        )
    return HintUse(predicted, after_trials, True)


def _walk_from_hint(h: int, run: Callable[[int], Attempt], state: _State) -> None:
    """Try the predicted batch h. When it fits, walk up from it by steps 1, 2, 4, 8 while they fit, until the edge is
    bracketed, the walk reaches the bracket (state's lo, hi) or HINT_WALK steps are spent: a prediction is off by a
    few samples when it is off, and a model fitted on batch 1 and h cannot say by how much (an LLM's longest
    sequence: predicted 17408, edge 17401). When h fails, try the batch that its measurement points to
    (`after_failure`), again after each failure, at most HINT_WALK times; a failure that says nothing about the
    bytes it lacked leaves the rest to the search's memory model. Raises what run raises (_Stop)."""
    attempts = state.attempts
    if not run(h).fits:
        for _ in range(HINT_WALK):
            batch = after_failure(attempts)
            if batch is None or batch <= state.lo or batch >= state.hi:
                return  # nothing measured to jump by, or it points into what is known: the memory model goes on
            if run(batch).fits:
                return  # bracketed: the memory model closes the edge from the fit near it
        return
    batch, step = h, 1
    for _ in range(HINT_WALK):
        batch = batch + step
        if batch >= state.hi:
            return  # bracketed on that side already: the search bisects from here
        if not run(batch).fits:
            return  # bracketed: the search bisects from here
        step *= 2


def sample_bytes(attempts: list[Attempt]) -> float | None:
    """The bytes one more sample costs, as the trials so far measured it: the edge model's slope where two batches
    fitted; else the slope from batch 1's peak to what an out-of-memory failure's figures say its batch needed at
    least (the bytes the process held, CUDA context included, plus those it asked for), the smallest such slope.
    None when neither is known."""
    model = edge_model(attempts)
    if model is not None:
        return model.per_sample_bytes
    one = next((a for a in attempts if a.fits and a.batch == 1 and (a.peak_reserved or a.peak_allocated)), None)
    if one is None:
        return None
    base = float(one.peak_reserved or one.peak_allocated or 0)
    slopes = []
    for a in attempts:
        numbers = oom_numbers(a.message) if not a.fits and a.batch > 1 else {}
        if "process_in_use_bytes" in numbers and "requested_bytes" in numbers:
            needed = numbers["process_in_use_bytes"] + numbers["requested_bytes"]
            slopes.append((needed - base) / (a.batch - 1))
    slopes = [x for x in slopes if x > 0]
    return min(slopes) if slopes else None


def after_failure(attempts: list[Attempt]) -> int | None:
    """The batch to try after the lowest failure so far, from what the failures measured: their out-of-memory
    messages say how many bytes each failed allocation lacked (requested minus free). With two such failures, the
    batch where the line through their shortfalls reaches zero (a secant: the failing allocation comes at about the
    same point of each step, so what it lacks grows by a fixed share of each sample's bytes); with one, that batch
    less the samples its shortfall buys at sample_bytes each (exact when the step fails at its peak allocation,
    short of the edge's distance when it fails before). Always at least one below the lowest failure. None when no
    failure's message gives figures (not an out-of-memory error, another allocator's, or a lack under the message's
    rounding) or, with one, no per-sample cost is known yet."""
    measured = sorted((a.batch, a.shortfall) for a in attempts if not a.fits and a.shortfall)
    if not measured or measured[0][0] != min(a.batch for a in attempts if not a.fits):
        return None
    (low, lacked), above = measured[0], measured[1:]
    higher = next(((b, s) for b, s in above if b > low and s > lacked), None)
    if higher is not None:
        slope = (higher[1] - lacked) / (higher[0] - low)  # bytes lacked per sample more
        return low - max(1, math.ceil(lacked / slope))
    per_sample = sample_bytes(attempts)
    if not per_sample:
        return None
    return low - max(1, math.ceil(lacked / per_sample))
