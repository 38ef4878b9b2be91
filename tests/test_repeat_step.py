"""A trace may repeat its last step instead of tracing it: the same events as tracing every step, used only inside
a batch model checked against a trace of every step; batch 1 is traced for every precision at once when needed."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memprobe.core.workload.registry import load_registry  # noqa: E402
from memprobe.predict.allocator import ALLOC, FREE, MARK  # noqa: E402
from memprobe.predict.batch_model import PrecisionTraces  # noqa: E402
from memprobe.predict.progress import TraceProgress  # noqa: E402
from memprobe.predict.summary import MemorySize, predict  # noqa: E402
from memprobe.predict.trace import STEP_MARK, Trace, TraceSession, repeat_last_step  # noqa: E402

MiB = 1 << 20
STEP = (MARK, STEP_MARK)


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def test_the_last_step_is_repeated_under_new_ids():
    trial = [(ALLOC, 1, 64, "input"), STEP, (ALLOC, 2, 8, "a"), (FREE, 2), STEP]
    trial += [(ALLOC, 3, 8, "a"), (ALLOC, 4, 16, "b"), (FREE, 3), (FREE, 4), STEP, (FREE, 1)]
    got = repeat_last_step(trial)
    again = got[len(trial) - 1 : -1]
    assert [e[0] for e in again] == [ALLOC, ALLOC, FREE, FREE, MARK]
    assert [e[2] for e in again if e[0] == ALLOC] == [8, 16]
    new = {e[1] for e in again if e[0] == ALLOC}
    assert not new & {1, 2, 3, 4} and {e[1] for e in again if e[0] == FREE} == new
    assert got[: len(trial) - 1] == trial[:-1] and got[-1] == (FREE, 1)


@pytest.mark.parametrize(
    "last",
    [
        [(ALLOC, 3, 8, "state"), STEP],  # keeps memory for the next step
        [(ALLOC, 3, 8, "a"), (FREE, 3), (FREE, 2), STEP],  # frees an earlier step's
    ],
)
def test_a_step_that_holds_or_frees_another_steps_memory_is_not_repeated(last):
    assert repeat_last_step([STEP, (ALLOC, 2, 8, "x"), STEP, *last]) is None
    assert repeat_last_step([STEP, (ALLOC, 2, 8, "x")]) is None  # one step: nothing to repeat


@pytest.mark.parametrize("name, precision", [("toy", "fp16"), ("toy-llama", "bf16"), ("toy-resnet", "fp32")])
def test_a_repeated_step_gives_the_events_of_a_traced_one(registry, name, precision):
    with TraceSession(registry[name]) as session:
        full = session.trace(precision, 3)
        repeated = session.trace(precision, 3, repeat_last=True)
    assert repeated.repeated and not full.repeated
    assert repeated.events == full.events and repeated.steps == full.steps == 3


def test_a_session_whose_steps_do_not_repeat_traces_every_step(registry, monkeypatch):
    from memprobe.predict import trace as trace_module

    monkeypatch.setattr(trace_module, "repeat_last_step", lambda trial: None)
    with TraceSession(registry["toy"]) as session:
        got = session.trace("fp32", 2, repeat_last=True)
        assert not got.repeated and got.steps == 3
        assert not session._repeats  # the next traces do not try again


def test_repeated_traces_are_dropped_when_the_model_fails_its_check(registry):
    with TraceSession(registry["toy"]) as session:
        made = {b: session.trace("fp32", b, repeat_last=True) for b in (2, 3)}
        wrong = session.trace("fp32", 4)
        wrong = Trace(4, [*wrong.events, (ALLOC, 10**9, 512, "extra")], wrong.steps)  # the check cannot match
        traces = PrecisionTraces(session, "fp32", traced={**made, 4: wrong})
        assert traces.how == "traced"
        assert not any(isinstance(t, Trace) and t.repeated for t in traces._pending.values())
        assert traces.events_at(2) == session.trace("fp32", 2).events  # traced again, in full


def test_batch_one_is_traced_for_every_precision_at_once(registry):
    lines: list[str] = []
    progress = TraceProgress(lines.append, heartbeat=False)
    sizes = [MemorySize("tiny", 1, 30 * MiB), MemorySize("big", 1, 1 << 30)]  # the toy needs 36 MiB
    pred = predict(registry["toy"], ["fp32", "bf16"], sizes, progress=progress)
    traced = [line for line in lines if line.startswith("tracing")]
    assert traced[-2:] == ["tracing toy fp32 at batch 1 (7 of 8) ...", "tracing toy bf16 at batch 1 (8 of 8) ..."]
    assert all(p.max_batch["tiny"] == 0 and p.max_batch["big"] > 3 for p in pred.precisions.values())


@pytest.mark.slow
def test_a_length_model_left_unchecked_forgets_what_it_replayed(registry):
    """Along the length, a model no edge check compared (the edge among the traced lengths) drops its repeated traces
    and the searches replayed from them; a length asked for again is traced in full."""
    from memprobe.core.workload.variants import VariantRequest, apply_variant

    workload = apply_variant(registry["toy-llama"], VariantRequest(search="seq-len"))
    with TraceSession(workload) as session:
        made = {n: session.trace("bf16", n, repeat_last=True) for n in (2, 3, 4)}
        traces = PrecisionTraces(session, "bf16", traced=made, axis="seq_len")
        capacity = traces.peaks(3).peak_reserved
        found = traces.max_batch(capacity)[0]
        assert traces._found and traces._unlimited
        traces.drop_unchecked()  # as tracing does when needs_edge_check found nothing to check
        assert not traces._found and not traces._unlimited and traces.how == "traced"
        assert not any(isinstance(t, Trace) and t.repeated for t in traces._pending.values())
        assert traces.max_batch(capacity)[0] == found  # the same answer, from full traces
        assert all(not t.repeated for t in traces._pending.values() if isinstance(t, Trace))


def test_a_trace_of_every_step_says_whether_its_last_step_repeats(registry):
    with TraceSession(registry["toy"]) as session:
        full = session.trace("fp32", 3)
        repeated = session.trace("fp32", 3, repeat_last=True)
    assert full.last_step_repeats() and not repeated.last_step_repeats()  # a repeated trace shows nothing
    assert full.traced == len(full.events) and repeated.traced == repeated.step_at[-2] < len(repeated.events)
    assert repeated.events[: repeated.traced] == full.events[: repeated.traced]  # the traced part is the same
    a, b, end = full.step_at[-3:]
    grown = list(full.events)
    i = next(i for i in range(b, end) if grown[i][0] == ALLOC)
    grown[i] = (ALLOC, grown[i][1], grown[i][2] + 1, grown[i][3])  # one allocation of the last step a byte larger
    assert not Trace(3, grown, 3, step_at=full.step_at).last_step_repeats()


@pytest.mark.parametrize(
    "before, last, repeats",
    [
        ([(ALLOC, 2, 8, "a"), (FREE, 2)], [(ALLOC, 3, 8, "a"), (FREE, 3)], True),
        ([(ALLOC, 2, 8, "a"), (FREE, 1)], [(ALLOC, 3, 8, "a"), (FREE, 2)], False),  # frees an earlier step's
        ([(ALLOC, 2, 8, "a"), (FREE, 2)], [(ALLOC, 3, 8, "b"), (FREE, 3)], False),  # another op
    ],
)
def test_a_step_repeats_only_with_the_same_events_freeing_its_own(before, last, repeats):
    events = [(ALLOC, 1, 64, "input"), *before, *last]
    assert Trace(1, events, 3, step_at=(1, 1, 3, 5)).last_step_repeats() is repeats


def test_the_traced_part_decides_a_batch_that_does_not_fit(registry):
    from memprobe.predict.batch_model import traced_part_fits

    with TraceSession(registry["toy"]) as session:
        full = session.trace("fp32", 2)
        repeated = session.trace("fp32", 2, repeat_last=True)
    for trace in (full, repeated):
        assert not traced_part_fits(trace, 4 * MiB) and traced_part_fits(trace, 1 << 30)


def _edge_between_one_and_two(registry, precision: str) -> tuple[int, dict[int, Trace]]:
    """A capacity that holds toy-pix2pixhd's batch 1 and not its batch 2, and its full traces at 1 and 2."""
    from memprobe.predict.batch_model import _replay

    with TraceSession(registry["toy-pix2pixhd"]) as session:
        full = {b: session.trace(precision, b) for b in (1, 2)}
    capacity = _replay(full[1].events).peak_reserved
    assert not _replay(full[2].events, capacity).fits
    return capacity, full


