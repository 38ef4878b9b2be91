"""A predicted start that fails: the next trial comes from what the failure measured, not a walk down by 1, 2, 4, 8.

search.after_failure and sample_bytes against PyTorch's out-of-memory messages, and find_max_batch against a fake
card whose failures say what they lacked (no torch).
"""

from __future__ import annotations

import random

import pytest

from fakes import check_invariants
from memprobe.core.estimates.memory_model import Attempt
from memprobe.probe.search import after_failure, find_max_batch, sample_bytes

GIB = 2**30
CAPACITY = 139.2 * GIB
TOTAL = 139.8 * GIB


def oom(batch: int, lacked: float, requested: float | None = None) -> Attempt:
    """A failed trial whose message says it asked for `requested` bytes (default: half a GiB more than it lacked)
    and `lacked` of them were not free."""
    requested = lacked + GIB / 2 if requested is None else requested
    free = requested - lacked
    return Attempt(
        batch,
        "oom",
        message=(
            f"OutOfMemoryError: CUDA out of memory. Tried to allocate {requested / GIB:.2f} GiB. GPU 0 has a total "
            f"capacity of {TOTAL / GIB:.2f} GiB of which {free / GIB:.2f} GiB is free. Including non-PyTorch memory, "
            f"this process has {(TOTAL - free) / GIB:.2f} GiB memory in use."
        ),
    )


def fit(batch: int, peak: float) -> Attempt:
    return Attempt(batch, "fit", peak_allocated=int(peak), peak_reserved=int(peak))


class Card:
    """A card whose trials peak at static + per_sample x n, fit up to `edge`, and fail lacking `share` of what the
    step's peak would overshoot the capacity by (None: a share between 0.2 and 1 drawn for each batch)."""

    def __init__(self, edge: int, static: float, share: float | None = 1.0) -> None:
        self.edge, self.static, self.share = edge, static, share
        self.per_sample = (CAPACITY - static) / (edge + 0.5)
        self.calls: list[int] = []

    def __call__(self, batch: int) -> Attempt:
        self.calls.append(batch)
        peak = self.static + self.per_sample * batch
        if batch <= self.edge:
            return fit(batch, peak)
        share = self.share if self.share is not None else random.Random(batch).uniform(0.2, 1.0)
        lacked = share * (peak - CAPACITY)
        return oom(batch, lacked, requested=max(lacked + 2**20, 0.02 * peak))


def search(card: Card, hint: int):
    result = find_max_batch(card, CAPACITY, hint=lambda: hint)
    assert (result.max_batch, result.first_failure) == (card.edge, card.edge + 1)
    check_invariants(result, card.edge)
    return result


# --- the cases: H200 measured B against the predicted start --------------------------------


@pytest.mark.parametrize(
    "edge, static_gib, hint",
    [(6074, 0.5, 6233), (36, 13.5, 72), (32, 12.0, 54), (142, 6.5, 395)],  # efficientnet_b4 infer, T5 bf16/fp32, BART
)
def test_a_start_that_fails_at_its_peak_is_followed_by_the_edge(edge, static_gib, hint):
    card = Card(edge, static_gib * GIB)
    search(card, hint)
    # before: hint, hint-1, hint-3, hint-7, hint-15 (each a fresh out-of-memory trial), then the memory model
    assert card.calls[:2] == [1, hint]
    assert card.calls[2] in (edge, edge + 1), card.calls
    assert len(card.calls) <= 4, card.calls


@pytest.mark.parametrize("share", [0.3, None])
@pytest.mark.parametrize("edge, static_gib, hint", [(6074, 0.5, 6233), (36, 13.5, 72), (142, 6.5, 395)])
def test_a_start_that_fails_early_in_the_step_is_followed_by_a_secant_through_the_shortfalls(
    edge, static_gib, hint, share
):
    card = Card(edge, static_gib * GIB, share)
    search(card, hint)
    # no walk down by one: the first trial after the start leaves out what the failure lacked
    assert hint - card.calls[2] > 8 or edge > hint - 8, card.calls
    assert len(card.calls) <= 7, card.calls


def test_a_failure_whose_message_gives_no_figures_leaves_the_search_to_its_memory_model():
    calls: list[int] = []

    def trial(batch: int) -> Attempt:
        calls.append(batch)
        if batch > 977:
            return Attempt(batch, "oom", message="CUBLAS_STATUS_ALLOC_FAILED")
        return fit(batch, 1.5 * GIB + batch * (CAPACITY - 1.5 * GIB) / 977.5)

    result = find_max_batch(trial, CAPACITY, hint=lambda: 995)
    assert (result.max_batch, result.first_failure) == (977, 978)
    assert 994 not in calls and calls[:3] == [1, 995, 2], calls  # the line through batches 1 and 2, not 994


# --- what the failures measured ------------------------------------------------------------------------------


def test_one_failure_jumps_by_its_shortfall_over_the_bytes_a_sample_costs():
    attempts = [fit(1, 10 * GIB + 1 * GIB), fit(2, 10 * GIB + 2 * GIB), oom(100, lacked=5.5 * GIB)]
    assert sample_bytes(attempts) == pytest.approx(GIB, rel=1e-6)
    assert after_failure(attempts) == 94  # 5.5 samples lacked: six left out


def test_two_failures_jump_to_where_the_line_through_their_shortfalls_reaches_zero():
    # 3 GiB lacked at 100, 2 GiB at 90: 0.1 GiB more per sample, zero at 70
    attempts = [fit(1, 11 * GIB), fit(2, 12 * GIB), oom(100, lacked=3 * GIB), oom(90, lacked=2 * GIB)]
    assert after_failure(attempts) == 70


def test_with_batch_1_alone_the_sample_cost_comes_from_a_failures_figures():
    # batch 1 peaked at 11 GiB; the failure at 101 held 139.8 GiB - free and asked for 2 GiB, 1 GiB more than free
    attempts = [fit(1, 11 * GIB), oom(101, lacked=1 * GIB, requested=2 * GIB)]
    needed = TOTAL + 1 * GIB  # in use (total - free) + requested, with free = requested - lacked
    assert sample_bytes(attempts) == pytest.approx((needed - 11 * GIB) / 100, rel=1e-3)
    assert after_failure(attempts) == 101 - 1  # 1 GiB is under one sample's 1.3 GiB: one left out


@pytest.mark.parametrize(
    "attempts",
    [
        [fit(1, GIB), fit(2, 2 * GIB)],  # no failure
        [fit(1, GIB), fit(2, 2 * GIB), Attempt(50, "oom", message="CUBLAS_STATUS_ALLOC_FAILED")],  # no figures
        [fit(1, GIB), Attempt(40, "oom", message="no figures"), oom(50, lacked=GIB)],  # the lowest failure says none
        [Attempt(1, "fit"), oom(50, lacked=GIB)],  # no peak anywhere: no sample cost
    ],
)
def test_nothing_measured_means_no_jump(attempts):
    assert after_failure(attempts) is None
