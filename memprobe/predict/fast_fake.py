"""FastFakeTensorMode: FakeTensorMode with a cheaper way to answer an op from its dispatch cache.

A trace runs every op of a training step on fake tensors, and FakeTensorMode answers most ops from its
dispatch cache. Two parts of a cache hit cost most of a trace, and both are done more cheaply here.

The key. Building it was about 40% of a trace: for every tensor argument torch builds a TensorMetadata
(seventeen fields, some found by walking the strides) and flattens it field by field. The key made here
holds the same information, read straight from the tensor: dtype, shape, strides, device, storage offset
and size, requires_grad and the conj / neg / inference / quantized bits, plus the mode-wide values torch's
key holds (default dtype and device, inference mode, proxy tracing). The memory format torch adds is a
function of shape and strides; sparse tensors, symbolic sizes, constants, tensors of another mode and any
argument kind it does not know send the op to torch's own key. So an op hits an entry here only when
torch's key would be equal too, and the entry (made by torch on a miss) is torch's.

The output. Each hit makes a new FakeTensor from the entry's metadata: an empty meta tensor (a view set
onto its base's storage), wrapped by FakeTensor.__new__, which checks its arguments, normalises the device
and sets about twenty attributes one by one, most of them empty memos. Here the meta tensor is made with
Python dispatch off (what torch's in_kernel_invocation_manager does for it, without its bookkeeping) and
wrapped as __new__ wraps it; the attributes are copied from the first output __new__ made for that device
in this mode. Outputs torch's path treats specially (in-place results, constants, conj / neg bits,
symbolic sizes, sparse layouts, debug mode) go through torch's own code.

Lists. FakeTensorMode caches ops that return a tensor or a tuple of them, not a list: an out-of-place
foreach op (an optimizer's `_foreach_add(grads, params, alpha=weight_decay)`) ran torch's reference
kernel once per tensor in every step, a quarter of a NASNet trace. Here such an op's list is cached as
torch caches a tuple (each element's metadata, checked as torch checks a tuple's) and given back as a list.

tests/test_fast_fake.py compares whole traces made this way and torch's way.
"""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any

import torch

from memprobe.predict.torch_internals import internal

if TYPE_CHECKING:  # the class itself for the type checker; at run time through the list of internals
    from torch._subclasses.fake_tensor import FakeTensorMode
else:
    FakeTensorMode = internal("torch._subclasses.fake_tensor.FakeTensorMode")
FakeTensor = internal("torch._subclasses.fake_tensor.FakeTensor")
FakeTensorConfig = internal("torch._subclasses.fake_tensor.FakeTensorConfig")
_DisableTorchDispatch = internal("torch._C._DisableTorchDispatch")
_set_warn_on_data_ptr = internal("torch._C._set_warn_deprecated_on_mutable_data_ptr")
_set_throw_on_data_ptr = internal("torch._C._set_throw_on_mutable_data_ptr")
_make_subclass = internal("torch.Tensor._make_subclass")
OpOverload = internal("torch._ops.OpOverload")
_DispatchCacheKey = internal("torch._subclasses.fake_tensor._DispatchCacheKey")
_get_proxy_mode = internal("torch.fx.experimental.proxy_tensor.get_proxy_mode")
_get_default_device = internal("torch._C._get_default_device")

FAST_KEY_TAG = ("memprobe fast key",)  # never equal to anything in torch's own keys
_STRIDED = torch.strided
_PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)


@functools.cache
def _returns_new_tensors(func: Any) -> bool:
    """Whether `func` is an out-of-place foreach op: it returns a list of new tensors, aliasing none of its inputs."""
    if not isinstance(func, OpOverload) or func.is_view or not func.name().startswith("aten::_foreach_"):
        return False
    returns = func._schema.returns
    return len(returns) == 1 and str(returns[0].type) == "List[Tensor]" and returns[0].alias_info is None


class _TorchKey(Exception):
    """An argument the fast key does not describe: torch's own key is used."""


