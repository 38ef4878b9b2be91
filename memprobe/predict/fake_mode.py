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
from typing import TYPE_CHECKING, Any

import torch

from memprobe.predict.fakecuda import EmulationError
from memprobe.predict.torch_internals import internal

aten = torch.ops.aten
if TYPE_CHECKING:  # the class itself for the type checker; at run time through the list of internals
    from torch.utils._python_dispatch import TorchDispatchMode
else:
    TorchDispatchMode = internal("torch.utils._python_dispatch.TorchDispatchMode")
DynamicOutputShapeException = internal("torch._subclasses.fake_tensor.DynamicOutputShapeException")
FakeTensor = internal("torch._subclasses.fake_tensor.FakeTensor")
_DisableTorchDispatch = internal("torch._C._DisableTorchDispatch")

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


# torch.unique and its kin: how many distinct values there are depends on the values.
_UNIQUE = frozenset(
    {
        aten._unique.default,
        aten._unique2.default,
        aten.unique_dim.default,
        aten.unique_consecutive.default,
        aten.unique_dim_consecutive.default,
    }
)


def _unique_worst_case(func, args, kwargs) -> tuple:
    """What a unique op returns when every value (or every slice along `dim`) is distinct: its largest outputs, so
    that a step that calls it is predicted at no less memory than it needs. Inverse indices and counts are made
    only when asked for (empty otherwise, as the CUDA kernels return them)."""
    given = {**{a.name: v for a, v in zip(func._schema.arguments, args)}, **kwargs}
    t, dim = given["self"], given.get("dim")
    if dim is None:
        values, positions = t.new_empty((t.numel(),)), t.shape
    else:
        dim %= max(t.dim(), 1)
        values, positions = t.new_empty(t.shape), (t.size(dim),)
    distinct = values.numel() if dim is None else t.size(dim)
    inverse = torch.empty(positions if given.get("return_inverse") else (0,), dtype=torch.long, device=t.device)
    counts = torch.empty((distinct,) if given.get("return_counts") else (0,), dtype=torch.long, device=t.device)
    return (values, inverse, counts)[: len(func._schema.returns)]


_SCALAR = "_memprobe_scalar"  # the attribute of a 0-dim fake tensor that holds its real value (FakeCudaMode's)
_UNIFORM_DRAWS = frozenset({aten.rand.default, aten.rand.generator, aten.rand_like.default})
_LIFTS = frozenset({aten.lift_fresh.default, aten.lift_fresh_copy.default})  # torch.tensor(...) under a fake mode


