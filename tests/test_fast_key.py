"""The fast dispatch-cache key gives the same traces as FakeTensorMode's own key, and falls back to it for what
it does not describe."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memprobe.core.registry import load_registry  # noqa: E402
from memprobe.predict import fast_key, session  # noqa: E402
from memprobe.predict.fakecuda import FakeTensorMode  # noqa: E402
from memprobe.predict.trace import TraceSession  # noqa: E402


def _traces(monkeypatch, mode_class, name: str, precision: str) -> list:
    monkeypatch.setattr(session, "FastKeyFakeTensorMode", mode_class)
    with TraceSession(load_registry()[name]) as traced:
        assert type(traced.fake) is mode_class
        return [traced.trace(precision, b).events for b in (2, 3)]


@pytest.mark.parametrize("name, precision", [("toy-bert-squad", "fp16"), ("toy-resnet", "bf16"), ("toy-llama", "fp32")])
def test_traces_equal_torchs_key(monkeypatch, name, precision):
    fast = _traces(monkeypatch, fast_key.FastKeyFakeTensorMode, name, precision)
    plain = _traces(monkeypatch, FakeTensorMode, name, precision)
    assert fast == plain


def test_cached_outputs_match_a_fresh_dispatch():
    """torch's cross-check re-runs every cache hit without the cache and compares the outputs."""
    mode = fast_key.FastKeyFakeTensorMode()
    mode.cache_crosscheck_enabled = True
    with mode:
        x = torch.empty(4, 8, requires_grad=True)
        w = torch.empty(8, 3)
        for _ in range(2):  # the second round is answered from the cache
            y = (x @ w).relu().sum(dim=0)
            y.sum().backward()
            v = x.t()[1:, ::2]
            assert v.shape == (7, 2) and v.stride() == (1, 16)
            assert y.shape == (3,)


def test_a_key_tells_apart_what_changes_the_output():
    mode = fast_key.FastKeyFakeTensorMode()
    add = torch.ops.aten.add.Tensor
    with mode:
        a, b = torch.empty(2, 3), torch.empty(2, 3)
        keys = [
            mode._cache_key(None, add, (a, b), {}),
            mode._cache_key(None, add, (a, b.t().contiguous().t()), {}),  # other strides
            mode._cache_key(None, add, (a, b.half()), {}),  # another dtype
            mode._cache_key(None, add, (a, b), {"alpha": 2}),
            mode._cache_key(None, add, (a, b), {"alpha": 2.0}),  # 2 and 2.0 hash alike
            mode._cache_key(None, add, (a, b[:1]), {}),  # a view: another shape and storage size
        ]
        assert mode._cache_key(None, add, (torch.empty(2, 3), torch.empty(2, 3)), {}) == keys[0]
    assert len(set(keys)) == len(keys)


def test_unknown_arguments_take_torchs_key(monkeypatch):
    calls = []
    monkeypatch.setattr(FakeTensorMode, "_cache_key", lambda self, *a: calls.append(a) or "torch's key")
    mode = fast_key.FastKeyFakeTensorMode()
    with mode:
        t = torch.empty(2)
    assert mode._cache_key(None, torch.ops.aten.add.Tensor, (t, object()), {}) == "torch's key"
    assert mode._cache_key(None, torch.ops.aten.add.Tensor, (t, torch.ones(2)), {}) == "torch's key"  # a real one
    assert len(calls) == 2
