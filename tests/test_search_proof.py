"""confirm_edge and the proof's record (probe/proof.py) against fake fresh checks (no torch)."""

from __future__ import annotations

import random

import pytest

from fakes import FakeTrials, linear
from memprobe.core.estimates.memory_model import Attempt
from memprobe.probe.proof import confirm_edge, non_monotone, proof_record
from memprobe.probe.search import SearchResult, find_max_batch

# --- confirm_edge ----------------------------------------------------------------------------


class FreshChecks:
    """check(n) for confirm_edge: fits iff n <= fresh_edge; records the order of checks."""

    def __init__(self, fresh_edge: int) -> None:
        self.fresh_edge = fresh_edge
        self.calls: list[int] = []

    def __call__(self, batch: int) -> Attempt:
        self.calls.append(batch)
        return Attempt(batch, "fit" if batch <= self.fresh_edge else "oom", peak_reserved=batch)


def searched(edge: int = 75) -> SearchResult:
    result = find_max_batch(FakeTrials(edge, linear()), capacity_bytes=linear()(edge))
    assert result.max_batch == edge
    return result


def test_confirm_edge_agreed():
    check = FreshChecks(75)
    edge = confirm_edge(check, searched(75))
    assert (edge.max_batch, edge.fits, edge.fails) == (75, 75, 76)
    assert edge.agreed and edge.verified
    assert check.calls == [76, 75], "failure side (B+1) first, then B"
    assert [a.batch for a in edge.checks] == [76, 75]
    assert all(a.fresh for a in edge.checks)


def test_confirm_edge_takes_known_fresh_attempts_instead_of_running_them():
    check = FreshChecks(75)
    known = {76: Attempt(76, "oom"), 75: Attempt(75, "fit"), 10: Attempt(10, "fit")}
    edge = confirm_edge(check, searched(75), known=known)
    assert check.calls == []
    assert edge.reused == [76, 75]
    assert (edge.max_batch, edge.agreed, edge.verified) == (75, True, True)
    assert set(known) == {76, 75, 10}  # the caller's mapping is not consumed


def test_confirm_edge_runs_what_is_not_known():
    check = FreshChecks(74)  # the known failure at 76 stands; 75 is re-run and fails, 74 fits
    edge = confirm_edge(check, searched(75), known={76: Attempt(76, "oom")})
    assert check.calls == [75, 74]
    assert edge.reused == [76]
    assert (edge.max_batch, edge.fits, edge.fails, edge.agreed) == (74, 74, 75, False)


@pytest.mark.parametrize("fresh_edge, calls", [(76, [76, 77]), (74, [76, 75, 74])])
def test_confirm_edge_fresh_edge_one_higher_or_lower(fresh_edge, calls):
    check = FreshChecks(fresh_edge)
    edge = confirm_edge(check, searched(75))
    assert (edge.max_batch, edge.fits, edge.fails) == (fresh_edge, fresh_edge, fresh_edge + 1)
    assert edge.agreed is False
    assert edge.verified is True
    assert check.calls == calls


def test_the_walk_down_stops_at_the_highest_fresh_fit_the_search_saw():
    # 4x H100, bert-large fp16 DDP: the search fitted 100 in a fresh group, then 101-104 in its served group; fresh
    # checks failed from 105 down. Without the search's fresh fit the walk went 105, 104, 103, 101, 97, 99, 100.
    plain = FreshChecks(100)
    confirm_edge(plain, searched_at(104))
    assert plain.calls == [105, 104, 103, 101, 97, 99, 100]
    check = FreshChecks(100)
    edge = confirm_edge(check, searched_at(104), fresh_fits=[1, 100])
    assert check.calls == [105, 104, 103, 101, 100]
    assert (edge.max_batch, edge.fits, edge.fails, edge.verified) == (100, 100, 101, True)
    # a fresh fit the checks then see fail is no floor below itself: the walk goes on past it
    again = FreshChecks(97)
    edge = confirm_edge(again, searched_at(104), fresh_fits=[100])
    assert (edge.max_batch, edge.fits, edge.fails, edge.verified) == (97, 97, 98, True)
    assert again.calls[:5] == [105, 104, 103, 101, 100]


