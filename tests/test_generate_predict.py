"""`memprobe predict --mode generate`: the generation traced on fake tensors, its shortcut (a few decode forwards
traced, the last one replayed for the rest) checked against the trace of every decode forward, the trace against
the CPU's own measurement of the same generations, and the command.

The tiny Llama (toy-llama) runs the same code as llama-1b and llama-8b: workloads/generation.greedy_generate, the
function the scan's trial process runs.
"""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

from memprobe.core.records.generation import GenerationRequest, generation_variant  # noqa: E402
from memprobe.core.workload.registry import load_registry  # noqa: E402
from memprobe.predict.batch_model import PrecisionTraces, _replay  # noqa: E402
from memprobe.predict.trace import DECODE_TRACED, TraceSession  # noqa: E402
from torchvision_standin import forget, install_standin, torchvision_usable  # noqa: E402
from trace_peaks import live_peak  # noqa: E402

NEW = 12  # more decode forwards than DECODE_TRACED, so the shortcut is taken
WORKLOAD = generation_variant(load_registry()["toy-llama"], GenerationRequest(16, NEW))


@pytest.fixture(autouse=True, scope="module")
def standin():
    finder = None if torchvision_usable() else install_standin()
    yield
    if finder is not None:
        sys.meta_path.remove(finder)
        forget(("torchvision",))


@pytest.fixture(scope="module")
def sessions():
    """fp32 traces at batch 5: with the decode shortcut, and with every decode forward traced. Attention stays one
    op here: under inference_mode predict runs it through the CUDA backend it emulates (a float bias made from the
    mask, the kernel's statistics), which the CPU's own attention kernel does not allocate, and these traces are
    set against the CPU's measurement of the same generations; the rest of the generation is compared byte for byte."""
    import memprobe.predict.fake_mode as fake_mode

    composite = fake_mode._composite
    out = {}
    try:
        fake_mode._composite = lambda func: "scaled_dot_product_attention" not in str(func) and composite(func)
        for short in (True, False):
            with TraceSession(WORKLOAD, steps=3, mode="generate", precision="fp32") as session:
                session._short_decode = short
                out[short] = session.trace("fp32", 5)
    finally:
        fake_mode._composite = composite
    return out


@pytest.mark.slow
def test_the_shortcut_traces_a_few_decode_forwards_and_replays_like_the_full_trace(sessions):
    short, full = sessions[True], sessions[False]
    assert short.decode_more == NEW - 1 - DECODE_TRACED and full.decode_more == 0
    assert len(short.decode_spans()) == 3 and short.decode_repeats()  # one per generation: trial 2 + timed 1
    assert len(short.events) < len(full.events)
    spans = [(s, e, short.decode_more) for s, e in short.decode_spans()]
    mib = 1 << 20
    for capacity in (None, 40 * mib):
        a, b = _replay(short.events, capacity, spans), _replay(full.events, capacity)
        assert (a.peak_allocated, a.peak_reserved, a.fits) == (b.peak_allocated, b.peak_reserved, b.fits)
    assert live_peak(short.events) == live_peak(full.events)


@pytest.mark.slow
def test_the_traced_generation_holds_what_the_cpu_measures(sessions):
    """The same three generations on the real CPU under LiveBytes (the fake allocator of `scan --device cpu`): the
    trace's live bytes at their peak are the bytes LiveBytes counted."""
    from memprobe.training.cpu_memory import LiveBytes
    from memprobe.training.step import Memory, run_step, run_until_state
    from memprobe.workloads.base import Amp
    from memprobe.workloads.llm import build

    device = torch.device("cpu")
    with LiveBytes() as tracker:
        task = build(WORKLOAD.params, WORKLOAD.optimizer, device, "fp32")
        memory = Memory(device, tracker)
        memory.reset()
        inputs = task.make_batch(5)
        run_until_state(lambda: run_step(task, Amp("fp32", device), inputs, "generate"), None, 3, "generate")
        measured = tracker.peak
    assert live_peak(sessions[False].events) == measured


def test_precision_traces_replay_each_generation_with_its_decode_forwards(sessions):
    with TraceSession(WORKLOAD, steps=3, mode="generate", precision="bf16") as session:
        traces = PrecisionTraces(session, "bf16")
        assert traces.how == "checked"  # batches 2 and 3 extrapolated, checked byte for byte at 4
        spans = traces.repeat_at(9)
        assert [t for _s, _e, t in spans] == [NEW - 1 - DECODE_TRACED] * 3  # no step after the 3 generations
        capacity = traces.peaks(9).peak_reserved
        found, _ = traces.max_batch(capacity)
        assert found >= 9 and not traces.replay_at(found + 1, capacity).fits


def test_predict_command_says_concurrent_sequences(run):
    got = run(
        "predict", "-m", "toy-llama", "--mode", "generate", "--prompt-len", "8", "--new-tokens", "6", "-p", "bf16",
        "--memory", "2.1GiB",
    )  # fmt: skip
    assert got.exit_code == 0, got.output
    assert "PREDICTED" in got.output and "predicted max concurrent sequences" in got.output
    assert "of generation (3 whole" in got.output


@pytest.mark.slow
def test_chunks_after_the_first_attend_over_the_whole_cache_with_a_mask(monkeypatch):
    """As on the GPU (transformers 5.17 to 5.24, an H200's out-of-memory requests at llama-1b 8192/64 in chunks of
    512): the first chunk of a chunked prefill runs causal attention over itself alone; every later one attends over
    the whole static cache (P + N keys) with a boolean mask, which SDPA turns into an additive bias of the full
    (B, 1, C, P + N) size."""
    import memprobe.predict.fakecuda as fakecuda

    prompt, new, chunk, batch = 64, 4, 16, 2
    calls = []
    sdpa = fakecuda.CudaBehaviour._sdpa

    def spy(self, query, key, value, attn_mask=None, *args, **kwargs):
        if attn_mask is None or attn_mask.size(-2) > 1:  # the prefill's chunks (a decode forward's mask has 1 row)
            calls.append((key.size(2), None if attn_mask is None else tuple(attn_mask.shape)))
        return sdpa(self, query, key, value, attn_mask, *args, **kwargs)

    monkeypatch.setattr(fakecuda.CudaBehaviour, "_sdpa", spy)
    workload = generation_variant(load_registry()["toy-llama"], GenerationRequest(prompt, new, chunk))
    with TraceSession(workload, steps=3, mode="generate", precision="bf16") as session:
        session.trace("bf16", batch)
    layers, generations = 2, 3
    first = [(chunk, None)] * layers
    later = [(prompt + new, (batch, 1, chunk, prompt + new))] * layers * (prompt // chunk - 1)
    assert calls == (first + later) * generations
