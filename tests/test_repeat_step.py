"""A trace may repeat its last step instead of tracing it: the same events as tracing every step, used only inside
a batch model checked against a trace of every step; batch 1 is traced for every precision at once when needed."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memprobe.core.registry import load_registry  # noqa: E402
from memprobe.predict.allocator import ALLOC, FREE, MARK  # noqa: E402
from memprobe.predict.batch_model import PrecisionTraces  # noqa: E402
from memprobe.predict.progress import Progress  # noqa: E402
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
    progress = Progress(lines.append, heartbeat=False)
    sizes = [MemorySize("tiny", 1, 30 * MiB), MemorySize("big", 1, 1 << 30)]  # the toy needs 36 MiB
    pred = predict(registry["toy"], ["fp32", "bf16"], sizes, None, "test", progress=progress)
    traced = [line for line in lines if line.startswith("tracing")]
    assert traced[-2:] == ["tracing toy fp32 at batch 1 (7 of 8) ...", "tracing toy bf16 at batch 1 (8 of 8) ..."]
    assert all(p.max_batch["tiny"] == 0 and p.max_batch["big"] > 3 for p in pred.precisions.values())


def test_a_length_model_left_unchecked_forgets_what_it_replayed(registry):
    """Along the length, a model no edge check compared (the edge among the traced lengths) drops its repeated traces
    and the searches replayed from them; a length asked for again is traced in full."""
    from memprobe.core.variants import VariantRequest, apply_variant

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