def searched_at(claimed: int) -> SearchResult:
    """A search that claimed `claimed` (its trials fitted up to it, the next failed)."""
    return SearchResult(claimed, claimed + 1, "edge")


@pytest.mark.parametrize("fresh_edge", [78, 72])
def test_confirm_edge_walks_several_steps(fresh_edge):
    edge = confirm_edge(FreshChecks(fresh_edge), searched(75))
    assert (edge.max_batch, edge.fits, edge.fails) == (fresh_edge, fresh_edge, fresh_edge + 1)
    assert edge.verified and not edge.agreed


@pytest.mark.parametrize("fresh_edge", [300, 40])
def test_confirm_edge_respects_max_checks(fresh_edge):
    check = FreshChecks(fresh_edge)
    edge = confirm_edge(check, searched(75), max_checks=4)
    assert len(check.calls) == len(edge.checks) <= 4
    assert edge.verified is False and edge.agreed is False


def test_confirm_edge_unverified_upward_keeps_the_largest_fresh_fit():
    check = FreshChecks(300)
    edge = confirm_edge(check, searched(75), max_checks=4)
    # the walk goes up by 1, 1, then doubling steps
    assert check.calls == [76, 77, 78, 80]
    assert (edge.max_batch, edge.fits, edge.fails, edge.verified) == (80, 80, None, False)


def test_confirm_edge_never_reports_a_batch_the_fresh_checks_saw_fail():
    # The fresh edge (40) lies further below than max_checks can walk: 76, 75, 74, 72 all fail in
    # fresh processes. The answer must not stay at 75, which a fresh process showed does not train.
    check = FreshChecks(40)
    edge = confirm_edge(check, searched(75), max_checks=4)
    assert check.calls == [76, 75, 74, 72]
    assert edge.fails == 72
    assert (edge.max_batch, edge.fits, edge.verified, edge.agreed) == (71, None, False, False), (
        f"max_batch {edge.max_batch} reported although batch {edge.fails} failed in a fresh process"
    )


def test_confirm_edge_far_move_is_bisected_after_the_walk_brackets_it():
    # fresh edge 66, in-process 75: walk down 76, 75, 74, 72, 68, 60 (fit), then bisect 64, 66, 67
    check = FreshChecks(66)
    edge = confirm_edge(check, searched(75), max_checks=12)
    assert check.calls == [76, 75, 74, 72, 68, 60, 64, 66, 67]
    assert (edge.max_batch, edge.fits, edge.fails, edge.verified, edge.agreed) == (66, 66, 67, True, False)


def test_confirm_edge_nothing_fits_confirmed():
    found = find_max_batch(FakeTrials(0, linear()))
    check = FreshChecks(0)
    edge = confirm_edge(check, found)
    assert check.calls == [1]
    assert (edge.max_batch, edge.fits, edge.fails, edge.agreed, edge.verified) == (0, 0, 1, True, True)


def test_confirm_edge_nothing_fits_in_process_but_fresh_batch_fits():
    found = find_max_batch(FakeTrials(0, linear()))
    edge = confirm_edge(FreshChecks(2), found)
    assert (edge.max_batch, edge.fits, edge.fails, edge.agreed, edge.verified) == (2, 2, 3, False, True)


def test_confirm_edge_at_the_cap_checks_only_b():
    found = find_max_batch(FakeTrials(10**9, linear()), max_batch=100)
    assert found.stop == "cap"
    check = FreshChecks(10**9)
    edge = confirm_edge(check, found, max_batch=100)
    assert check.calls == [100]
    assert (edge.max_batch, edge.fits, edge.fails, edge.agreed, edge.verified) == (100, 100, None, True, True)


