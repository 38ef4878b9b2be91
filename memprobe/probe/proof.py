"""The fresh-process proof of a search's answer: B fits in K fresh runs and B+1 fails, each run in a process that ran
nothing else.

Pure arithmetic over an abstract `check(n) -> Attempt`, no torch (the checks run in trial processes), so it is tested
against fake checks; the walk itself is probe/edge_walk.py (confirm_edge). This module builds the proof's record for
the result file: the fresh runs at B, the flaky band with every batch's fresh fits and failures, where the edge was not
monotone (a fresh fit above a fresh failure, or the search's own trials fitting at or above a fresh failure) and the
figures of every failed fresh check's out-of-memory message.
"""

from __future__ import annotations

from typing import Any, Collection, Mapping

from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.process.outcomes import oom_numbers
from memprobe.core.records.records import Band, BandRun, Check, Pair, Proof
from memprobe.probe.edge_walk import EdgeCheck as EdgeCheck
from memprobe.probe.edge_walk import Tally
from memprobe.probe.edge_walk import confirm_edge as confirm_edge
from memprobe.probe.search import SearchResult


def reusable_checks(attempts: list[Attempt], timed: Collection[int] | None) -> dict[int, Attempt]:
    """The search trials that serve as fresh checks, by batch: every fresh failure, and every fresh fit when
    a check is the trial alone (`timed` None); with throughput on, a check of a fit also completes the timed
    run, so only the fresh fits whose batch is in `timed` (their timed run completed)."""
    return {a.batch: a for a in attempts if a.fresh and not (a.fits and timed is not None and a.batch not in timed)}


def _listed(batches: list[int]) -> str:
    return ", ".join(map(str, batches))


def _runs(edge: EdgeCheck) -> str:
    return f" in {edge.fits_at_b} of {edge.runs_at_b} runs" if edge.repeat > 1 else ""


def unverified_reason(edge: EdgeCheck) -> str:
    """Why a walk's B is not verified, in words: no fresh fit next to a fresh failure, or fewer fresh fits at B than
    the repeat rule asks, within the check limit or the time near a flaky edge."""
    limit = "the time the walk had near a flaky edge" if edge.ended_by == "budget" else "the check limit"
    if edge.fits is None or edge.fits_at_b == 0 or edge.fails != edge.fits + 1:
        return f"no fresh fit next to a fresh failure within {limit}"
    return f"it fitted in {edge.fits_at_b} fresh runs, not the {edge.repeat} asked, within {limit}"


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
        f"B = {b} fits fresh{_runs(edge)} and {b + 1} fails fresh"
        if edge.verified
        else f"B = {b} is not verified ({unverified_reason(edge)})"
    )
    note = f"edge not monotone: {'; '.join(said)} (fresh failures at {_listed(fails)}); {proven}"
    return {"fits": fits, "search_fits": shared, "fails": fails, "note": note}


def band_record(edge: EdgeCheck, known: Mapping[int, Attempt] | None = None) -> Band | None:
    """The flaky band of the fresh runs (the proof's checks and the search's fresh trials it could take as checks,
    `known`): from the lowest batch that failed in a fresh run to the highest that fitted in one above it, with the
    fresh fits and failures of every batch run there; None when every fresh fit lies below every fresh failure."""
    tally = Tally()
    for attempt in {id(a): a for a in [*edge.checks, *(known or {}).values()]}.values():
        tally.add(attempt)
    span = tally.band()
    if span is None:
        return None
    low, high = span
    batches = sorted(b for b in {*tally.fits, *tally.fails} if low <= b <= high)
    return Band(low, high, [BandRun(b, tally.fits[b], tally.fails[b]) for b in batches])


def proof_record(edge: EdgeCheck, found: SearchResult, known: Mapping[int, Attempt] | None = None) -> Proof:
    """The proof as the result file keeps it: the search's pair, the fresh pair, K and the fresh runs at B, every
    check (a failed one with its out-of-memory message's figures under "oom"), the batches reused from the search,
    the flaky band (band_record) and "non_monotone" where the edge is not (see non_monotone; `known` as confirm_edge
    got it)."""
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
        repeat=edge.repeat,
        runs_at_b=edge.runs_at_b,
        fits_at_b=edge.fits_at_b,
        band=band_record(edge, known),
        ended_by=edge.ended_by,
    )