class FastFakeTensorMode(FakeTensorMode):
    """FakeTensorMode whose cache key is built without TensorMetadata and whose cached outputs are made without
    FakeTensor.__new__'s checks (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._output_attributes: dict[torch.device, dict[str, Any]] = {}  # device -> a made output's __dict__

    def _make_cache_entry(self, state: Any, key: Any, func: Any, args: Any, kwargs: Any, output: Any) -> Any:
        if type(output) is list and _returns_new_tensors(func):  # cached as the tuple it could have been
            # torch's private signature says one tensor; its cache stores tuples of them too
            return super()._make_cache_entry(state, key, func, args, kwargs, tuple(output))  # type: ignore[arg-type]
        return super()._make_cache_entry(state, key, func, args, kwargs, output)

    def _output_from_cache_entry(self, state: Any, entry: Any, key: Any, func: Any, args: Any) -> Any:
        out = super()._output_from_cache_entry(state, entry, key, func, args)
        # a tuple output (is_output_tuple), whatever torch's private annotation says
        return list(out) if entry.is_output_tuple and _returns_new_tensors(func) else out  # type: ignore[arg-type]

    def _get_output_tensor_from_cache_entry(self, state: Any, entry: Any, key: Any, func: Any, args: Any) -> Any:
        metadata = entry.metadata
        if (
            entry.inplace_idx is not None
            or metadata is None
            or self.shape_env is not None
            or metadata.is_conj
            or metadata.is_neg
            or metadata.layout is not _STRIDED
            or FakeTensorConfig.debug
        ):
            return super()._get_output_tensor_from_cache_entry(state, entry, key, func, args)
        device = metadata.device
        attributes = self._output_attributes.get(device)
        if attributes is None:  # the first output for this device: torch's own, whose attributes are copied after
            out = super()._get_output_tensor_from_cache_entry(state, entry, key, func, args)
            self._output_attributes[device] = dict(out.__dict__)
            return out
        shape, stride = metadata.shape, metadata.stride
        with _DisableTorchDispatch():
            empty = torch.empty_strided(
                shape, stride, dtype=metadata.dtype, device="meta", requires_grad=metadata.requires_grad
            )
            if isinstance(func, OpOverload) and func.is_view:  # on the storage of the tensor it views
                empty.set_(args[entry.view_idx].untyped_storage(), metadata.storage_offset, shape, stride)
        out = _make_subclass(
            FakeTensor, empty, metadata.requires_grad, dispatch_device=True, device_for_backend_keys=device
        )
        (_set_warn_on_data_ptr if self._allow_unsafe_data_ptr_access else _set_throw_on_data_ptr)(out)
        out.__dict__.update(attributes)
        return out

    def _cache_key(self, state: Any, func: Any, args: Any, kwargs: Any) -> Any:
        if self.shape_env is not None:
            return super()._cache_key(state, func, args, kwargs)
        key: list = [
            FAST_KEY_TAG,
            func,
            torch.get_default_dtype(),
            _get_default_device(),
            torch.is_inference_mode_enabled(),
            _get_proxy_mode() is not None,
        ]
        try:
            self._describe(key, args)
            if kwargs:
                key += [dict, len(kwargs)]
                self._describe(key, kwargs.keys())
                self._describe(key, kwargs.values())
        except _TorchKey:
            return super()._cache_key(state, func, args, kwargs)
        return _DispatchCacheKey(tuple(key))

    def _describe(self, key: list, args: Any) -> None:
        """Append what the output of an op depends on in `args`; raises _TorchKey for what it cannot describe."""
        for arg in args:
            if isinstance(arg, FakeTensor):
                if (
                    arg.fake_mode is not self
                    or arg.constant is not None
                    or arg.layout is not _STRIDED
                    or arg._has_symbolic_sizes_strides
                ):
                    raise _TorchKey
                key.append(
                    (
                        arg.dtype,
                        arg.shape,
                        arg.stride(),
                        arg.fake_device,
                        arg.storage_offset(),
                        arg.untyped_storage().nbytes(),
                        arg.requires_grad,
                        arg.is_quantized,
                        arg.is_conj(),
                        arg.is_neg(),
                        arg.is_inference(),
                    )
                )
            elif isinstance(arg, (list, tuple)):
                key += [type(arg), len(arg)]
                self._describe(key, arg)
            elif isinstance(arg, _PLAIN):
                key += [type(arg), arg]  # the type too: 1 and 1.0 hash alike but give different dtypes
            else:
                raise _TorchKey


# FakeTensorMode's __torch_dispatch__ is wrapped in torch._disable_dynamo (see fake_mode.py) and in a call counter
# for torch's statistics; the plain function is called here.
# (replacing a method on purpose: mypy's method-assign)
FastFakeTensorMode.__torch_dispatch__ = inspect.unwrap(  # type: ignore[method-assign]
    FakeTensorMode.__dict__["__torch_dispatch__"]
)
