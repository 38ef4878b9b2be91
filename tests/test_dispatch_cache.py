"""What a forked trace adds to the fake tensors' dispatch cache comes back to the parent, and traces answered from
entries that came back are the traces made without them."""

from __future__ import annotations

import pickle

import pytest

torch = pytest.importorskip("torch")

from memprobe.core.workload.registry import load_registry  # noqa: E402
from memprobe.predict import dispatch_cache  # noqa: E402
from memprobe.predict.fakecuda import FakeTensorMode  # noqa: E402
from memprobe.predict.fast_fake import FAST_KEY_TAG  # noqa: E402
from memprobe.predict.parallel import Job, can_fork, trace_jobs  # noqa: E402
from memprobe.predict.trace import Trace, TraceSession  # noqa: E402


@pytest.fixture
def empty_cache(monkeypatch):
    """The process-wide cache, empty for the test and put back after it."""
    monkeypatch.setattr(FakeTensorMode, "cache", {})
    return FakeTensorMode.cache


def _fast_keys(cache: dict) -> set:
    return {k for k in cache if k.key[:1] == (FAST_KEY_TAG,)}


def test_entries_travel_and_give_the_same_trace(empty_cache):
    with TraceSession(load_registry()["toy-resnet"]) as session:
        start = dispatch_cache.mark()
        first = session.trace("bf16", 2).events
        data = dispatch_cache.added_since(start)
        added = _fast_keys(empty_cache) - set(list(empty_cache)[:start])
        assert added  # the trace taught the cache something
        entries = {k: empty_cache[k] for k in added}
        for key in added:  # as in a process that never traced
            del empty_cache[key]
        assert dispatch_cache.merge(data) == len(added)
        assert {k: empty_cache[k] for k in added} == entries  # the same keys (ops resolved here), the same entries
        hits = FakeTensorMode.cache_hits
        again = session.trace("bf16", 2).events
        assert FakeTensorMode.cache_hits > hits
    assert again == first


def test_what_cannot_travel_stays_behind(empty_cache):
    assert dispatch_cache.merge(b"not a pickle") == 0
    unknown = [((FAST_KEY_TAG, dispatch_cache._Op("aten.no_such_op.default")), "entry")]
    assert dispatch_cache.merge(pickle.dumps(unknown)) == 0
    assert not empty_cache


@pytest.mark.skipif(not can_fork(), reason="traces run in forked children on Linux only")
def test_a_forked_trace_warms_this_process(empty_cache):
    with TraceSession(load_registry()["toy"]) as session:
        before = _fast_keys(empty_cache)
        got = trace_jobs([Job(session, "fp32", 2, "toy fp32 at 2")], workers=2)
        assert isinstance(next(iter(got.values())), Trace)
        assert _fast_keys(empty_cache) - before  # this process traced nothing: the child's entries came back