def _written_arguments(func) -> tuple[tuple[int, str], ...]:
    """(position, or -1 when keyword-only; name) of each argument `func` writes into (in-place and out= ops)."""
    return tuple(
        (-1 if a.kwarg_only else i, a.name)
        for i, a in enumerate(func._schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    )


class _RealValues(TorchDispatchMode):
    """What FakeCudaMode and BuildValues share: fake tensors that also carry a real value (in the attribute `_VALUE`),
    computed beside the fake op, and dropped once an op writes into the tensor's storage without computing it."""

    _VALUE: str  # the attribute of a fake tensor that holds its real value
    _PLAIN_IS_REAL: bool  # whether a tensor that is not fake counts as its own real value

    def __init__(self) -> None:
        super().__init__()
        self._stale: set[int] = set()  # storages written by an op that was not computed for real
        self._writes: dict[Any, tuple[tuple[int, str], ...]] = {}  # op -> the arguments it writes into

    def _real(self, t: Any) -> Any:
        """The real value of a tensor argument, or None when it has none (or it went stale)."""
        if not isinstance(t, FakeTensor):
            return t if self._PLAIN_IS_REAL else None
        real = t.__dict__.get(self._VALUE)
        if real is None or (self._stale and t.untyped_storage()._cdata in self._stale):
            return None
        return real

    def _known(self, values) -> bool:
        """Whether every tensor among `values` (and in lists among them) has a real value."""
        for a in values:
            if isinstance(a, torch.Tensor):
                if self._real(a) is None:
                    return False
            elif isinstance(a, (list, tuple)) and not self._known(a):
                return False
        return True

    def _swap(self, value: Any) -> Any:
        """`value` (an argument) with each tensor replaced by its real value."""
        if isinstance(value, torch.Tensor):
            return self._real(value)
        if isinstance(value, (list, tuple)):
            return type(value)(self._swap(v) for v in value)
        return value

    def _written_arguments(self, func) -> tuple[tuple[int, str], ...]:
        """(position, or -1 when keyword-only; name) of each argument `func` writes into, read once an op."""
        writes = self._writes.get(func)
        if writes is None:
            writes = self._writes[func] = _written_arguments(func)
        return writes


class FakeCudaMode(_RealValues):
    """Above FakeTensorMode: answers what fake tensors cannot, and lets a subclass watch every op.

    Scalar draws: a 0-dim torch.rand() is taken at its largest value, just below 1, and what is computed from such
    draws alone is computed for real, so `torch.rand([]) < layerdrop` reads False: no layer skipped (BART's layer
    drop in transformers 5.17, where a read of True skipped every layer and predicted 395 for a B of 142).
    Data-dependent values of anything else: `.all()` -> True, `.any()` -> False (synthetic inputs are well formed:
    masks all ones, no NaN), any other scalar read -> 0. Data-dependent shapes (nonzero, boolean-mask
    indexing, masked_select) take their worst case, every element selected; torch.unique's, every value
    distinct. `answers` counts them.
    Subclasses override `observe(func, args, kwargs, out)`.
    """

    _VALUE = _SCALAR
    _PLAIN_IS_REAL = False  # a real tensor among an op's arguments: not a scalar draw, so nothing is computed

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

    def _track(self, func, args, kwargs, out) -> None:
        """After an op: compute a 0-dim output for real when its tensor arguments are all real scalars (before any
        write is marked: an in-place op on a scalar updates its real value), and mark the one-element tensors the
        op wrote into without that as stale."""
        writes = self._written_arguments(func)
        if isinstance(out, torch.Tensor) and out.dim() == 0:
            real = None
            if func in _UNIFORM_DRAWS and out.is_floating_point():
                # a draw of U[0, 1) at its largest value: `draw < p`, how layer drop and stochastic depth decide to
                # skip, is False for every p < 1: no layer skipped, the most memory, the same trace every time
                with _DisableTorchDispatch():
                    real = torch.full((), 1.0 - torch.finfo(out.dtype).eps / 2, dtype=out.dtype)
            elif func in _LIFTS and isinstance(args[0], torch.Tensor) and not isinstance(args[0], FakeTensor):
                # torch.tensor(0) made under the mode: a constant whose value is known, kept as it is. transformers'
                # StaticCache counts its tokens in such a scalar (`cumulative_length`, added to per forward): read
                # as an answer, every chunk of a chunked prefill looked like the first (`q_offset == 0`), so the
                # trace skipped the mask and the full-cache attention that chunks after the first run.
                with _DisableTorchDispatch():
                    real = args[0].clone()
            elif _tensors(args) and self._known(args) and self._known(kwargs.values()):
                try:
                    with _DisableTorchDispatch():
                        real = func(*self._swap(args), **{k: self._swap(v) for k, v in kwargs.items()})
                except Exception:  # noqa: BLE001 - an op the CPU cannot run: no real value, answered as before
                    real = None
            if isinstance(real, torch.Tensor) and isinstance(out, FakeTensor):
                out.__dict__[_SCALAR] = real
                if self._stale:
                    self._stale.discard(out.untyped_storage()._cdata)
                return
            out.__dict__.pop(_SCALAR, None)
        for i, name in writes:
            value = args[i] if 0 <= i < len(args) else kwargs.get(name)
            for t in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(t, FakeTensor) and t.numel() == 1:
                    self._stale.add(t.untyped_storage()._cdata)

    def _scalar(self, t: torch.Tensor):
        real = self._real(t)
        if real is not None and isinstance(real, torch.Tensor) and real.numel() == 1:
            with _DisableTorchDispatch():  # a plain tensor: read outside the fake mode
                return real.item()  # computed from scalars alone: the true value, not an answer
        made = self._made_by.get(id(t))
        producer = made[1] if made is not None and made[0]() is t else None
        value: bool | float
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
        elif _composite(func):
            # Under inference_mode no autograd key decomposes a composite op before it reaches this mode (in
            # training it never arrives whole): run its composite kernel here, as CUDA's dispatch does for an op
            # with no CUDA kernel of its own, so that what it allocates inside (max_pool2d's int64 indices, the
            # math attention's score matrix) is seen op by op.
            with self:
                return func._op_dk(_COMPOSITE, *args, **kwargs)
        else:
            try:
                out = func(*args, **kwargs)
            except DynamicOutputShapeException as exc:
                if func not in _UNIQUE:
                    raise EmulationError(
                        f"{func} has an output shape that depends on tensor values; "
                        "the step cannot be predicted on fake tensors"
                    ) from exc
                self.answers[("unique", "all distinct")] += 1
                out = _unique_worst_case(func, args, kwargs)
        if func in (aten.all.default, aten.all.dim, aten.any.default, aten.any.dim) and isinstance(out, torch.Tensor):
            self._made_by[id(out)] = (weakref.ref(out), "all" if func in (aten.all.default, aten.all.dim) else "any")
        self._track(func, args, kwargs, out)
        self.observe(func, args, kwargs, out)
        return out


# TorchDispatchMode wraps a subclass's __torch_dispatch__ in torch._disable_dynamo, so that torch.compile does not
# trace into the mode. Nothing is compiled under these modes, and the wrapper, run for every op, took a twentieth
# of a trace: the plain function is called.
FakeCudaMode.__torch_dispatch__ = inspect.unwrap(FakeCudaMode.__dict__["__torch_dispatch__"])  # type: ignore[method-assign]


_COMPOSITE = torch._C.DispatchKey.CompositeImplicitAutograd
# Composite ops that have a CUDA kernel of their own (native_functions.yaml: CompositeImplicitAutograd beside a CUDA
# dispatch entry); on a GPU they run whole, so they reach the fake tensors whole here too.
_CUDA_KERNEL = frozenset({"aten::_fused_rms_norm", "aten::mish_backward"})
_composites: dict[Any, bool] = {}


def _composite(func) -> bool:
    """Whether `func` is an op that CUDA's dispatch runs through its CompositeImplicitAutograd kernel."""
    known = _composites.get(func)
    if known is None:
        known = isinstance(func, torch._ops.OpOverload) and func.name() not in _CUDA_KERNEL
        known = _composites[func] = known and torch._C._dispatch_has_kernel_for_dispatch_key(
            func.name(), "CompositeImplicitAutograd"
        )
    return known


def _tensors(value: Any) -> list:
    """The tensors of an op's output or arguments (a tensor, or a list or tuple holding tensors)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for t in value if isinstance(t, torch.Tensor)]
    return []


# --- real values while a model is built -----------------------------------------------------------

BUILD_VALUE_MAX_NUMEL = 1 << 16  # tensors up to this many elements are also computed for real while a model is built
_REAL = "_memprobe_real"
# Ops whose output (a scalar, or a shape) depends on the values, which FakeCudaMode answers as synthetic inputs would.
_VALUE_DEPENDENT = frozenset(
    {
        aten._local_scalar_dense.default,
        aten.item.default,
        aten.is_nonzero.default,
        aten.nonzero.default,
        aten.masked_select.default,
        aten.index.Tensor,
        aten._unsafe_index.Tensor,
    }
    | _UNIQUE
)  # the attribute of a fake tensor that holds its real value (moves with swap_tensors)


class BuildValues(_RealValues):
    """While a model is built on fake tensors: small tensors are computed for real as well, so that what the build
    reads from their values is what the scan's build reads. Use as a context around the build, above the recorder.

    Some models compute their shape from tensors: timm's RegNet makes its stage widths with torch.arange, round and
    pow, counts the stages with torch.unique (an output shape that depends on the values, which fake tensors cannot
    give) and reads them back with .tolist(), which FakeCudaMode would answer with zeros. Here every op whose tensor
    arguments all have a real value (factories, torch.tensor(...) constants, and what is computed from them), and
    whose outputs have at most BUILD_VALUE_MAX_NUMEL elements, also runs on those values on the CPU: scalar reads and
    data-dependent shapes are then answered with the true ones. What is traced is unchanged: the fake op still makes
    every fake output (a data-dependent one is made at the real one's shape), and nothing large is ever computed.
    Ops on weights or activations (no real value) run on fake tensors alone; one that writes into a tensor with a
    real value drops that value (`stale`), so a value read later is never out of date.
    """

    _VALUE = _REAL
    _PLAIN_IS_REAL = True

    def __init__(self) -> None:
        super().__init__()
        self.computed = 0  # ops also run on real values

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _PRIM_DEVICE:
            return func(*args)
        if not (self._known(args) and self._known(kwargs.values())):
            out = func(*args, **kwargs)
            self._written(func, args, kwargs)
            return out
        fake_out = None
        if func not in _VALUE_DEPENDENT:  # those FakeCudaMode would answer at their worst case: real values first
            try:
                fake_out = func(*args, **kwargs)
            except EmulationError as exc:  # a data-dependent output shape (FakeCudaMode's): from the real outputs
                if not isinstance(exc.__cause__, DynamicOutputShapeException):
                    raise
        fakes = _tensors(fake_out)
        if any(t.numel() > BUILD_VALUE_MAX_NUMEL for t in fakes):
            self._written(func, args, kwargs)  # too large to compute for real: what it writes has no real value
            return fake_out
        try:
            with _DisableTorchDispatch():
                real_out = func(*self._swap(args), **{k: self._swap(v) for k, v in kwargs.items()})
        except Exception:  # noqa: BLE001 - an op that runs on fake tensors but not on the CPU: no real value
            if fake_out is None:
                raise
            self._written(func, args, kwargs)
            return fake_out
        self.computed += 1
        reals = _tensors(real_out)
        if not reals:
            return real_out  # a scalar read (.item(), .tolist(), bool(t)): the true value
        if fake_out is None:  # a data-dependent shape: fake outputs at the real ones' shapes
            device = next(t.device for t in _tensors(args))
            made = [torch.empty_strided(r.shape, r.stride(), dtype=r.dtype, device=device) for r in reals]
            fake_out = made[0] if isinstance(real_out, torch.Tensor) else type(real_out)(made)
            fakes = made
        for fake, real in zip(fakes, reals):
            if isinstance(fake, FakeTensor):
                fake.__dict__[_REAL] = real
                if self._stale:
                    self._stale.discard(fake.untyped_storage()._cdata)
        return fake_out

    def _written(self, func, args, kwargs) -> None:
        """Drop the real values of the tensors `func` wrote into without real values (in-place and out= ops)."""
        for i, name in self._written_arguments(func):
            value = args[i] if 0 <= i < len(args) else kwargs.get(name)
            for t in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(t, FakeTensor) and _REAL in t.__dict__:
                    self._stale.add(t.untyped_storage()._cdata)


BuildValues.__torch_dispatch__ = inspect.unwrap(BuildValues.__dict__["__torch_dispatch__"])  # type: ignore[method-assign]
