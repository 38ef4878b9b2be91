"""The private PyTorch internals that `memprobe predict` relies on, listed in one place and checked.

The CUDA emulation (fakecuda.py) and the allocation recorder (recorder.py) reach into PyTorch below its
public API: fake tensors, dispatch modes, the autocast dispatch keys, private ATen kernels (flash and
memory-efficient attention), and a few private attributes. Any of these can move between torch releases.
A missing one must stop a prediction with a clear error naming it and the torch version, never let the
emulation fall back to a CPU code path and print a wrong number. `require_internals()` checks them all
once per process before a trace starts; `internal(dotted)` resolves one at import time with the same error.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Any

# Tested with torch 2.11 (the GPU machines measured) and 2.13 (CI). Dotted paths, resolved from the top module.
OBJECTS = (
    "torch._subclasses.fake_tensor.FakeTensorMode",
    "torch._subclasses.fake_tensor.FakeTensor",
    "torch._subclasses.fake_tensor.DynamicOutputShapeException",
    "torch.utils._python_dispatch.TorchDispatchMode",
    "torch.utils._python_dispatch._get_current_dispatch_mode_stack",
    "torch.utils._python_dispatch.is_traceable_wrapper_subclass",
    "torch.distributed.device_mesh.init_device_mesh",
    "torch.nn.parallel.distributed._verify_param_shape_across_processes",
    "torch.nn.parallel.distributed._sync_module_states",
    "torch.utils._pytree.tree_flatten",
    "torch.multiprocessing.reductions.StorageWeakRef",
    "torch._C.DispatchKeySet",
    "torch._C.DispatchKey.AutocastCPU",
    "torch._C._dispatch_get_registrations_for_dispatch_key",
    "torch._C._ExcludeDispatchKeyGuard",
    "torch.ops.prim.device.default",
)
# Resolved only by `predict --gpus N` (data_parallel.fake_world), with the same error when missing: importing
# it registers the `fake` process-group backend and takes about a second.
DATA_PARALLEL_OBJECTS = ("torch.testing._internal.distributed.fake_pg.FakeStore",)
# Private ATen kernels the emulation calls or recognizes (torch.ops.aten.<name>.default).
ATEN_OPS = (
    "_addmm_activation", "_softmax", "_log_softmax", "_local_scalar_dense", "_index_put_impl_",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_attention_math",
)
# Private attributes read on ordinary objects: (what it is read on, attribute).
ATTRIBUTES = (
    ("Tensor", "_is_view"),
    ("OpOverload", "_schema"),
    ("OpOverload", "_overloadname"),
    ("UntypedStorage", "_cdata"),
)
# Names looked up in the dispatcher's registrations: CUDA's autocast policy is read from these.
DISPATCH_KEYS = ("AutocastCUDA", "AutocastCPU")


class TorchInternalsError(RuntimeError):
    """A PyTorch internal that `memprobe predict` needs is missing from the installed torch."""


def _message(what: list[str]) -> str:
    import torch

    return (f"memprobe predict needs PyTorch internals missing from torch {torch.__version__}: {', '.join(what)} "
            "(tested with torch 2.11-2.13); install a torch in that range to predict")


def _resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    obj: Any = None
    for i in range(len(parts), 0, -1):  # the longest importable module prefix, then attributes
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


def internal(dotted: str) -> Any:
    """The object at `dotted` (one of OBJECTS). Raises TorchInternalsError naming it when it is missing."""
    try:
        return _resolve(dotted)
    except (ImportError, AttributeError):
        raise TorchInternalsError(_message([dotted])) from None


def missing_internals() -> list[str]:
    """Every listed internal that the installed torch lacks (empty when all are there)."""
    import torch

    missing = []
    for dotted in OBJECTS:
        try:
            _resolve(dotted)
        except (ImportError, AttributeError):
            missing.append(dotted)
    missing += [f"torch.ops.aten.{name}" for name in ATEN_OPS if not hasattr(torch.ops.aten, name)]
    samples = {"Tensor": torch.empty(0), "OpOverload": torch.ops.aten.add.Tensor,
               "UntypedStorage": torch.empty(0).untyped_storage()}
    missing += [f"{kind}.{attr}" for kind, attr in ATTRIBUTES if not hasattr(samples[kind], attr)]
    try:
        for key in DISPATCH_KEYS:
            torch._C._dispatch_get_registrations_for_dispatch_key(key)
    except (AttributeError, RuntimeError, ValueError) as exc:
        missing.append(f"dispatch key registrations ({type(exc).__name__})")
    return missing


@lru_cache(maxsize=1)
def require_internals() -> None:
    """Check every listed internal once per process. Raises TorchInternalsError listing the missing ones."""
    missing = missing_internals()
    if missing:
        raise TorchInternalsError(_message(missing))
