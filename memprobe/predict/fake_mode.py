"""FakeCudaMode: the dispatch mode above fake tensors that answers data-dependent reads as synthetic inputs would.

Fake tensors cannot answer data-dependent questions; FakeCudaMode answers them the way synthetic,
well-formed inputs would (`.all()` True, `.any()` False, other scalar reads 0, data-dependent shapes at
their worst case), counts what it answered so the prediction can say so, and lets a subclass (the
recorder) watch every op.
"""

from __future__ import annotations

import inspect
import weakref
from collections import Counter

import torch

from memprobe.predict.fakecuda import EmulationError
from memprobe.predict.torch_internals import internal

aten = torch.ops.aten
TorchDispatchMode = internal("torch.utils._python_dispatch.TorchDispatchMode")
DynamicOutputShapeException = internal("torch._subclasses.fake_tensor.DynamicOutputShapeException")

# --- fake tensors ------------------------------------------------------------------------------

_PRIM_DEVICE = torch.ops.prim.device.default
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

    def observe(self, func, args, kwargs, out) -> None:
        """Called after every op with its result."""

    def before_swap(self, t1: torch.Tensor, t2: torch.Tensor) -> None:
        """torch.utils.swap_tensors(t1, t2) is about to run: drop any weak reference to them (it refuses those)."""

    def after_swap(self, t1: torch.Tensor, t2: torch.Tensor) -> None:
        """torch.utils.swap_tensors(t1, t2) has run."""

    def _scalar(self, t: torch.Tensor):
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
        if func in (aten.all.default, aten.all.dim, aten.any.default, aten.any.dim) and isinstance(out, torch.Tensor):
            self._made_by[id(out)] = (weakref.ref(out), "all" if func in (aten.all.default, aten.all.dim) else "any")
        self.observe(func, args, kwargs, out)
        return out


# TorchDispatchMode wraps a subclass's __torch_dispatch__ in torch._disable_dynamo, so that torch.compile does not
# trace into the mode. Nothing is compiled under these modes, and the wrapper, run for every op, took a twentieth
# of a trace: the plain function is called.
FakeCudaMode.__torch_dispatch__ = inspect.unwrap(FakeCudaMode.__dict__["__torch_dispatch__"])  # type: ignore[method-assign]
