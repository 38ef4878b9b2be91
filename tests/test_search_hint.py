"""A predicted start that comes late, or never: the search polls it and never waits (search.py, hint.py; no torch)."""

from __future__ import annotations

import pytest

from fakes import FakePrediction, FakeTrials, check_invariants, linear
from memprobe.core.records.settings import PrecisionSettings
from memprobe.probe.hint import PrecisionHint
from memprobe.probe.search import HintUse, SearchResult, find_max_batch


class LateHint:
    """A prediction that comes once `trials` have run (None: never). Counts the polls and checks that it is
    never polled while a trial runs; `clock` is the fake time the trials took (10 s each), the only time there is."""

    def __init__(self, fake: FakeTrials, batch: int, after: int | None) -> None:
        self.fake, self.batch, self.after = fake, batch, after
        self.polls: list[int] = []  # trials done at each poll

    def __call__(self) -> int | None:
        self.polls.append(len(self.fake.calls))
        return self.batch if self.after is not None and len(self.fake.calls) >= self.after else None


def search(
    edge: int, capacity_edge: int, batch: int, after: int | None
) -> tuple[SearchResult, FakeTrials, LateHint, list[HintUse]]:
    fake = FakeTrials(edge, linear())
    hint, told = LateHint(fake, batch, after), []
    result = find_max_batch(fake, linear()(capacity_edge), hint=hint, on_hint=told.append)
    check_invariants(result, edge)
    return result, fake, hint, told


def plain_calls(edge: int, capacity_edge: int) -> list[int]:
    fake = FakeTrials(edge, linear())
    find_max_batch(fake, linear()(capacity_edge))
    return fake.calls


def test_a_prediction_that_never_comes_leaves_the_search_as_without_one_and_costs_no_trial():
    result, fake, hint, told = search(1870, 1870, 1870, after=None)
    assert fake.calls == plain_calls(1870, 1870) == [1, 2, 16, 128, 1024, 1870, 1871]
    # polled once before every trial after batch 1, never waited for: the trials are all the time there is
    assert hint.polls == list(range(1, len(fake.calls)))
    assert result.hint_use is None and result.hinted is None and told == []


@pytest.mark.parametrize(
    "after, expected",
    [
        (1, [1, 1870, 1871]),  # came with batch 1's trial: the old start
        (2, [1, 2, 1870, 1871]),
        (4, [1, 2, 16, 128, 1870, 1871]),  # the search went on with its memory model until it came
    ],
)
def test_a_prediction_that_comes_while_useful_is_tried_next(after, expected):
    result, fake, hint, told = search(1870, 1870, 1870, after=after)
    assert fake.calls == expected
    assert (result.max_batch, result.first_failure, result.hinted) == (1870, 1871, 1870)
    assert told == [HintUse(1870, after, True)] and result.hint_use == told[0]
    assert hint.polls == list(range(1, after + 1))  # judged once: never polled again


def test_a_slightly_wrong_late_prediction_is_walked_from_inside_the_bracket():
    # edge 75, but the capacity says 80: the memory model overshoots to 80; a prediction of 75 that comes after
    # the failure at 80 still lies inside (16, 80) and closes the edge in two trials, where the model took six
    result, fake, _hint, told = search(75, 80, 75, after=4)
    assert plain_calls(75, 80) == [1, 2, 16, 80, 79, 77, 73, 76, 74, 75]
    assert fake.calls == [1, 2, 16, 80, 75, 76]
    assert told == [HintUse(75, 4, True)]


def test_a_prediction_that_comes_when_the_bracket_is_narrow_is_recorded_not_used():
    result, fake, _hint, told = search(75, 80, 75, after=7)  # after 73 fit and 77 failed
    assert fake.calls == plain_calls(75, 80)
    assert told == [
        HintUse(75, 7, False, "the search had already narrowed the edge to between 73 (fits) and 77 (fails)")
    ]
    assert result.hinted is None and result.hint_use == told[0]


@pytest.mark.parametrize(
    "batch, after, why",
    [
        (100, 4, "at or above batch 80, which already failed"),
        (10, 4, "at or below batch 16, which already fitted"),
        (1, 1, "at or below batch 1, which already fitted"),
    ],
)
def test_a_prediction_outside_the_bracket_is_recorded_not_used(batch, after, why):
    result, fake, _hint, told = search(75, 80, batch, after=after)
    assert fake.calls == plain_calls(75, 80)
    assert told == [HintUse(batch, after, False, why)]


def precision_hint(answer: dict | None, after: int = 0) -> tuple[PrecisionHint, PrecisionSettings, list[str]]:
    settings = PrecisionSettings()
    notes: list[str] = []
    return PrecisionHint(FakePrediction(answer, after), settings, notes.append, started_at=1000.0), settings, notes


def test_the_precision_hint_records_when_the_prediction_came_and_what_the_search_did_with_it():
    hint, settings, notes = precision_hint(
        {"precision": "fp32", "max_batch": 75, "seconds": 9.5, "at": 1012.25}, after=3
    )
    assert [hint.poll() for _ in range(3)] == [None, None, 75]  # one poll at its creation
    hint.decided(HintUse(75, 4, True))
    assert settings.predicted_start == {
        "precision": "fp32",
        "max_batch": 75,
        "seconds": 9.5,
        "arrived_s": 12.25,
        "after_trials": 4,
        "used": True,
        "why": "",
    }
    assert notes == [
        "predicted max batch 75 (memprobe predict on the CPU) came 12.25 s into the precision, "
        "after 4 trials: tried next"
    ]
    hint.finish(SearchResult(75, 76, "edge"), 30.0)  # nothing more to say
    assert len(notes) == 1


def test_the_precision_hint_says_why_a_prediction_was_not_used():
    hint, settings, notes = precision_hint({"max_batch": 75, "at": 1003.0})
    hint.decided(HintUse(75, 7, False, "the search had already narrowed the edge to between 73 (fits) and 77 (fails)"))
    assert settings.predicted_start["used"] is False and settings.predicted_start["after_trials"] == 7
    assert notes[-1].endswith(
        "after 7 trials: not used, the search had already narrowed the edge to between 73 (fits) and 77 (fails)"
    )


def test_a_prediction_that_comes_after_the_search_or_never_is_recorded_at_the_end():
    late, settings, notes = precision_hint({"max_batch": 75, "at": 1040.0}, after=1)  # not there at creation
    late.finish(SearchResult(75, 76, "edge", attempts=[]), 31.5)
    assert settings.predicted_start["used"] is False and settings.predicted_start["arrived_s"] == 40.0
    assert settings.predicted_start["why"] == "came after the search had ended"
    assert notes == [
        "predicted max batch 75 came 40 s into the precision, after the search had ended (31.5 s): not used"
    ]
    never, settings, notes = precision_hint(None)
    never.finish(SearchResult(75, 76, "edge"), 31.5)
    assert settings.predicted_start == {
        "arrived_s": None,
        "used": False,
        "why": "no prediction before the search ended (31.5 s, 0 trials)",
    }
    assert notes == ["no predicted start: no prediction before the search ended (31.5 s, 0 trials)"]


def test_an_error_answer_is_said_at_once_and_never_tried():
    hint, settings, notes = precision_hint({"error": "no allocator capacity to predict at"})
    assert hint.poll() is None
    assert settings.predicted_start["used"] is False
    assert notes == ["no predicted start: no allocator capacity to predict at"]
    hint.finish(SearchResult(75, 76, "edge"), 10.0)
    assert len(notes) == 1
