"""The fresh-process walk to a max batch that holds: B fits in K fresh runs, B+1 fails in one, the flaky band measured.

Pure arithmetic over an abstract `check(n) -> Attempt` (one fresh run: a process that ran nothing else), no torch, so
it is tested against fake checks that fit or fail by a script. Near the edge a fresh process does not always behave
like the last one (cuDNN's algorithm and workspace choice, the allocator's state): a batch can fit in one fresh run
and fail in the next. So B is the largest batch that fitted in `repeat` (K) fresh runs and never failed, below every
batch that failed in one; the batches from the lowest fresh failure up to the highest fresh fit above it are the
flaky band. Once the edge is seen to be flaky (a batch fitted at or above one that failed), the walk changes: a
candidate for B is repeated before the walk moves from it, the walk down jumps by the band's width (doubling) instead
of stepping by one, and no new batch is tried once the walk's own runs have taken `budget_s` seconds; only the
repeats that make the best candidate hold go on, within the check cap. The search's own fresh fits bound the walk
down until a check fails at or below one of them; from then on they are no floor and the budget, not the check cap,
bounds the walk.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Collection, Mapping

from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.process.outcomes import STOPPING
from memprobe.probe.search import SearchResult

# Closing a bracket that the walk found within the check limit may take up to this many times the limit
# in all: a limit that runs out one check before B+1 is seen would leave the pair unverified.
CHECK_CAP_FACTOR = 2
# Near a flaky edge the walk tries no new batch once its own fresh runs have taken this long. A small CNN's fresh run
# takes 8-24 s on an H200 (a process, the build, the trial and the timed steps): 90 s is 4 to 10 runs, enough to
# repeat a candidate and halve the band's lower end two or three times, against 17 runs in 160 s stepping by one.
EDGE_BUDGET_S = 90.0
# Where the budget bounds the walk, the count of checks may reach this many times its usual cap.
BACKSTOP_FACTOR = 4


@dataclass
class EdgeCheck:
    """The proof pair re-checked in fresh processes: `fits` fitted in `fits_at_b` of `runs_at_b` fresh runs (all of
    them, at least `repeat`, when verified) and `fails` did not."""

    max_batch: int
    fits: int | None
    fails: int | None
    agreed: bool  # True when the fresh checks confirmed the search's answer unchanged
    verified: bool  # True when B fitted in K fresh runs and B+1 failed in one (or B is the batch cap)
    checks: list[Attempt] = field(default_factory=list)
    reused: list[int] = field(default_factory=list)  # batches whose fresh search trial served as the check
    repeat: int = 1  # K: the fresh runs B must fit in
    runs_at_b: int = 0
    fits_at_b: int = 0
    ended_by: str = "edge"  # one of core/records.ENDINGS


class Tally:
    """Fresh runs by batch: how many fitted and how many failed."""

    def __init__(self) -> None:
        self.fits: Counter[int] = Counter()
        self.fails: Counter[int] = Counter()

    def add(self, attempt: Attempt) -> None:
        (self.fits if attempt.fits else self.fails)[attempt.batch] += 1

    def lowest_failure(self) -> int | None:
        return min(self.fails, default=None)

    def highest_fit_below(self, bound: int | None) -> int | None:
        """The highest batch that fitted in a fresh run, below `bound` (None: anywhere). Every batch below the lowest
        failure never failed, so below it this is the best candidate for B."""
        return max((b for b in self.fits if bound is None or b < bound), default=None)

    def band(self) -> tuple[int, int] | None:
        """(lowest fresh failure, highest fresh fit at or above it): the flaky band; None while every fit lies below
        every failure."""
        low = self.lowest_failure()
        high = max((b for b in self.fits if low is not None and b >= low), default=None)
        return None if low is None or high is None else (low, high)


class _Walk:
    """The state of one walk: the checks run or reused, the tally, the seconds the walk's own runs took."""

    def __init__(
        self, check: Callable[[int], Attempt], known: Mapping[int, Attempt] | None, repeat: int, max_checks: int
    ) -> None:
        self.check, self.known, self.repeat = check, dict(known or {}), repeat
        self.checks: list[Attempt] = []
        self.reused: list[int] = []
        self.tally = Tally()
        self.spent_s = 0.0
        self.explore_cap = max_checks
        self.hard_cap = CHECK_CAP_FACTOR * max_checks + repeat - 1

    def run(self, batch: int) -> Attempt:
        if batch in self.known:  # a search trial that ran fresh by the same definition: taken once, as its check
            attempt = self.known.pop(batch)
            self.reused.append(batch)
        else:
            attempt = self.check(batch)
            self.spent_s += float(attempt.wall_seconds or attempt.seconds or 0.0)
        attempt.fresh = True
        self.checks.append(attempt)
        self.tally.add(attempt)
        return attempt

    def pair(self) -> tuple[int | None, int | None]:
        """(lo, hi): the best candidate for B (the highest fresh fit below every fresh failure) and the lowest fresh
        failure."""
        hi = self.tally.lowest_failure()
        return self.tally.highest_fit_below(hi), hi

    def holds(self, batch: int) -> bool:
        return self.tally.fits[batch] >= self.repeat and not self.tally.fails[batch]


