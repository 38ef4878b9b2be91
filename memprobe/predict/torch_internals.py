"""The private PyTorch internals that `memprobe predict` relies on, listed in one place and checked.

The CUDA emulation (fakecuda.py) and the allocation recorder (recorder.py) reach into PyTorch below its
public API: fake tensors, dispatch modes, the autocast dispatch keys, private ATen kernels (flash and
memory-efficient attention), and a few private attributes. Any of these can move between torch releases.
A missing one must stop a prediction with a clear error naming it and the torch version, never let the
emulation fall back to a CPU code path and print a wrong number. `require_internals()` checks them all
once per process before a trace starts; `internal(dotted)` resolves one listed name with the same error.
tests/test_torch_internals.py scans predict/ and training/ for private names and fails on one not listed.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import lru_cache
from typing import Any, NamedTuple


class Internal(NamedTuple):
    """One private name: its dotted path, what uses it, and when it is checked.

    The path starts at a module (`torch...`, `transformers...`) or at one of SAMPLES (`FakeTensor.fake_device`:
    an attribute of an object of that kind). `group` is "predict" (checked before every trace),
    "data_parallel" (only by `predict --gpus N`: importing it registers the fake process-group backend, about a
    second) or "transformers" (checked when transformers is installed: the workloads that use it import it).
    """

    path: str
    used_by: str
    group: str = "predict"


_SDPA = "fakecuda: the attention kernel CUDA runs"
_BWD = "fakecuda/workspaces: the CUDA attention backward and its workspaces"
_KEY = "fast_fake: the fake tensors' dispatch cache key, built faster"
_OUT = "fast_fake: the fake tensors' cached outputs, made faster"
_JIT = "session: torch.jit.script off while a model is built and stepped (TorchScript makes real tensors)"
# Tested with torch 2.11 (on the GPU machines) and 2.13 (CI).
_MT = "torch.distributed._tools.mem_tracker"
_STEP_TRACKER = "training/breakdown: StepTracker, a MemTracker subclass, reads and extends it"
_CATEGORIES = "training/breakdown: MemTracker's categories"
_STATES = "training/breakdown: MemTracker's per-module states"
INTERNALS: tuple[Internal, ...] = (
    Internal("torch._subclasses.fake_tensor.FakeTensorMode", "fakecuda, session: the fake tensors"),
    Internal("torch._subclasses.fake_tensor.FakeTensor", "session: deep copies of fake tensors in the session's mode"),
    Internal("torch._subclasses.fake_tensor.DynamicOutputShapeException", "fake_mode: data-dependent shapes"),
    Internal(
        "FakeTensorMode.fake_tensor_converter.meta_converter.tensor_memo",
        "session: cleared before swap_tensors, which refuses the memo's weak references",
    ),
    Internal("FakeTensorMode.in_kernel_invocation", "fake_mode: answers tensor.device as FakeTensor does"),
    Internal("FakeTensorMode._cache_key", _KEY),
    Internal("FakeTensorMode.cache", "dispatch_cache: a forked trace's cache entries carried to the next ones"),
    Internal("FakeTensorMode.shape_env", _KEY),
    Internal("torch._subclasses.fake_tensor._DispatchCacheKey", _KEY),
    Internal("torch.fx.experimental.proxy_tensor.get_proxy_mode", _KEY),
    Internal("torch._C._get_default_device", _KEY),
    Internal("FakeTensor.constant", _KEY),
    Internal("torch.jit._state.disable", _JIT),
    Internal("torch.jit._state.enable", _JIT),
    Internal("torch.jit._state._enabled", _JIT),
    Internal("FakeTensorMode._get_output_tensor_from_cache_entry", _OUT),
    Internal("FakeTensorMode._make_cache_entry", _OUT),
    Internal("FakeTensorMode._output_from_cache_entry", _OUT),
    Internal("FakeTensorMode._allow_unsafe_data_ptr_access", _OUT),
    Internal("torch._subclasses.fake_tensor.FakeTensorConfig", _OUT),
    Internal("torch._C._DisableTorchDispatch", _OUT + "; fake_mode: an op run on real values while a model is built"),
    Internal("torch._C._set_warn_deprecated_on_mutable_data_ptr", _OUT),
    Internal("torch._C._set_throw_on_mutable_data_ptr", _OUT),
    Internal("torch.Tensor._make_subclass", _OUT),
    Internal("torch._ops.OpOverload", _OUT),
    Internal("Tensor._has_symbolic_sizes_strides", _KEY),
    Internal("FakeTensor.fake_device", "fake_mode, recorder: a fake tensor's device without a dispatch"),
    Internal("FakeTensor.fake_mode", "fake_mode: answers tensor.device as FakeTensor does"),
    Internal("FakeParameter._is_param", "session: a deep-copied fake Parameter stays a Parameter"),
    Internal("torch.utils._python_dispatch.TorchDispatchMode", "fake_mode, training/cpu_memory: dispatch modes"),
    Internal("torch.utils._python_dispatch._get_current_dispatch_mode_stack", "session: modes told of swap_tensors"),
    Internal("torch.utils._python_dispatch.is_traceable_wrapper_subclass", "recorder: FSDP2's DTensor wrappers"),
    Internal("torch.utils._pytree.tree_flatten", "recorder, training/cpu_memory: tensors in an op's output"),
    Internal("torch.multiprocessing.reductions.StorageWeakRef", "recorder, training/cpu_memory: storage lifetimes"),
    Internal("torch.UntypedStorage._expired", "training/cpu_memory: whether a storage's weak reference is dead"),
    Internal("torch._C.DispatchKeySet", "fakecuda: the autocast kernels' exclude guard"),
    Internal("torch._C.DispatchKey.AutocastCPU", "fakecuda: the autocast kernels' exclude guard"),
    Internal("torch._C._dispatch_get_registrations_for_dispatch_key", "fakecuda: which ops CUDA autocasts"),
    Internal("torch._C._ExcludeDispatchKeyGuard", "fakecuda: the autocast kernels redispatch below autocast"),
    Internal("torch._C.DispatchKey.CompositeImplicitAutograd", "fake_mode: composite ops run op by op in inference"),
    Internal("torch._C._dispatch_has_kernel_for_dispatch_key", "fake_mode: which ops are composite"),
    Internal("OpOverload._op_dk", "fake_mode: a composite op's kernel called under inference_mode"),
    Internal("torch.library.Library._destroy", "fakecuda: removes the CUDA-path kernels when the session ends"),
    Internal("torch.ops.prim.device.default", "fake_mode: tensor.device, answered without a second dispatch"),
    Internal("torch.ops.aten._local_scalar_dense.default", "fake_mode: scalar reads (.item())"),
    Internal("torch.ops.aten._index_put_impl_.default", "fake_mode: boolean-mask indexing at its worst case"),
    Internal("torch.ops.aten._unsafe_index.Tensor", "fake_mode: boolean-mask indexing at its worst case"),
    Internal("torch.ops.aten._unique.default", "fake_mode: torch.unique at its worst case, every value distinct"),
    Internal("torch.ops.aten._unique2.default", "fake_mode: torch.unique at its worst case, every value distinct"),
    Internal("torch.ops.aten._grouped_mm.default", "fakecuda: MoE experts' grouped GEMM, fp32 as CUDA runs it"),
    Internal("torch.ops.aten._addmm_activation.default", "fakecuda: a cuBLAS GEMM (the workspace's first use)"),
    Internal("torch.ops.aten._softmax.default", "fakecuda: CUDA's half_to_float softmax"),
    Internal("torch.ops.aten._log_softmax.default", "fakecuda: CUDA's half_to_float log_softmax"),
    Internal("torch.ops.aten._scaled_dot_product_flash_attention.default", _SDPA),
    Internal("torch.ops.aten._scaled_dot_product_efficient_attention.default", _SDPA),
    Internal("torch.ops.aten._scaled_dot_product_attention_math.default", _SDPA),
    Internal("torch.ops.aten._scaled_dot_product_flash_attention_backward.default", _BWD),
    Internal("torch.ops.aten._scaled_dot_product_efficient_attention_backward.default", _BWD),
    Internal("torch.ops.aten._scaled_dot_product_cudnn_attention.default", _SDPA),
    Internal("torch.ops.aten._scaled_dot_product_cudnn_attention_backward.default", _BWD),
    Internal("Tensor._is_view", "fakecuda: autocast caches casts of leaf weights only, as on CUDA"),
    Internal("OpOverload._schema", "fakecuda: where an autocast op takes its dtype"),
    Internal("OpOverload._overloadname", "fakecuda: the fp32_append_dtype autocast ops"),
    Internal("UntypedStorage._cdata", "recorder: a storage's identity"),
    Internal("torch.nn.modules.batchnorm._BatchNorm", "training/wrap: models with batch norm under DDP"),
    Internal("torch.nn.parallel.distributed", "data_parallel: DDP's construction syncs are skipped", "data_parallel"),
    Internal(
        "torch.nn.parallel.distributed._verify_param_shape_across_processes",
        "data_parallel: skipped (reads tensor data)",
        "data_parallel",
    ),
    Internal(
        "torch.nn.parallel.distributed._sync_module_states",
        "data_parallel: skipped (reads tensor data)",
        "data_parallel",
    ),
    Internal(
        "torch._C._distributed_c10d.Reducer._rebuild_buckets",
        "data_parallel: _ReducerKeepingBuckets overrides it (the rebuild reads tensor data)",
        "data_parallel",
    ),
    Internal(
        "torch.distributed.device_mesh.init_device_mesh", "data_parallel: the mesh FSDP shards over", "data_parallel"
    ),
    Internal(
        "torch.testing._internal.distributed.fake_pg.FakeStore",
        "data_parallel: the fake process group",
        "data_parallel",
    ),
    Internal(
        "transformers.utils.import_utils.is_fake_tensor",
        "session: transformers keeps an all-ones attention mask for fake tensors, not on a GPU",
        "transformers",
    ),
    Internal(
        _MT + ".MemTracker",
        "training/breakdown: the memory of a step by category (scan and predict --breakdown)",
        "breakdown",
    ),
    Internal(_MT + "._MemRefType", _CATEGORIES, "breakdown"),
    Internal(_MT + "._ModState", _STATES, "breakdown"),
    Internal(_MT + "._MemRefType.ACT", _CATEGORIES, "breakdown"),
    Internal(_MT + "._MemRefType.BUFFER", _CATEGORIES, "breakdown"),
    Internal(_MT + "._MemRefType.GRAD", _CATEGORIES, "breakdown"),
    Internal(_MT + "._MemRefType.OPT", _CATEGORIES, "breakdown"),
    Internal(_MT + "._MemRefType.OTH", _CATEGORIES, "breakdown"),
    Internal(_MT + "._MemRefType.PARAM", _CATEGORIES, "breakdown"),
    Internal(_MT + "._MemRefType.TEMP", _CATEGORIES, "breakdown"),
    Internal(_MT + "._ModState.PEAK_FW", _STATES, "breakdown"),
    Internal(_MT + "._ModState.POST_FW", _STATES, "breakdown"),
    Internal(_MT + "._ModState.PRE_FW", _STATES, "breakdown"),
    Internal(
        "torch.ops.aten._to_copy.default", "training/breakdown: autocast's low-precision weight copies", "breakdown"
    ),
    Internal("MemTracker._WINFO", _STEP_TRACKER, "breakdown"),
    Internal("MemTracker._mod_tracker", _STEP_TRACKER, "breakdown"),
    Internal("MemTracker._param_to_grad_hook_handles", _STEP_TRACKER, "breakdown"),
    Internal("MemTracker._peak_mem", _STEP_TRACKER, "breakdown"),
    Internal("MemTracker._update_and_maybe_create_winfos", _STEP_TRACKER, "breakdown"),
)
GROUPS = ("predict", "data_parallel", "transformers", "breakdown")
# Names looked up in the dispatcher's registrations: CUDA's autocast policy is read from these.
DISPATCH_KEYS = ("AutocastCUDA", "AutocastCPU")


def _fake_mode() -> Any:
    return _resolve("torch._subclasses.fake_tensor.FakeTensorMode")()


def _fake_tensor(parameter: bool = False) -> Any:
    import torch

    with _fake_mode():
        t = torch.empty(1)
        return torch.nn.Parameter(t) if parameter else t


def _samples() -> dict[str, Callable[[], Any]]:
    import torch

    return {
        "Tensor": lambda: torch.empty(0),
        "UntypedStorage": lambda: torch.empty(0).untyped_storage(),
        "OpOverload": lambda: torch.ops.aten.add.Tensor,
        "FakeTensorMode": _fake_mode,
        "FakeTensor": _fake_tensor,
        "FakeParameter": lambda: _fake_tensor(parameter=True),
        "MemTracker": lambda: _resolve(_MT + ".MemTracker")(),
    }


# The objects a path may start from besides a module (made by _samples, each only when a path asks for it).
SAMPLES = ("Tensor", "UntypedStorage", "OpOverload", "FakeTensorMode", "FakeTensor", "FakeParameter", "MemTracker")
PATHS = frozenset(entry.path for entry in INTERNALS)


class TorchInternalsError(RuntimeError):
    """A PyTorch internal that `memprobe predict` needs is missing from the installed torch."""


def _message(what: list[str]) -> str:
    import torch

    return (
        f"memprobe predict needs PyTorch internals missing from torch {torch.__version__}: {', '.join(what)} "
        "(tested with torch 2.11-2.13); install a torch in that range to predict"
    )


def _resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    if parts[0] in SAMPLES:
        obj = _samples()[parts[0]]()
        for name in parts[1:]:
            obj = getattr(obj, name)
        return obj
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
    """The object at `dotted`, one of INTERNALS. Raises TorchInternalsError naming it when it is missing,
    ValueError when it is not listed in INTERNALS (every private name predict touches is listed there)."""
    if dotted not in PATHS:
        raise ValueError(f"{dotted} is not listed in torch_internals.INTERNALS")
    try:
        return _resolve(dotted)
    except (ImportError, AttributeError):
        raise TorchInternalsError(_message([dotted])) from None


def _installed(package: str) -> bool:
    try:
        importlib.import_module(package)
    except ImportError:
        return False
    return True


def missing_internals(groups: tuple[str, ...] = ("predict",)) -> list[str]:
    """Every listed internal of `groups` that the installed torch lacks (empty when all are there).

    The "transformers" group is checked only when transformers is installed. Raises ValueError for an unknown group.
    """
    import torch

    unknown = set(groups) - set(GROUPS)
    if unknown:
        raise ValueError(f"unknown groups of internals: {', '.join(sorted(unknown))}")
    if "transformers" in groups and not _installed("transformers"):
        groups = tuple(g for g in groups if g != "transformers")
    missing = []
    for entry in INTERNALS:
        if entry.group not in groups:
            continue
        try:
            _resolve(entry.path)
        except (ImportError, AttributeError):
            missing.append(entry.path)
    if "predict" in groups:
        try:
            for key in DISPATCH_KEYS:
                torch._C._dispatch_get_registrations_for_dispatch_key(key)
        except (AttributeError, RuntimeError, ValueError) as exc:
            missing.append(f"dispatch key registrations ({type(exc).__name__})")
    return missing


@lru_cache(maxsize=4)
def require_internals(groups: tuple[str, ...] = ("predict",)) -> None:
    """Check every listed internal of `groups` once per process. Raises TorchInternalsError listing the missing."""
    missing = missing_internals(groups)
    if missing:
        raise TorchInternalsError(_message(missing))


TESTED_TORCH = "2.13"  # the torch CI installs and runs the predict tests on (a CPU wheel)
HEADER_CHECKED_TORCH = ("2.11", "2.13")  # whose shipped headers the autocast and allocator facts were compared with


def untested_torch_note() -> str | None:
    """A note for a torch other than the one the emulation is tested on in CI, saying what was checked for it;
    None on the tested torch. The claim (pyproject: torch 2.11 to 2.13) is wider than CI, and the user should know."""
    import torch

    version = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    if version == TESTED_TORCH:
        return None
    headers = (
        "its autocast lists and allocator constants were compared with its headers, its run-time "
        "behaviour was not tested"
        if version in HEADER_CHECKED_TORCH
        else "nothing was checked for it"
    )
    return (
        f"predict's CUDA emulation is tested on torch {TESTED_TORCH}; this is torch {torch.__version__} "
        f"({headers}): treat the numbers with more caution"
    )
