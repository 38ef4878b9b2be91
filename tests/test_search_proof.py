"""confirm_edge and the proof's record (probe/proof.py) against fake fresh checks (no torch)."""

from __future__ import annotations

import pytest

from memprobe.probe.proof import confirm_edge, non_monotone, proof_record
from memprobe.probe.search import Attempt, SearchResult, find_max_batch

from test_search import FakeTrials, linear


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


def test_confirm_edge_fresh_edge_one_higher():
    check = FreshChecks(76)
    edge = confirm_edge(check, searched(75))
    assert (edge.max_batch, edge.fits, edge.fails) == (76, 76, 77)
    assert edge.agreed is False
    assert edge.verified is True
    assert check.calls == [76, 77]


def test_confirm_edge_fresh_edge_one_lower():
    check = FreshChecks(74)
    edge = confirm_edge(check, searched(75))
    assert (edge.max_batch, edge.fits, edge.fails) == (74, 74, 75)
    assert edge.agreed is False
    assert edge.verified is True
    assert check.calls == [76, 75, 74]


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
        f"max_batch {edge.max_batch} reported although batch {edge.fails} failed in a fresh process")


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