def test_confirm_edge_after_error_checks_nothing():
    found = find_max_batch(FakeTrials(75, linear(), outcomes={16: "error"}), capacity_bytes=linear()(75))
    check = FreshChecks(75)
    edge = confirm_edge(check, found)
    assert check.calls == []
    assert edge.agreed is False and edge.verified is False
    assert edge.fits is None and edge.fails is None


# --- the check limit never leaves a found bracket open ------------------------------------------------


def test_a_bracket_found_at_the_check_limit_is_closed_past_it():
    # bert-large-squad fp16 --mode infer on an H200: the search fit 9412; fresh processes failed at 9413, 9412,
    # 9411 and 9409, fit at 9405 and failed at 9407; the limit of 6 left 9406 unchecked. Now 9406 is checked.
    check = FreshChecks(9405)
    edge = confirm_edge(check, searched(9412), max_checks=6)
    assert check.calls == [9413, 9412, 9411, 9409, 9405, 9407, 9406]
    assert (edge.max_batch, edge.fits, edge.fails, edge.verified, edge.agreed) == (9405, 9405, 9406, True, False)


def test_closing_a_bracket_stops_at_the_hard_cap():
    # a bracket found at the limit's last check: closing it may take up to the limit again, never more
    check = FreshChecks(1)
    edge = confirm_edge(check, searched(75), max_checks=4)  # 76, 75, 74, 72 fail: no bracket, stop at 4
    assert check.calls == [76, 75, 74, 72] and not edge.verified
    wide = FreshChecks(41)
    edge = confirm_edge(wide, searched(75), max_checks=6)  # 76 75 74 72 68 60 all fail: no fit, stop at 6
    assert len(wide.calls) == 6 and edge.fits is None
    far = FreshChecks(61)
    edge = confirm_edge(far, searched(75), max_checks=6)  # the walk's 6th check (60) fits: bisect (60, 68)
    assert far.calls == [76, 75, 74, 72, 68, 60, 64, 62, 61] and edge.verified and edge.max_batch == 61


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("max_checks", [2, 4, 6])
def test_whatever_fresh_processes_say_the_checks_stay_capped_and_a_verified_pair_is_a_fresh_fit_and_failure(
    seed, max_checks
):
    rng = random.Random(seed)
    fits = {b for b in range(1, 200) if rng.random() < (0.9 if b < 70 else 0.3 if b < 80 else 0.05)}
    check = FitSet(fits)
    edge = confirm_edge(check, searched(75), max_checks=max_checks)
    assert len(check.calls) == len(set(check.calls)) <= 2 * max_checks
    if edge.verified:
        assert edge.max_batch + 1 not in fits and edge.max_batch + 1 in check.calls
        assert edge.max_batch == 0 or (edge.max_batch in fits and edge.max_batch in check.calls)


# --- an edge that is not monotone is said so -----------------------------------------------------------


class FitSet:
    """check(n): fits iff n is in `fits` (any set: fresh processes need not agree with one edge)."""

    def __init__(self, fits: set[int], message: str = "OutOfMemoryError: fake") -> None:
        self.fits, self.message = fits, message
        self.calls: list[int] = []

    def __call__(self, batch: int) -> Attempt:
        self.calls.append(batch)
        return (
            Attempt(batch, "fit", peak_reserved=batch)
            if batch in self.fits
            else Attempt(batch, "oom", message=self.message)
        )


OOM_H200 = (
    "OutOfMemoryError: CUDA out of memory. Tried to allocate 27.60 GiB. GPU 0 has a total capacity of 139.81 GiB "
    "of which 12.19 GiB is free. Including non-PyTorch memory, this process has 127.61 GiB memory in use. Of the "
    "allocated memory 125.02 GiB is allocated by PyTorch, and 1.84 GiB is reserved by PyTorch but unallocated."
)


