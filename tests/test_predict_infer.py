"""Inference predictions: what the GPU allocates inside composite ops under inference_mode, the CUDA layouts of a
model built on fake tensors, the allocator model at huge batches, the edge search where fitting is not monotone,
and the safe batch every prediction shows."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memprobe.predict.allocator import ALLOC, FREE, MARK, replay  # noqa: E402
from memprobe.predict.edge_search import PROBE_DEPTH, max_batch_for  # noqa: E402
from memprobe.predict.fakecuda import H100  # noqa: E402
from memprobe.predict.recorder import Recorder  # noqa: E402
from memprobe.predict.session import fake_session  # noqa: E402
from memprobe.predict.summary import MemorySize, PrecisionPrediction, Prediction  # noqa: E402
from memprobe.workloads.base import cuda_stand_in, on_cuda  # noqa: E402

GB = 10**9


def _allocations(step, inference: bool = True) -> list[tuple[int, str]]:
    """(bytes, op) of every allocation the recorder sees while `step()` runs on fake tensors."""
    with fake_session():
        rec = Recorder(H100)
        rec.__enter__()
        try:
            with torch.inference_mode(inference):
                step()
        finally:
            rec.__exit__(None, None, None)
    return [(e[2], str(e[3])) for e in rec.events if e[0] == ALLOC]


def test_max_pool_under_inference_mode_allocates_its_int64_indices_as_on_cuda():
    # On CUDA max_pool2d always runs max_pool2d_with_indices (Pooling.cpp: the CPU-only path skips the indices):
    # vgg16 bf16 at batch 7000 on an H200 allocated 44.96 GB of indices beside each 11.24 GB pooled output.
    def step():
        x = torch.randn(2, 4, 8, 8)
        torch.nn.functional.max_pool2d(x, 2)

    got = _allocations(step)
    assert (2 * 4 * 4 * 4 * 8, "aten.max_pool2d_with_indices.default") in got  # the indices, int64
    assert (2 * 4 * 4 * 4 * 4, "aten.max_pool2d_with_indices.default") in got  # the output
    assert not any("aten.max_pool2d.default" == op for _n, op in got)  # never seen whole


def test_math_attention_under_inference_mode_shows_its_score_matrix():
    # T5's attention takes the math path on the GPU; its (batch, heads, length, length) scores are made inside the
    # composite op, and were not seen under inference_mode (t5-base bf16 on an H200: 3251 predicted, 2864 measured)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b, h, n, d = 2, 3, 16, 8

    def step():
        q = torch.randn(b, h, n, d)
        with sdpa_kernel(SDPBackend.MATH):
            torch.nn.functional.scaled_dot_product_attention(q, q, q)

    sizes = [n for n, _op in _allocations(step)]
    assert b * h * n * n * 4 in sizes


def test_training_traces_do_not_change():
    # Outside inference_mode the autograd key decomposes composite ops before the recorder sees them: the same ops.
    def step():
        x = torch.randn(2, 4, 8, 8, requires_grad=True)
        torch.nn.functional.max_pool2d(x, 2).sum().backward()

    ops = {op for _n, op in _allocations(step, inference=False)}
    assert "aten.max_pool2d_with_indices.default" in ops


def test_a_model_built_for_the_emulated_cuda_takes_the_cuda_layouts():
    cpu = torch.device("cpu")
    assert not on_cuda(cpu)
    with cuda_stand_in():
        assert on_cuda(cpu)
        assert not on_cuda(torch.device("meta"))
    assert not on_cuda(cpu)


def _huge_inference_run(indices: bool) -> list[tuple]:
    """A vgg16-like forward pass at batch 7000 in bf16: two 45 GB convolution outputs, then a max pool whose
    output (11.2 GB) is made first and whose int64 indices (45 GB) after it, as the H200 trace shows."""
    conv, pooled = 44_957_696_000, 11_239_424_000
    events: list[tuple] = [(MARK, "trial"), (ALLOC, "x", 4_214_784_000)]
    events += [(ALLOC, "c1", conv), (ALLOC, "c2", conv), (FREE, "c1"), (ALLOC, "p", pooled)]
    if indices:
        events += [(ALLOC, "i", conv), (FREE, "i")]
    return events + [(FREE, "c2"), (FREE, "p"), (FREE, "x")]


def test_the_allocator_model_at_huge_inference_batches():
    # The pooled output takes the start of the freed first output's segment; the indices then need a third segment:
    # 3 x 44.96 GB reserved, as the H200 reserved at batch 7000 (134.3 GiB with the input's segments).
    with_indices = replay(_huge_inference_run(True), measure_from="trial")
    without = replay(_huge_inference_run(False), measure_from="trial")
    segment = 44_958_744_576  # rounded up to 2 MiB
    assert with_indices.stats.segments == 4 and without.stats.segments == 3
    assert with_indices.peak_reserved - without.peak_reserved == segment
    # At a capacity between the two, the third segment cannot be had even after the cache is given back
    capacity = without.peak_reserved + segment // 2
    assert replay(_huge_inference_run(False), capacity, "trial").fits
    failed = replay(_huge_inference_run(True), capacity, "trial")
    assert not failed.fits and failed.oom is not None and failed.oom.requested == 44_957_696_000
    assert failed.stats.retries == 1  # cudaMalloc failed, the cached blocks were released, and it failed again


class _Islands:
    """A replay whose fit is not monotone: batches fit up to `edge`, except the failing `holes`; `above` fit too."""

    def __init__(self, edge: int, holes: set[int], above: range) -> None:
        self.edge, self.holes, self.above = edge, holes, above
        self.asked: list[int] = []

    def __call__(self, batch: int, capacity: int):
        from memprobe.predict.allocator import ReplayResult, SimulatedOutOfMemory

        self.asked.append(batch)
        fits = (batch <= self.edge and batch not in self.holes) or batch in self.above
        return ReplayResult(0, 0, None if fits else SimulatedOutOfMemory(1, 1, 0, 0, 0))


def test_the_edge_search_does_not_stop_on_an_island_above_a_failure():
    # levit_256 bf16 on an H200: batches near 41,000 fit and fail in alternation; the answer is the edge below the
    # failure a user raising the batch meets first, not an island the search happened to start in
    replay_at = _Islands(1000, set(range(960, 990)), range(1003, 1011))
    found, fail = max_batch_for(replay_at, 1, guess=1005)
    assert found == 959
    assert fail is not None and not fail.fits


def test_the_edge_search_on_a_monotone_run_is_unchanged_and_probes_little():
    replay_at = _Islands(1000, set(), range(0))
    found, _ = max_batch_for(replay_at, 1, guess=990)
    assert found == 1000
    probes = [b for b in replay_at.asked if b < 990]
    assert probes and min(probes) >= 1000 * (1 - PROBE_DEPTH)


def test_nothing_fits_is_still_zero():
    found, fail = max_batch_for(_Islands(0, set(), range(0)), 1, guess=2)
    assert found == 0 and fail is not None


@pytest.mark.parametrize("safe", [7105, 7480])
def test_every_inference_prediction_shows_its_safe_batch(safe):
    # A held-out CNN under --mode infer on the H200 was predicted 4741 and no safe batch was shown: the search at
    # the safe capacity had come out at the max batch, and the table showed a safe batch only below it.
    from memprobe.predict.render import render

    size = MemorySize("H200", 141 * GB, 139 * 2**30)
    p = PrecisionPrediction(
        "bf16", None, None, {"H200": 7480}, {"H200": 7480}, {}, "checked", safe_max_batch={"H200": safe}
    )
    pred = Prediction("timm:vgg16", "H100", 3, 1.0, 0.1, [size], {"bf16": p}, [], mode="infer")
    text = " ".join(render(pred).split())
    assert f"7480 (safe {safe})" in text
    assert "leaves 5% of the usable memory unused" in text


def test_avg_pool_outputs_are_counted_for_the_kernel_limit():
    from memprobe.predict.fakecuda import INT32_COUNT_OPS

    assert set(INT32_COUNT_OPS.values()) == {"avg_pool2d"}
    with fake_session():
        rec = Recorder(H100)
        rec.__enter__()
        try:
            with torch.inference_mode():
                torch.nn.functional.avg_pool2d(torch.randn(3, 64, 8, 8), 2)
        finally:
            rec.__exit__(None, None, None)
    assert rec.int32_counts == {"avg_pool2d": 3 * 64 * 4 * 4}


def test_the_max_batch_stops_where_a_kernel_counts_past_2_31_elements():
    # coatnet_0_rw_224 bf16 inference on an H200: batch 10699 ran, 10700 raised "integer out of range" at 30 of 139
    # GiB: its (batch, 64, 56, 56) average pool passes 2^31 - 1 elements there. Memory alone said 14562.
    from types import SimpleNamespace

    from memprobe.predict.batch_model import PrecisionTraces
    from memprobe.predict.trace import TRIAL_MARK, Trace

    per_sample = 64 * 56 * 56

    def tracer(batches):
        return {
            b: Trace(
                b,
                [(MARK, TRIAL_MARK), (ALLOC, 1, 1000 * b, "x"), (FREE, 1)],
                3,
                int32_counts=(("avg_pool2d", per_sample * b),),
            )
            for b in batches
        }

    traces = PrecisionTraces(SimpleNamespace(mode="infer", steps=3), "bf16", tracer=tracer)
    found, fail = traces.max_batch(10**12)
    assert found == 10699
    assert fail is not None and not fail.fits and "avg_pool2d" in fail.limit and fail.oom is None
    assert traces.kernel_limit(10699) == ""


def test_predict_says_when_a_kernel_limit_and_not_memory_sets_the_max_batch():
    from memprobe.predict.render import render

    size = MemorySize("H200", 141 * GB, 139 * 2**30)
    why = "avg_pool2d's output of 2,147,532,800 elements passes 2^31 - 1, which its CUDA kernel counts in 32 bits"
    p = PrecisionPrediction(
        "bf16",
        None,
        None,
        {"H200": 10699},
        {"H200": 10699},
        {},
        "checked",
        safe_max_batch={"H200": 10699},
        kernel_limit={"H200": why},
    )
    pred = Prediction("timm:coatnet_0_rw_224", "H100", 3, 1.0, 0.1, [size], {"bf16": p}, [], mode="infer")
    text = " ".join(render(pred).split())
    assert "10699 (safe 10699)" in text
    assert f"batch 10700 would stop at a CUDA kernel's limit, not at memory: {why}" in text


def test_the_first_gemm_under_inference_mode_allocates_the_cublas_workspace():
    # linear reached the recorder whole under inference_mode, never as the addmm that allocates the workspace
    def step():
        torch.nn.functional.linear(torch.randn(4, 8), torch.randn(16, 8), torch.randn(16))

    assert (H100.cublas_workspace_bytes, "cuBLAS workspace") in _allocations(step)
