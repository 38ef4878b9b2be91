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

from memprobe.core.memory_model import Attempt, edge_model
from memprobe.core.outcomes import STOPPING, TOO_SMALL, oom_numbers

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
    attempts: list[Attempt] = []
    lo, hi = 0, max_batch + 1  # invariant: lo fits (0 = nothing known), hi does not (cap+1 = unknown)
    state: dict = {"lo": lo, "hi": hi, "hint": hint, "hinted": None, "hint_use": None, "attempts": attempts}

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
        elif attempt.outcome != TOO_SMALL:  # a batch too small for batch norm says nothing of the edge above it
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

    def take_hint() -> bool:
        """Poll the prediction; True when it has just come, still useful, and was tried and walked from."""
        if state["hint"] is None:
            return False
        predicted = state["hint"]()
        if predicted is None:
            return False
        state["hint"] = None  # judged once: a prediction that came too late stays unused
        use = state["hint_use"] = _judge_hint(min(predicted, max_batch), len(attempts), state["lo"], state["hi"])
        if on_hint is not None:
            on_hint(use)
        if use.used:
            state["hinted"] = use.batch
            _walk_from_hint(use.batch, run, state)
        return use.used

    stop = "edge"
    try:
        first = run(1)
        for larger in SMALLEST_BATCHES:  # batch norm in training needs more than one value per channel
            if first.outcome != TOO_SMALL or larger > max_batch:
                break
            first = run(larger)
        if not first.fits:
            return SearchResult(0, first.batch, "nothing-fits", attempts)
        take_hint()
        nxt = state["lo"] + 1 if state["lo"] >= 2 else 2
        if max_batch >= nxt and nxt < state["hi"] and sum(a.fits for a in attempts) < 2:
            run(nxt)  # the edge model needs two fits
        new_walk = True
        while state["hi"] - state["lo"] > 1:
            if take_hint():
                new_walk = True  # the prediction's walk moved the bracket: the memory model starts over from it
                continue
            if new_walk:
                new_walk = False
                step = base_step = 1
                direction = 0  # +1 walking up from a fit, -1 walking down from a failure, 0 not walking
                bracketed_by_walk = guessed_last = False
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
    return SearchResult(lo, hi if hi <= max_batch else None, stop, attempts, error, state["hinted"], state["hint_use"])


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


def _walk_from_hint(h: int, run: Callable[[int], Attempt], state: dict) -> None:
    """Try the predicted batch h. When it fits, walk up from it by steps 1, 2, 4, 8 while they fit, until the edge is
    bracketed, the walk reaches the bracket (state's lo, hi) or HINT_WALK steps are spent: a prediction is off by a
    few samples when it is off, and a model fitted on batch 1 and h cannot say by how much (an LLM's longest
    sequence: predicted 17408, edge 17401). When h fails, try the batch that its measurement points to
    (`after_failure`), again after each failure, at most HINT_WALK times; a failure that says nothing about the
    bytes it lacked leaves the rest to the search's memory model. Raises what run raises (_Stop)."""
    attempts: list[Attempt] = state["attempts"]
    if not run(h).fits:
        for _ in range(HINT_WALK):
            batch = after_failure(attempts)
            if batch is None or batch <= state["lo"] or batch >= state["hi"]:
                return  # nothing measured to jump by, or it points into what is known: the memory model goes on
            if run(batch).fits:
                return  # bracketed: the memory model closes the edge from the fit near it
        return
    batch, step = h, 1
    for _ in range(HINT_WALK):
        batch = batch + step
        if batch >= state["hi"]:
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