def confirm_edge(
    check: Callable[[int], Attempt],
    found: SearchResult,
    max_checks: int = 6,
    max_batch: int = 65536,
    known: Mapping[int, Attempt] | None = None,
    fresh_fits: Collection[int] = (),
    repeat: int = 1,
    budget_s: float | None = EDGE_BUDGET_S,
) -> EdgeCheck:
    """Re-check the search's answer in fresh processes, move it where the fresh edge is, and make it hold.

    `check(n)` must run batch n in a process that ran nothing else. `known` holds search trials that already ran in
    fresh processes by the same definition: a batch found there is taken as its first check instead of being run
    (listed in `reused`; it still counts as a check). The pair is checked failure-side first (B+1), then B, so that
    the last fresh process is one that proved B fits (the caller can measure throughput in it). If the edge moved,
    walk in the direction the checks say (steps 1, 1, 2, 4, ...) and bisect once bracketed (the walk starts at the
    lowest fresh failure in `known` where that lies below B+1). Walking down, it never
    steps below the highest of `fresh_fits` under the lowest fresh failure (batches that trained in a fresh process
    during the search but are not checks: their timed run did not run), until the edge is seen to be flaky. B must
    fit in `repeat` fresh runs with none failing: B is run again until it has; a failed repeat makes it part of the
    flaky band, and the walk goes on below it (see the module's docstring for what changes near a flaky edge, and
    `budget_s`, None for no time limit). New batches are tried for `max_checks` checks, CHECK_CAP_FACTOR x
    `max_checks` once a bracket is found; repeats go on to that plus repeat - 1. When no fresh run fits, `max_batch`
    is the bound below the lowest fresh failure and `verified` is False. Never raises for a check's outcome.
    """
    walk = _Walk(check, known, max(1, repeat), max_checks)
    claimed = found.max_batch
    if found.stop in STOPPING:
        return EdgeCheck(claimed, None, None, False, False, repeat=walk.repeat)
    # The walk starts at B+1, or lower where a fresh search trial already failed lower (the search's trials need not
    # agree with one edge): B is never reported above a fresh failure.
    failed = [b for b, a in (known or {}).items() if not a.fits]
    batch: int | None = min(claimed + 1, max_batch, *failed)
    walked = flaky_steps = 0
    ended = "edge"
    while batch is not None:
        walk.run(batch)
        batch, ended, walked, flaky_steps = _next(walk, max_batch, fresh_fits, budget_s, walked, flaky_steps)
    return _answer(walk, claimed, max_batch, ended)


