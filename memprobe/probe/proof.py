"""The fresh-process proof of a search's answer: B fits and B+1 fails, each in a process that ran nothing else.

Pure arithmetic over an abstract `check(n) -> Attempt`, no torch (the checks run in trial processes), so it
is tested against fake checks. Also builds the proof's record for the result file, including where the
edge was not monotone (a fresh fit above a fresh failure, or the search's own trials fitting at or above a
fresh failure) and the figures of every failed fresh check's out-of-memory message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Mapping

from memprobe.core.memory_model import Attempt
from memprobe.core.outcomes import STOPPING, oom_numbers
from memprobe.core.records import Check, Pair, Proof
from memprobe.probe.search import SearchResult

# Closing a bracket that the walk found within the check limit may take up to this many times the limit
# in all: a limit that runs out one check before B+1 is seen would leave the pair unverified.
CHECK_CAP_FACTOR = 2


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
    fresh_fits: Collection[int] = (),
) -> EdgeCheck:
    """Re-check the search's answer in fresh processes and move it if the fresh edge differs.

    `check(n)` must run batch n in a process that ran nothing else. `known` holds search trials that
    already ran in fresh processes by the same definition: a batch found there is taken as its check
    instead of being run again (listed in `reused`; it still counts as a check).
    The pair is checked failure-side first (B+1), then B, so that the last fresh process is the one
    that proved B fits (the caller can measure throughput in it). If the edge moved, walk in the
    direction the checks say (steps 1, 1, 2, 4, ...) and bisect once bracketed. Walking down, it never steps
    below the highest of `fresh_fits` under the lowest fresh failure: batches that trained in a fresh process
    during the search but are not checks (their timed run did not run), so the edge is known to be at or above
    it. The walk stops after
    `max_checks` checks; a bracket it found is closed even past that, up to CHECK_CAP_FACTOR x max_checks
    checks in all. When no fresh check fits, `max_batch` is the bound below the lowest fresh failure
    and `verified` is False.
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
    while len(checks) < (CHECK_CAP_FACTOR * max_checks if fit_at is not None and fail_at is not None else max_checks):
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
            floor = max((b for b in fresh_fits if b < fail_at), default=1)
            batch = max(1, floor, fail_at - step)
    verified = fit_at is not None and fail_at is not None and fail_at == fit_at + 1
    agreed = verified and fit_at == claimed
    if fit_at is not None:
        best = fit_at
    else:
        # No fresh process fitted within the check limit: all that is known is that nothing from
        # `fail_at` up trains, so report the bound below it, unverified.
        best = fail_at - 1
    return EdgeCheck(best, fit_at, fail_at, agreed, verified, checks, reused)


def reusable_checks(attempts: list[Attempt], timed: Collection[int] | None) -> dict[int, Attempt]:
    """The search trials that serve as fresh checks, by batch: every fresh failure, and every fresh fit when
    a check is the trial alone (`timed` None); with throughput on, a check of a fit also completes the timed
    run, so only the fresh fits whose batch is in `timed` (their timed run completed)."""
    return {a.batch: a for a in attempts if a.fresh and not (a.fits and timed is not None and a.batch not in timed)}


def _listed(batches: list[int]) -> str:
    return ", ".join(map(str, batches))


def non_monotone(
    found: SearchResult, edge: EdgeCheck, known: Mapping[int, Attempt] | None = None
) -> dict[str, Any] | None:
    """Where the trials contradict one edge. Fresh checks are the proof's and the search trials it could take
    as checks (`known`, see reusable_checks). Returns the fresh checks that fit above the lowest fresh failure
    (`fits`), the search's other fits (its shared process, or a fresh trial without the timed run) at or above
    it (`search_fits`), the fresh failures at or below the highest of those (`fails`), and a one-line `note`
    that names the B reported; None when every fit lies below every fresh failure."""
    checks = list({id(a): a for a in [*edge.checks, *(known or {}).values()]}.values())
    failed = sorted({a.batch for a in checks if not a.fits})
    if not failed:
        return None
    lowest = failed[0]
    fits = sorted({a.batch for a in checks if a.fits and a.batch > lowest})
    counted = {id(a) for a in checks}
    shared = sorted({a.batch for a in found.attempts if a.fits and id(a) not in counted and a.batch >= lowest})
    if not fits and not shared:
        return None
    top = max(fits + shared)
    fails = [b for b in failed if b <= top]
    said = []
    if fits:
        said.append(f"{_listed(fits)} also fitted as fresh checks, above the fresh failure at {lowest}")
    if shared:
        said.append(f"{_listed(shared)} fitted in the search's own trials (not fresh checks), at or above it")
    b = edge.max_batch
    proven = (
        f"B = {b} fits fresh and {b + 1} fails fresh"
        if edge.verified
        else f"B = {b} is not verified (no fresh fit next to a fresh failure within the check limit)"
    )
    note = f"edge not monotone: {'; '.join(said)} (fresh failures at {_listed(fails)}); {proven}"
    return {"fits": fits, "search_fits": shared, "fails": fails, "note": note}


def proof_record(edge: EdgeCheck, found: SearchResult, known: Mapping[int, Attempt] | None = None) -> Proof:
    """The proof as the result file keeps it: the search's pair, the fresh pair, every check (a failed one with
    its out-of-memory message's figures under "oom"), the batches reused from the search, and "non_monotone"
    where the edge is not (see non_monotone; `known` as confirm_edge got it)."""
    checks = [
        Check(**vars(attempt), oom=(oom_numbers(attempt.message) or None) if not attempt.fits else None)
        for attempt in edge.checks
    ]
    return Proof(
        search=Pair(found.max_batch, found.first_failure),
        fits=edge.fits,
        fails=edge.fails,
        fail_outcome=next((a.outcome for a in edge.checks if a.batch == edge.fails), None),
        agreed=edge.agreed,
        verified=edge.verified,
        checks=checks,
        reused_from_search=list(edge.reused),
        non_monotone=non_monotone(found, edge, known),
    )