def bert_infer_search(extra: list[Attempt] = ()) -> SearchResult:
    """The search of the H200 case: 9412 fit in the search's shared process, 9413 failed fresh."""
    attempts = [Attempt(1, "fit"), Attempt(2, "fit"), *extra, Attempt(9412, "fit"), Attempt(9413, "oom", fresh=True)]
    return SearchResult(9412, 9413, "edge", attempts)


def test_the_search_process_fitting_where_fresh_processes_fail_is_recorded_with_the_proven_pair():
    found = bert_infer_search()
    known = {9413: found.attempts[-1]}
    check = FitSet(set(range(1, 9406)), OOM_H200)
    edge = confirm_edge(check, found, known=known)
    assert check.calls == [9412, 9411, 9409, 9405, 9407, 9406] and edge.reused == [9413]
    proof = proof_record(edge, found, known)
    assert (proof.fits, proof.fails, proof.verified) == (9405, 9406, True)
    assert proof.non_monotone == {
        "fits": [],
        "search_fits": [9412],
        "fails": [9406, 9407, 9409, 9411, 9412],
        "note": "edge not monotone: 9412 fitted in the search's own trials (not fresh checks), at or above it "
        "(fresh failures at 9406, 9407, 9409, 9411, 9412); B = 9405 fits fresh and 9406 fails fresh",
    }


def test_a_fresh_fit_above_a_fresh_failure_is_named_and_b_is_a_proven_pair_below_it():
    above = Attempt(9408, "fit", fresh=True)  # a fresh search trial that fitted, above where the checks fail
    found = bert_infer_search([above])
    known = {9408: above, 9413: found.attempts[-1]}
    edge = confirm_edge(FitSet(set(range(1, 9406))), found, known=known)
    assert (edge.max_batch, edge.fits, edge.fails, edge.verified) == (9405, 9405, 9406, True)
    record = non_monotone(found, edge, known)
    assert record["fits"] == [9408] and record["search_fits"] == [9412]
    assert record["note"].startswith(
        "edge not monotone: 9408 also fitted as fresh checks, above the fresh failure at "
        "9406; 9412 fitted in the search's own trials"
    )
    assert record["note"].endswith("B = 9405 fits fresh and 9406 fails fresh")


def test_an_unverified_non_monotone_edge_says_so():
    found = bert_infer_search()
    edge = confirm_edge(FitSet(set()), found, max_checks=3, known={9413: found.attempts[-1]})
    record = non_monotone(found, edge, {9413: found.attempts[-1]})
    assert not edge.verified and record["search_fits"] == [9412]
    assert record["note"].endswith(
        "B = 9410 is not verified (no fresh fit next to a fresh failure within the check limit)"
    )


def test_a_monotone_edge_has_no_record():
    found = searched(75)
    edge = confirm_edge(FreshChecks(75), found)
    assert non_monotone(found, edge) is None and proof_record(edge, found).non_monotone is None
    lower = confirm_edge(FreshChecks(76), found)  # the fresh edge above the search's: still one edge
    assert non_monotone(found, lower) is None


def test_every_failed_check_carries_its_out_of_memory_figures():
    found = bert_infer_search()
    edge = confirm_edge(FitSet(set(range(1, 9406)), OOM_H200), found, known={9413: found.attempts[-1]})
    proof = proof_record(edge, found)
    failed = [c for c in proof.checks if c.outcome != "fit"]
    assert [c.batch for c in failed] == [9413, 9412, 9411, 9409, 9407, 9406]
    assert failed[0].oom is None and "oom" not in failed[0].to_dict()  # the search's failure said nothing of its bytes
    assert failed[1].oom == {
        "requested_bytes": round(27.60 * 2**30),
        "total_bytes": round(139.81 * 2**30),
        "free_bytes": round(12.19 * 2**30),
        "process_in_use_bytes": round(127.61 * 2**30),
        "allocated_bytes": round(125.02 * 2**30),
        "reserved_unallocated_bytes": round(1.84 * 2**30),
    }
    assert all(c.oom is None for c in proof.checks if c.outcome == "fit")