def _next(
    walk: _Walk, max_batch: int, fresh_fits: Collection[int], budget_s: float | None, walked: int, flaky_steps: int
) -> tuple[int | None, str, int, int]:
    """The next batch to run (None: the walk ends), how the walk ends if it does, and the step counters after it."""
    lo, hi = walk.pair()
    flaky = walk.tally.band() is not None
    untrusted = _search_fits_failed(walk, fresh_fits)
    at_cap = hi is None and lo is not None and lo >= max_batch
    if hi == 1 and lo is None:
        return None, "edge", walked, flaky_steps  # batch 1 does not train in a fresh process
    # Once the search's fits proved nothing, the budget bounds the walk's time rather than the count of checks
    # (4.5 s runs: 12 checks ended inception_v3's walk with no fit at all, 54 s into its 90 s); BACKSTOP_FACTOR x
    # the caps still ends a walk whose checks take no time.
    timed = untrusted and budget_s is not None
    backstop = BACKSTOP_FACTOR if timed else 1
    # A candidate for B is repeated at the pair, at the cap, and anywhere once the edge is flaky (so that the walk
    # only moves from a batch that holds).
    if lo is not None and not walk.holds(lo) and (hi == lo + 1 or at_cap or flaky):
        if len(walk.checks) < backstop * walk.hard_cap:
            return lo, "edge", walked, flaky_steps
        return None, "check-limit", walked, flaky_steps
    if lo is not None and hi == lo + 1:
        return None, "edge", walked, flaky_steps
    if at_cap:
        return None, "cap", walked, flaky_steps
    bracketed = lo is not None and hi is not None
    wide = bracketed or timed
    if len(walk.checks) >= backstop * (CHECK_CAP_FACTOR * walk.explore_cap if wide else walk.explore_cap):
        return None, "check-limit", walked, flaky_steps
    if (flaky or untrusted) and budget_s is not None and walk.spent_s >= budget_s:
        return None, "budget", walked, flaky_steps
    if lo is not None and hi is not None:
        return (lo + hi) // 2, "edge", walked, flaky_steps  # bisect
    step = 1 if walked < 2 else 2 ** (walked - 1)
    walked += 1
    if hi is None:  # everything checked so far fits: walk up
        assert lo is not None
        return min(lo + step, max_batch), "edge", walked, flaky_steps
    if flaky:
        # Below a flaky band, stepping by one lands in the band again: jump by its width, doubling each time.
        band = walk.tally.band()
        assert band is not None
        width = band[1] - band[0] + 1
        jump = width * 2**flaky_steps
        return max(1, hi - jump), "edge", walked, flaky_steps + 1
    floor = 1 if untrusted else max((b for b in fresh_fits if b < hi), default=1)
    return max(1, floor, hi - step), "edge", walked, flaky_steps


def _search_fits_failed(walk: _Walk, fresh_fits: Collection[int]) -> bool:
    """Whether a check failed at or below a batch that fitted fresh in the search. Those fits ran the trial but not
    the steps after it (inception_v3 on an H200: 2763-2772 fitted in the search, then each failed in the steps after
    the trial), so once one is contradicted none of them is a floor for the walk down."""
    low = walk.tally.lowest_failure()
    return low is not None and any(b >= low for b in fresh_fits)


def _answer(walk: _Walk, claimed: int, max_batch: int, ended: str) -> EdgeCheck:
    """The EdgeCheck the walk ended with: B the best candidate below every fresh failure (or the bound below the lowest
    failure when none fitted), verified when it holds and B+1 failed (or B is the cap)."""
    lo, hi = walk.pair()
    if lo is None:
        if hi == 1:
            return EdgeCheck(0, 0, 1, claimed == 0, True, walk.checks, walk.reused, walk.repeat, 0, 0, ended)
        best = hi - 1 if hi is not None else claimed
        return EdgeCheck(best, None, hi, False, False, walk.checks, walk.reused, walk.repeat, 0, 0, ended)
    runs = walk.tally.fits[lo] + walk.tally.fails[lo]
    verified = walk.holds(lo) and (hi == lo + 1 or (hi is None and lo >= max_batch))
    return EdgeCheck(
        lo,
        lo,
        hi,
        verified and lo == claimed,
        verified,
        walk.checks,
        walk.reused,
        walk.repeat,
        runs,
        walk.tally.fits[lo],
        ended,
    )
