"""FakeCudaMode: the dispatch mode above fake tensors that answers data-dependent reads as synthetic inputs would.

Fake tensors cannot answer data-dependent questions. Small tensors (SHADOW_NUMEL elements at most) made from
values alone (torch.rand([]), torch.arange(4), a constant, and what ops compute from those) get a real twin,
a shadow, computed on the CPU beside them, so a read of one answers with the value the step would really see:
LayerDrop's `if torch.rand([]) < self.layerdrop` in BART and its relatives is False at layerdrop 0 (answered
True, every layer was skipped and the prediction was 2.8 times too large). Random shadows draw from a generator
seeded per session, so a prediction is the same every time. Other reads are answered the way synthetic,
well-formed inputs would (`.all()` True, `.any()` False, other scalar reads 0, data-dependent shapes at their
worst case); FakeCudaMode counts what it answered so the prediction can say so, and lets a subclass (the
recorder) watch every op.
"""

from __future__ import annotations

import inspect
import weakref
from collections import Counter
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from memprobe.predict.fakecuda import EmulationError
from memprobe.predict.torch_internals import internal

aten = torch.ops.aten
TorchDispatchMode = internal("torch.utils._python_dispatch.TorchDispatchMode")
DynamicOutputShapeException = internal("torch._subclasses.fake_tensor.DynamicOutputShapeException")

# --- fake tensors ------------------------------------------------------------------------------

_PRIM_DEVICE = torch.ops.prim.device.default
SHADOW_NUMEL = 64  # tensors this small made from values alone are computed for real beside their fakes
# Ops that make a tensor from their arguments alone (no tensor input): a small one gets a shadow.
_FACTORIES = frozenset(
    {
        aten.rand.default,
        aten.randn.default,
        aten.randint.default,
        aten.randint.low,
        aten.zeros.default,
        aten.ones.default,
        aten.full.default,
        aten.arange.default,
        aten.arange.start,
        aten.arange.start_step,
        aten.scalar_tensor.default,
        aten.linspace.default,
    }
)
_RANDOM = frozenset({aten.rand.default, aten.randn.default, aten.randint.default, aten.randint.low})
_NO_AUTOCAST = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU) | torch._C.DispatchKeySet(
    torch._C.DispatchKey.AutocastCUDA
)
_BOOL_INDEX_OPS = frozenset(
    {
        aten.index.Tensor,
        aten.index_put.default,
        aten.index_put_.default,
        aten._index_put_impl_.default,
        aten._unsafe_index.Tensor,
    }
)


