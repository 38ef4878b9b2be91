"""benchmarks/allocator_trace.py turns a captured CUDA allocator history into replay events."""

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

from memprobe.predict.allocator import ALLOC, FREE, MARK, replay
from memprobe.predict.trace import TRIAL_MARK

SPEC = importlib.util.spec_from_file_location(
    "allocator_trace", Path(__file__).parents[1] / "benchmarks" / "allocator_trace.py"
)
allocator_trace = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(allocator_trace)

MiB = 1 << 20
TRACES = Path(__file__).parents[1] / "reports" / "benchmarks" / "allocator_traces"


def doc(events):
    return {"marker_bytes": allocator_trace.MARKER_BYTES, "labels": ["build", "step"], "events": events}


def test_marker_becomes_the_trial_mark_and_frees_follow_free_completed():
    m = allocator_trace.MARKER_BYTES
    captured = doc(
        [
            ["segment_alloc", 0x1000, 20 * MiB, 0],
            ["alloc", 0x1000, 3 * MiB, 0],  # a weight, kept
            ["alloc", 0x2000, 5 * MiB, 0],  # freed before the trial
            ["free_requested", 0x2000, 5 * MiB, 0],
            ["free_completed", 0x2000, 5 * MiB, 0],
            ["alloc", 0x9000, m, 1],  # run_trial's `before` hook
            ["free_requested", 0x9000, m, 1],
            ["free_completed", 0x9000, m, 1],
            ["alloc", 0x2000, 7 * MiB, 1],
            ["free_requested", 0x2000, 7 * MiB, 1],  # only free_completed returns the block
            ["free_completed", 0x2000, 7 * MiB, 1],
            ["oom", 0, 80 * MiB, 1],
        ]
    )
    events, labels, segments = allocator_trace.real_events(captured)
    assert events == [
        (ALLOC, 1, 3 * MiB, ""),
        (ALLOC, 2, 5 * MiB, ""),
        (FREE, 2),
        (MARK, TRIAL_MARK),
        (ALLOC, 3, 7 * MiB, ""),
        (FREE, 3),
        (ALLOC, 4, 80 * MiB, ""),
    ]  # the failed request last
    assert labels == ["build", "build", "build", "trial start", "step", "step", "the request that ran out of memory"]
    assert segments == [("segment_alloc", 20 * MiB, 0), ("oom", 80 * MiB, 6)]
    result = replay(events[:-1], measure_from=TRIAL_MARK)
    # peaks count from the mark: the 3 MiB weight plus the 7 MiB step tensor, both in one 20 MiB segment
    assert result.peak_allocated == 10 * MiB
    assert result.peak_reserved == 20 * MiB


@pytest.mark.parametrize("name", ["transformer-big_fp16_679", "transformer-big_fp16_16"])
def test_the_model_replays_the_h100s_own_trace_to_its_peaks(name):
    # Captured on the H100 (torch 2.11): every alloc and free of a trial, in order. Replayed through
    # the allocator model at the capacity the real trial had, it must reach the same peaks. At 679
    # the real allocator ran out once and retried after releasing cached segments; the model must
    # fit there too (with segments numbered upward it ran out of memory on a 10.61 GiB request).
    with gzip.open(TRACES / f"{name}.json.gz", "rt") as fh:
        captured = json.load(fh)
    events, _, _ = allocator_trace.real_events(captured)
    result = replay(events, capacity=captured["capacity_bytes"], measure_from=TRIAL_MARK)
    real = captured["attempt"]
    assert result.fits
    assert result.peak_allocated == real["peak_allocated"]
    assert result.peak_reserved == real["peak_reserved"]
    assert result.stats.retries == captured["stats"]["num_alloc_retries"]


def test_the_h100s_edge_679_680_replays_with_the_memory_it_had_left_at_the_failure():
    # The real trial at 680 ran out of memory on a 10.62 GiB request with 10.625 GiB free: the 2 MiB
    # rounding of the new segment was 1.9 MB too much. By then memory outside PyTorch's allocator
    # had grown by 151 MiB since setup (kernels load lazily), so the allocator had 78.43 GiB, not
    # the 78.57 GiB measured at setup. With that, the model gives the real edge exactly.
    traces = {}
    for batch in (679, 680):
        with gzip.open(TRACES / f"transformer-big_fp16_{batch}.json.gz", "rt") as fh:
            traces[batch] = json.load(fh)
    events_680, labels, _ = allocator_trace.real_events(traces[680])
    request = labels.index("the request that ran out of memory")  # the step's cleanup frees follow it
    events_679, _, _ = allocator_trace.real_events(traces[679])
    at_setup = traces[680]["capacity_bytes"]
    at_failure = at_setup - 151 * MiB
    assert replay(events_679, capacity=at_failure, measure_from=TRIAL_MARK).fits
    failed = replay(events_680, capacity=at_failure, measure_from=TRIAL_MARK)
    assert not failed.fits and failed.oom_at == request and failed.stats.retries == 1
    # with the capacity measured at setup the model lets 680 fit: the source of its +1 at the edge
    assert replay(events_680, capacity=at_setup, measure_from=TRIAL_MARK).fits
