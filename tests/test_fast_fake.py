"""The fast dispatch-cache key and cached outputs give the same traces as FakeTensorMode's own, and fall back to it
for what they do not describe."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memprobe.core.workload.registry import load_registry  # noqa: E402
from memprobe.predict import fast_fake, session  # noqa: E402
from memprobe.predict.fakecuda import FakeTensorMode  # noqa: E402
from memprobe.predict.trace import TraceSession  # noqa: E402


def _traces(monkeypatch, mode_class, name: str, precision: str) -> list:
    monkeypatch.setattr(session, "FastFakeTensorMode", mode_class)
    with TraceSession(load_registry()[name]) as traced:
        assert type(traced.fake) is mode_class
        return [traced.trace(precision, b).events for b in (2, 3)]


@pytest.mark.parametrize("name, precision", [("toy-bert-squad", "fp16"), ("toy-resnet", "bf16"), ("toy-llama", "fp32")])
def test_traces_equal_torchs_key(monkeypatch, name, precision):
    fast = _traces(monkeypatch, fast_fake.FastFakeTensorMode, name, precision)
    plain = _traces(monkeypatch, FakeTensorMode, name, precision)
    assert fast == plain


def test_cached_outputs_match_a_fresh_dispatch():
    """torch's cross-check re-runs every cache hit without the cache and compares the outputs."""
    mode = fast_fake.FastFakeTensorMode()
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
    assert mode._output_attributes  # the second round's outputs were made here, not by FakeTensor.__new__


def test_a_cached_output_is_the_fake_tensor_torch_makes():
    mode = fast_fake.FastFakeTensorMode()
    plain = FakeTensorMode()
    made = []
    for m in (mode, plain):
        with m:
            x = torch.empty(4, 8, requires_grad=True)
            outs = [(x.t()[1:, ::2], (x * 2).sum(dim=1)) for _ in range(2)]  # the second from the cache
        made.append((x, outs[1]))
    (x, (view, summed)), (px, (pview, psummed)) = made
    assert mode._output_attributes
    for a, b in ((view, pview), (summed, psummed)):
        assert type(a) is type(b) and (a.shape, a.stride(), a.dtype, a.requires_grad) == (
            b.shape,
            b.stride(),
            b.dtype,
            b.requires_grad,
        )
        assert a.fake_device == b.fake_device and a.fake_mode is mode and a.storage_offset() == b.storage_offset()
        assert sorted(a.__dict__) == sorted(b.__dict__)
    assert view.untyped_storage()._cdata == x.untyped_storage()._cdata  # a view shares its base's storage
    assert summed.untyped_storage()._cdata != x.untyped_storage()._cdata


def test_a_key_tells_apart_what_changes_the_output():
    mode = fast_fake.FastFakeTensorMode()
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
    mode = fast_fake.FastFakeTensorMode()
    with mode:
        t = torch.empty(2)
    assert mode._cache_key(None, torch.ops.aten.add.Tensor, (t, object()), {}) == "torch's key"
    assert mode._cache_key(None, torch.ops.aten.add.Tensor, (t, torch.ones(2)), {}) == "torch's key"  # a real one
    assert len(calls) == 2


def test_an_out_of_place_foreach_ops_list_of_outputs_is_cached():
    made = []
    for mode in (fast_fake.FastFakeTensorMode(), FakeTensorMode()):
        with mode:
            params = [torch.empty(3, 4), torch.empty(5)]
            grads = [torch.empty(3, 4), torch.empty(5)]
            hits = FakeTensorMode.cache_hits
            outs = [torch._foreach_add(grads, params, alpha=0.1) for _ in range(2)]
            made.append((outs, FakeTensorMode.cache_hits - hits))
    (fast, fast_hits), (plain, plain_hits) = made
    assert fast_hits >= 1 and plain_hits == 0  # torch alone caches no list
    for got, want in zip(fast[1], plain[1]):
        assert (got.shape, got.stride(), got.dtype, got.fake_device) == (
            want.shape,
            want.stride(),
            want.dtype,
            want.fake_device,
        )
    assert type(fast[1]) is type(plain[1]) and fast[1][0] is not fast[0][0]  # new tensors each time
    assert all(o.untyped_storage()._cdata != p.untyped_storage()._cdata for o, p in zip(fast[1], params))