class FakeCudaMode(TorchDispatchMode):
    """Above FakeTensorMode: answers what fake tensors cannot, and lets a subclass watch every op.

    Data-dependent values: `.all()` -> True, `.any()` -> False (synthetic inputs are well formed: masks
    all ones, no NaN), any other scalar read -> 0. Data-dependent shapes (nonzero, boolean-mask
    indexing, masked_select) take their worst case, every element selected. `answers` counts them.
    Subclasses override `observe(func, args, kwargs, out)`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.answers: Counter = Counter()
        self._made_by: dict[int, tuple[weakref.ref, str]] = {}
        self._shadows: dict[int, tuple[weakref.ref, torch.Tensor]] = {}
        self._draws = 0  # random shadows drawn so far: each is seeded by its number

    def observe(self, func, args, kwargs, out) -> None:
        """Called after every op with its result."""

    def before_swap(self, t1: torch.Tensor, t2: torch.Tensor) -> None:
        """torch.utils.swap_tensors(t1, t2) is about to run: drop any weak reference to them (it refuses those)."""

    def after_swap(self, t1: torch.Tensor, t2: torch.Tensor) -> None:
        """torch.utils.swap_tensors(t1, t2) has run."""

    def _shadow_of(self, t: Any) -> torch.Tensor | None:
        """The real twin of a fake tensor (a shadow, or the constant FakeTensorMode keeps), or a real tensor itself."""
        got = self._shadows.get(id(t))
        if got is not None and got[0]() is t:
            return got[1]
        constant = getattr(t, "constant", None)
        if isinstance(constant, torch.Tensor):
            return constant
        if type(t) is torch.Tensor or type(t) is torch.nn.Parameter:  # a real tensor: its own value
            return t if t.device.type == "cpu" and not t.is_meta else None
        return None

    def _shade(self, func, args, kwargs, out) -> None:
        """Give a small `out` of `func` a shadow, where every tensor it was made from has one; drop a stale one."""
        flat, _ = tree_flatten((args, kwargs))
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        if not tensors and func not in _FACTORIES:
            return
        real = [self._shadow_of(t) for t in tensors]
        if any(r is None for r in real):
            self._shadows.pop(id(out), None)  # an in-place op on a shadowed tensor with an unknown input
            return
        swap = {id(t): r for t, r in zip(tensors, real)}
        real_args, real_kwargs = tree_map(
            lambda a: swap.get(id(a), a) if isinstance(a, torch.Tensor) else a, (args, kwargs)
        )
        try:
            with torch._C._DisableTorchDispatch(), torch._C._ExcludeDispatchKeyGuard(_NO_AUTOCAST), torch.no_grad():
                if func in _RANDOM:
                    self._draws += 1
                    with torch.random.fork_rng(devices=[]):
                        torch.manual_seed(self._draws)
                        value = func(*real_args, **real_kwargs)
                else:
                    value = func(*real_args, **real_kwargs)
        except Exception:  # noqa: BLE001 - no shadow: reads of it are answered as before
            self._shadows.pop(id(out), None)
            return
        if isinstance(value, torch.Tensor) and value.shape == out.shape:
            self._shadows[id(out)] = (weakref.ref(out), value)

    def _scalar(self, t: torch.Tensor):
        real = self._shadow_of(t)
        if real is not None and real.numel() == 1:
            with torch._C._DisableTorchDispatch():  # a real tensor: the fake mode below must not see it
                value = real.item()
            self.answers[("computed", "exactly")] += 1
            return value
        made = self._made_by.get(id(t))
        producer = made[1] if made is not None and made[0]() is t else None
        if t.dtype == torch.bool:
            value = producer != "any"
        elif t.is_floating_point():
            value = 0.0
        else:
            value = 0
        self.answers[(producer or "value", value)] += 1
        return value

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _PRIM_DEVICE:  # asked for every `tensor.device`: the most frequent call by far
            # Answered here as FakeTensor.__torch_dispatch__ answers it, without a second trip through the
            # dispatcher (the autograd engine asks it for every tensor it touches).
            t = args[0]
            device = getattr(t, "fake_device", None)
            mode = getattr(t, "fake_mode", None)
            if device is None or mode is None or mode.in_kernel_invocation:
                return func(*args)
            return device
        kwargs = kwargs or {}
        if func is aten._local_scalar_dense.default or func is aten.item.default:
            return self._scalar(args[0])
        if func is aten.is_nonzero.default:
            # Under inference_mode bool(tensor) reaches this mode as is_nonzero (no autograd key above it
            # to decompose it into item()), and the fake mode's own decomposition cannot answer it.
            return bool(self._scalar(args[0]))
        if func in _BOOL_INDEX_OPS and any(i is not None and i.dtype in (torch.bool, torch.uint8) for i in args[1]):
            indices = []
            for i in args[1]:
                if i is not None and i.dtype in (torch.bool, torch.uint8):
                    self.answers[("boolean index", "all selected")] += 1
                    indices += [torch.empty(i.numel(), dtype=torch.long, device=i.device) for _ in range(i.dim())]
                else:
                    indices.append(i)
            args = (args[0], indices, *args[2:])
        if func is aten.nonzero.default:
            t = args[0]
            self.answers[("nonzero", "all selected")] += 1
            out = torch.empty((t.numel(), t.dim()), dtype=torch.long, device=t.device)
        elif func is aten.masked_select.default:
            t, mask = args
            self.answers[("masked_select", "all selected")] += 1
            out = torch.empty(torch.broadcast_shapes(t.shape, mask.shape).numel(), dtype=t.dtype, device=t.device)
        else:
            try:
                out = func(*args, **kwargs)
            except DynamicOutputShapeException as exc:
                raise EmulationError(
                    f"{func} has an output shape that depends on tensor values; "
                    "the step cannot be predicted on fake tensors"
                ) from exc
        if isinstance(out, torch.Tensor) and not out.is_meta and out.numel() <= SHADOW_NUMEL:
            self._shade(func, args, kwargs, out)
        if func in (aten.all.default, aten.all.dim, aten.any.default, aten.any.dim) and isinstance(out, torch.Tensor):
            self._made_by[id(out)] = (weakref.ref(out), "all" if func in (aten.all.default, aten.all.dim) else "any")
        self.observe(func, args, kwargs, out)
        return out


# TorchDispatchMode wraps a subclass's __torch_dispatch__ in torch._disable_dynamo, so that torch.compile does not
# trace into the mode. Nothing is compiled under these modes, and the wrapper, run for every op, took a twentieth
# of a trace: the plain function is called.
FakeCudaMode.__torch_dispatch__ = inspect.unwrap(FakeCudaMode.__dict__["__torch_dispatch__"])  # type: ignore[method-assign]