def test_where_batch_2_does_not_fit_only_batch_1_is_traced_after_it(registry):
    from memprobe.predict.batch_model import _replay

    capacity, full = _edge_between_one_and_two(registry, "fp32")
    lines: list[str] = []
    sizes = [MemorySize("small", capacity, capacity)]
    pred = predict(registry["toy-pix2pixhd"], ["fp32"], sizes, progress=TraceProgress(lines.append))
    traced = [line for line in lines if line.startswith("tracing")]
    assert traced == [
        "tracing toy-pix2pixhd fp32 at batch 2 (1 of 3) ...",
        "tracing toy-pix2pixhd fp32 at batch 1 (2 of 2) ...",
    ]
    got = pred.precisions["fp32"]
    assert got.max_batch == {"small": 1} and got.how == "traced"
    # the line is through batches 1 and 2, their peaks those of traces of every step
    expected = {b: (_replay(t.events).peak_allocated, _replay(t.events).peak_reserved) for b, t in full.items()}
    assert got.peaks == expected
    assert any("batch 2 does not fit the largest memory here" in n for n in pred.notes)


def test_batch_2s_repeated_trace_stands_only_where_batch_1_shows_its_step_repeating(registry, monkeypatch):
    with TraceSession(registry["toy"]) as session:
        made = {2: session.trace("fp32", 2, repeat_last=True), 1: session.trace("fp32", 1)}
        shown = PrecisionTraces(session, "fp32", traced=dict(made), small=True)
        assert shown.events_at(2) == made[2].events and shown.how == "traced" and shown.fit_batches(1) == [1, 2]
        monkeypatch.setattr(Trace, "last_step_repeats", lambda self: False)
        unshown = PrecisionTraces(session, "fp32", traced=dict(made), small=True)
        assert 2 not in unshown._pending  # dropped: asked for, batch 2 is traced in full
        assert unshown.events_at(2) == session.trace("fp32", 2).events
        assert not unshown._pending[2].repeated
