"""FastKeyFakeTensorMode: FakeTensorMode with a cheaper key for its dispatch cache.

A trace runs every op of a training step on fake tensors, and FakeTensorMode answers most ops from its
dispatch cache. Building the cache key was about 40% of a trace: for every tensor argument it builds a
TensorMetadata (seventeen fields, some found by walking the strides) and flattens it field by field.
The key made here holds the same information, read straight from the tensor: dtype, shape, strides,
device, storage offset and size, requires_grad and the conj / neg / inference / quantized bits, plus
the mode-wide values torch's key holds (default dtype and device, inference mode, proxy tracing). The
memory format torch adds is a function of shape and strides; sparse tensors, symbolic sizes, constants,
tensors of another mode and any argument kind it does not know send the op to torch's own key. So an op
hits an entry here only when torch's key would be equal too, and the entry (made by torch on a miss) is
torch's. tests/test_fast_key.py compares whole traces made with both keys.
"""

from __future__ import annotations

from typing import Any

import torch

from memprobe.predict.torch_internals import internal

FakeTensorMode = internal("torch._subclasses.fake_tensor.FakeTensorMode")
FakeTensor = internal("torch._subclasses.fake_tensor.FakeTensor")
_DispatchCacheKey = internal("torch._subclasses.fake_tensor._DispatchCacheKey")
_get_proxy_mode = internal("torch.fx.experimental.proxy_tensor.get_proxy_mode")
_get_default_device = internal("torch._C._get_default_device")

_TAG = ("memprobe fast key",)  # never equal to anything in torch's own keys
_STRIDED = torch.strided
_PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)


class _TorchKey(Exception):
    """An argument the fast key does not describe: torch's own key is used."""


class FastKeyFakeTensorMode(FakeTensorMode):
    """FakeTensorMode whose dispatch cache key is built without TensorMetadata (see the module docstring)."""

    def _cache_key(self, state: Any, func: Any, args: Any, kwargs: Any) -> Any:
        if self.shape_env is not None:
            return super()._cache_key(state, func, args, kwargs)
        key: list = [
            _TAG,
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
