"""Run a workload's training step on fake tensors the way it would run on an NVIDIA GPU, with no GPU.

`memprobe predict` needs every tensor a CUDA training step would allocate, with its size, on a
machine that may have no GPU and a CPU-only torch build. Fake tensors (FakeTensorMode) give sizes
without data. They cannot live on a fake "cuda" device here: on a CPU-only build the autograd
engine asks for the accelerator's current stream when a gradient reaches a CUDA tensor and fails
("Cannot access accelerator device when none is available"), and Python-level indexing and
`.to("cuda")` need a CUDA device guard the build does not have. So the tensors are fake tensors on
the CPU device, and the places where PyTorch's own code takes a different path on CUDA than on the
CPU are made to take the CUDA path while the emulation is active:

- autocast: the CPU autocast kernels are replaced by the CUDA autocast policy (autocast_policy.py: the op lists of
  ATen/autocast_mode.h: lower-precision, fp32, fp32_set_opt_dtype, fp32_append_dtype, promote), with
  the CUDA cache of low-precision weight copies; CPU-only entries (cross_entropy_loss, cat, stack,
  ...) fall through as they do on CUDA. fp16 autocast keeps fp16 copies of the weights, as on CUDA.
- dropout: CUDA runs the fused native_dropout (a 1-byte bool mask); the CPU composite draws a mask
  in the input's dtype. The emulation calls native_dropout, as `is_fused_kernel_acceptable` does on CUDA.
- scaled_dot_product_attention: on the CPU (and the meta device) it takes the math path and
  materializes the attention matrix; on an Ampere-or-newer GPU it runs flash attention (fp16/bf16)
  or memory-efficient attention (fp32, or with a mask), whose memory is O(sequence): output plus
  log-sum-exp. The emulation selects the backend as sdp_utils.cpp does on sm80+ and calls that kernel.
- softmax / log_softmax of fp16 input with dtype=float32: CUDA computes it in one kernel
  (half_to_float) instead of first making an fp32 copy of the input.
- kernel workspaces that never show up as tensors: the cuBLAS workspace (32 MiB on sm90, allocated
  through the caching allocator at the first GEMM) and the temporaries inside the flash and
  memory-efficient attention backward kernels (workspaces.py).
- optimizers: `make_optimizer` builds the fused kernels on CUDA (foreach on the CPU, whose
  temporaries are as large as the parameters); `cuda_optimizers` rebuilds them fused.

Fake tensors cannot answer data-dependent questions; FakeCudaMode (fake_mode.py) answers them the way synthetic,
well-formed inputs would (`.all()` True, `.any()` False, other scalar reads 0, data-dependent
shapes at their worst case) and counts what it answered, so the prediction can say so.
"""

from __future__ import annotations

import math
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

import torch

from memprobe.predict.autocast_policy import FP32_APPEND_DTYPE, eligible, op_overload, policies
from memprobe.predict.sdpa_choice import choose_backend
from memprobe.predict.torch_internals import internal

# Private internals, resolved through torch_internals so a missing one is a clear error, not a wrong number.
FakeTensorMode = internal("torch._subclasses.fake_tensor.FakeTensorMode")

aten = torch.ops.aten


class EmulationError(RuntimeError):
    """The step cannot be run on fake tensors (e.g. a shape that depends on tensor values)."""


@dataclass(frozen=True)
class Target:
    """The GPU whose kernels are emulated: kernel choices and workspaces depend on the architecture."""

    name: str = "NVIDIA H100 (sm90)"
    compute_capability: tuple[int, int] = (9, 0)
    # The cuDNN the emulated torch runs (versionRuntimeCuDNN): 9.19, what torch 2.11's CUDA 13 wheels ship and the
    # H100 and H200 scans ran (their environment.cudnn).
    cudnn_version: int = 91900

    @property
    def prefers_cudnn_attention(self) -> bool:
        """Whether SDPA tries cuDNN attention first (sdp_utils.cpp check_prefer_cudnn_attention: cuDNN newer than
        9.15 on sm90 or sm10x, unless TORCH_CUDNN_SDPA_DEPRIORITIZED is set)."""
        import os

        if os.environ.get("TORCH_CUDNN_SDPA_DEPRIORITIZED", "").lower() in ("1", "true", "on", "yes"):
            return False
        return self.cudnn_version > 91500 and self.compute_capability[0] in (9, 10)

    @property
    def cublas_workspace_bytes(self) -> int:
        """cuBLAS workspace per handle and stream (CublasHandlePool.cpp parseChosenWorkspaceSize: ":4096:8" =
        32 MiB on sm90 and newer, ":4096:2:16:8" before). cuBLASLt shares it (unified workspaces, the
        default outside fbcode), so one allocation serves both."""
        if self.compute_capability[0] >= 9:
            return 4096 * 8 * 1024
        return 4096 * 1024 * 2 + 16 * 1024 * 8


H100 = Target()

# Ops that run a cuBLAS GEMM on CUDA (the first one allocates the cuBLAS workspace).
CUBLAS_OPS = frozenset(
    {
        aten.mm.default,
        aten.addmm.default,
        aten.bmm.default,
        aten.baddbmm.default,
        aten.addmv.default,
        aten.mv.default,
        aten.dot.default,
        aten._addmm_activation.default,
        aten.addbmm.default,
    }
)

# Ops whose CUDA kernel counts its output's elements in a 32-bit int (ATen/native/Pool.h safe_downcast): past
# 2^31 - 1 elements the op raises "integer out of range", whatever the memory. AveragePool2d.cu: `const int32_t count
# = safe_downcast<int32_t, int64_t>(output.numel())`. Seen on an H200: coatnet_0_rw_224 bf16 inference ran batch
# 10699 and stopped at 10700, where its (batch, 64, 56, 56) average-pooled shortcut passes 2^31 elements (at 30 of
# 139 GiB). max_pool2d has no such count on its channels_last path (vgg16 pooled 5.6e9 elements at batch 7000).
INT32_COUNT_OPS = {aten.avg_pool2d.default: "avg_pool2d"}
INT32_MAX = 2**31 - 1

_AUTOCAST_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)


class CudaBehaviour:
    """Dispatcher overrides that make CPU-device (fake) tensors take CUDA's code paths. Use as a context.

    Registers Python kernels through torch.library for the duration; closing restores the native ones.
    `notes` lists what was emulated and anything the emulation could not map.
    """

    def __init__(self, target: Target = H100) -> None:
        self.target = target
        self.notes: list[str] = []
        self._cache: dict[int, tuple[weakref.ref, torch.Tensor]] = {}
        self._clear_native_cache: Callable[[], None] | None = None
        self.sdpa_choices: Counter = Counter()
        self._lib: torch.library.Library | None = None

    # -- lifetime -----------------------------------------------------------------------------
    def __enter__(self) -> "CudaBehaviour":
        import warnings

        self._lib = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            # Overriding registered kernels is the point; torch warns about it once.
            warnings.simplefilter("ignore")
            self._register_autocast()
            self._lib.impl("dropout", self._dropout, "CompositeImplicitAutograd")
            self._lib.impl("scaled_dot_product_attention", self._sdpa, "CompositeImplicitAutograd")
            self._lib.impl("softmax.int", self._softmax, "CompositeImplicitAutograd")
            self._lib.impl("log_softmax.int", self._log_softmax, "CompositeImplicitAutograd")
            # torch's own meta kernel for it is a Python one too: overriding it must be allowed (torch 2.11 refuses
            # by default)
            self._lib.impl("_grouped_mm", _grouped_mm_meta, "Meta", allow_override=True)
        # The cache of low-precision weight copies lives as long as the native one: torch.autocast's exit
        # clears that when it leaves the outermost autocast region (nesting 0), whoever entered it -- our
        # forward, or activation checkpointing's recomputation in the backward pass, which enters
        # torch.autocast itself. Clearing only at the end of our own region kept the copies made while
        # recomputing alive into the next step: more memory than CUDA holds, and a trace whose first step
        # differs from the others.
        native = self._clear_native_cache = torch.clear_autocast_cache

        def clear_autocast_cache() -> None:
            native()
            self._cache.clear()

        torch.clear_autocast_cache = clear_autocast_cache
        return self

    def __exit__(self, *exc) -> None:
        if self._lib is not None:
            self._lib._destroy()
            self._lib = None
        if self._clear_native_cache is not None:
            torch.clear_autocast_cache = self._clear_native_cache
            self._clear_native_cache = None
        self._cache.clear()

    def autocast(self, dtype: torch.dtype):
        """Autocast for the emulated CUDA device (what `torch.autocast("cuda", dtype)` is on the GPU): the
        CPU autocast whose kernels this emulation replaced. Its exit at nesting 0 clears the weight-copy cache."""
        return torch.autocast("cpu", dtype=dtype)

    # -- autocast -----------------------------------------------------------------------------
    def _register_autocast(self) -> None:
        table = policies()
        lib = self._lib
        if lib is None:
            raise RuntimeError("the CUDA autocast kernels are registered only while the emulation is entered")
        cuda_ops = {
            n.removeprefix("aten::")
            for n in torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA")
            if n.startswith("aten::")
        }
        cpu_ops = {
            n.removeprefix("aten::")
            for n in torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCPU")
            if n.startswith("aten::")
        }
        unknown = sorted(cuda_ops - set(table))
        if unknown:
            self.notes.append("CUDA autocast kernels with no known policy (left as on the CPU): " + ", ".join(unknown))
        for name in sorted(cpu_ops | set(table)):
            if name in cuda_ops and name in table:
                lib.impl(name, self._autocast_kernel(op_overload(name), table[name]), "AutocastCPU")
            elif name in cpu_ops and name not in cuda_ops:
                # CPU-only autocast entries (cross_entropy_loss, cat, stack, ...): not autocast on CUDA.
                lib.impl(name, torch.library.fallthrough_kernel, "AutocastCPU")

    def _cached_cast(self, to_type: torch.dtype, arg: Any) -> Any:
        # cached_cast in autocast_mode.cpp: cache lower-precision copies of fp32 leaf weights.
        if isinstance(arg, torch.Tensor):
            if not eligible(arg) or arg.dtype == to_type:
                return arg
            lower = torch.get_autocast_dtype("cpu")
            if (
                to_type == lower
                and arg.dtype == torch.float32
                and arg.requires_grad
                and arg.is_leaf
                and not arg._is_view()
                and torch.is_autocast_cache_enabled()
            ):
                hit = self._cache.get(id(arg))
                if hit is not None and hit[0]() is arg:
                    return hit[1]
                cast = arg.to(to_type)
                self._cache[id(arg)] = (weakref.ref(arg), cast)
                return cast
            return arg.to(to_type)
        if isinstance(arg, (list, tuple)) and any(isinstance(a, torch.Tensor) for a in arg):
            return type(arg)(self._cached_cast(to_type, a) for a in arg)
        return arg

    def _autocast_kernel(self, op, policy: str):
        schema_args = op._schema.arguments
        dtype_index = next((i for i, a in enumerate(schema_args) if a.name == "dtype"), None)
        dtype_kwarg_only = dtype_index is not None and schema_args[dtype_index].kwarg_only

        def kernel(*args, **kwargs):
            with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_CPU):
                if policy == "lower":
                    to = torch.get_autocast_dtype("cpu")
                    return op(
                        *[self._cached_cast(to, a) for a in args],
                        **{k: self._cached_cast(to, v) for k, v in kwargs.items()},
                    )
                if policy == "fp32":
                    return op(
                        *[self._cached_cast(torch.float32, a) for a in args],
                        **{k: self._cached_cast(torch.float32, v) for k, v in kwargs.items()},
                    )
                if policy == "fp32_set_opt_dtype":
                    if args and eligible(args[0]):
                        args = list(args)
                        if not dtype_kwarg_only and dtype_index is not None and len(args) > dtype_index:
                            if args[dtype_index] is None:
                                args[dtype_index] = torch.float32
                        elif kwargs.get("dtype") is None:
                            kwargs["dtype"] = torch.float32
                    return op(*args, **kwargs)
                if policy == "fp32_append_dtype":
                    first = args[0]
                    out_type = torch.float32 if eligible(first) else first.dtype
                    target = getattr(aten.norm, FP32_APPEND_DTYPE[f"norm.{op._overloadname}"])
                    rest = list(args[1:]) or [2]
                    if op._overloadname in ("ScalarOpt_dim", "names_ScalarOpt_dim") and len(rest) == 2:
                        rest.append(kwargs.pop("keepdim", False))  # the dtype overload has no keepdim default
                    return target(first, *rest, **kwargs, dtype=out_type)
                if policy == "promote":
                    lower = torch.get_autocast_dtype("cpu")
                    widest = lower
                    for a in [*args, *kwargs.values()]:
                        for t in a if isinstance(a, (list, tuple)) else [a]:
                            if eligible(t) and (widest == torch.float32 or t.dtype == torch.float32):
                                widest = torch.float32
                    return op(
                        *[self._cached_cast(widest, a) for a in args],
                        **{k: self._cached_cast(widest, v) for k, v in kwargs.items()},
                    )
                raise RuntimeError(f"{op} is unsafe to autocast (banned on CUDA: use the *_with_logits variant)")

        return kernel

    # -- composite ops whose CUDA path differs --------------------------------------------------
    @staticmethod
    def _dropout(input, p, train):
        # at::native::dropout: is_fused_kernel_acceptable (input.is_cuda(), 0 < p < 1, numel > 0)
        # -> native_dropout, whose mask is bool; otherwise _dropout_impl.
        if train and 0 < p < 1 and input.numel() > 0:
            return aten.native_dropout.default(input, p, train)[0]
        if p == 0 or not train or input.numel() == 0:
            return input
        return input.mul(torch.zeros((), dtype=input.dtype, device=input.device))

    @staticmethod
    def _half_to_float(op, input, dim, dtype):
        # at::native::softmax / log_softmax: on CUDA, fp16 input with dtype=float runs the kernel with
        # half_to_float=True (one fp32 output, no fp32 copy of the input).
        if input.dtype == torch.float16 and dtype == torch.float32:
            return op(input, dim, True)
        converted = input.to(dtype) if dtype is not None else input
        return op(converted, dim, False)

    @staticmethod
    def _softmax(input, dim, dtype=None):
        return CudaBehaviour._half_to_float(aten._softmax.default, input, dim, dtype)

    @staticmethod
    def _log_softmax(input, dim, dtype=None):
        return CudaBehaviour._half_to_float(aten._log_softmax.default, input, dim, dtype)

    def sdpa_backend(self, query, key, value, attn_mask, dropout_p, is_causal, enable_gqa) -> str:
        """The backend select_sdp_backend (cuda/sdp_utils.cpp) picks on the target: cudnn, flash, efficient or math.

        Priority cudnn > flash > efficient > math on sm90/sm100 with cuDNN newer than 9.15
        (check_prefer_cudnn_attention: what torch 2.11's CUDA 13 wheels, with cuDNN 9.19, do on an H100 or H200;
        seen there by benchmarks/trace_diff.py, e.g. gpt2 and roberta bf16 training with dropout 0.1 ran cuDNN,
        T5's self-attention with its relative-position bias (a mask that needs a gradient and whose last dim is
        strided) the math path), flash > efficient > math on other targets. Honours
        torch.backends.cuda.enable_{cudnn,flash,mem_efficient,math}_sdp.
        """
        return choose_backend(self.target, query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)

    def _sdpa(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
        backend = self.sdpa_backend(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
        self.sdpa_choices[(backend, str(query.dtype).removeprefix("torch."))] += 1
        if backend == "cudnn":
            bias = _additive_bias(attn_mask, query.dtype, -65504.0)  # convert_boolean_attn_mask_cudnn
            compute_lse = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
            return aten._scaled_dot_product_cudnn_attention.default(
                query, key, value, bias, compute_lse, dropout_p, is_causal, False, scale=scale
            )[0]
        if backend == "flash":
            # attention.cpp: pad the head dim to a multiple of 8, scale from the original head dim.
            head = query.size(-1)
            og_scale = scale if scale is not None else 1.0 / math.sqrt(head)
            pad = (-head) % 8
            q, k, v = (torch.nn.functional.pad(t, (0, pad)) if pad else t for t in (query, key, value))
            out = aten._scaled_dot_product_flash_attention.default(
                q, k, v, dropout_p, is_causal, False, scale=og_scale
            )[0]
            return out[..., :head] if pad else out
        if backend == "efficient":
            bias = _additive_bias(attn_mask, query.dtype, float("-inf"))  # convert_boolean_attn_mask
            if bias is not None:
                # preprocess_mask (attention.cpp): pad_bias<8> unless the bias is aligned, then expand to 4-D.
                aligned = all(bias.stride(i) % 8 == 0 for i in range(bias.dim() - 1)) and bias.stride(-1) == 1
                if not aligned:
                    last = bias.size(-1)
                    bias = torch.nn.functional.pad(bias, (0, 8 - last % 8))[..., :last]
                bias = bias.expand(query.size(0), query.size(1), query.size(2), key.size(2))
            compute_lse = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
            return aten._scaled_dot_product_efficient_attention.default(
                query, key, value, bias, compute_lse, dropout_p, is_causal, scale=scale
            )[0]
        bias = _additive_bias(attn_mask, query.dtype, float("-inf"))  # convert_boolean_attn_mask, before the switch
        return aten._scaled_dot_product_attention_math.default(
            query, key, value, bias, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa
        )[0]


def _additive_bias(mask, dtype: torch.dtype, masked_out: float):
    """The additive bias SDPA makes of a boolean mask before a fused kernel (attention.cpp convert_boolean_attn_mask
    and its cuDNN twin): `where(mask.logical_not(), masked_out, scalar_tensor(0, dtype))`. Both tensors are as large
    as the mask's broadcast shape, however it was expanded: a mask expanded over the batch (transformers' causal
    mask, (1, 1, q, kv) expanded to (B, 1, q, kv)) becomes a (B, 1, q, kv) bool inversion and a (B, 1, q, kv) bias in
    the query's dtype, both alive while the bias is made. A chunk of a chunked prefill on an H200 (llama-1b, P 8192,
    chunks of 512) ran out of memory asking for the bias, 2 bytes x B x 512 x 8256, with the inversion held. A mask
    that is not boolean is the bias as given; None stays None."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.where(mask.logical_not(), masked_out, torch.scalar_tensor(0.0, dtype=dtype, device=mask.device))


GROUPED_MM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _grouped_mm_meta(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """The output of aten::_grouped_mm as CUDA makes it (GroupedBlas.cpp _grouped_mm_cuda), for the fake tensors.

    torch's meta kernel accepts bf16 only (the CUTLASS fast path's check), but the CUDA kernel takes fp32 and fp16
    too (_grouped_mm_validate_inputs) and runs them group by group through cuBLAS (_grouped_mm_fallback) into the
    same output. transformers' MoE experts (grouped_mm, the default in 5.x) cast their input to the fp32 weights'
    dtype (grouped_mm is not autocast), so every Mixtral, Qwen2-MoE or OLMoE step takes that path. The output:
    create_grouped_gemm_output_tensor (GroupedMMUtils.h), rows padded to 16 bytes. Raises RuntimeError as the CUDA
    kernel's checks do.
    """
    for name, mat in (("mat_a", mat_a), ("mat_b", mat_b)):
        if mat.dtype not in GROUPED_MM_DTYPES:
            raise RuntimeError(f"Expected {name} to be Float32, BFloat16 or Float16 matrix, got {mat.dtype}")
        if mat.dim() not in (2, 3):
            raise RuntimeError(f"{name} has to be 2 or 3d")
    if bias is not None:
        raise RuntimeError("Bias not supported yet")
    a_2d, b_2d = mat_a.dim() == 2, mat_b.dim() == 2
    if (offs is not None) != (a_2d or b_2d):
        raise RuntimeError("Have to provide offsets if there is a 2d matrix, or no offset if both matrices are 3d")
    if not (a_2d and b_2d) and mat_a.size(-1) != mat_b.size(-2):
        raise RuntimeError("contraction dimension of mat_a and mat_b must match")
    dtype = out_dtype or mat_a.dtype
    if dtype != mat_a.dtype:
        raise RuntimeError("Grouped gemm output dtype must match `mat_a` dtype")
    if a_2d:
        size = [offs.size(0), mat_a.size(0), mat_b.size(1)] if b_2d else [mat_a.size(0), mat_b.size(-1)]
    else:
        size = [mat_a.size(1), mat_b.size(1)] if b_2d else [mat_a.size(0), mat_a.size(1), mat_b.size(-1)]
    alignment = 16 // dtype.itemsize  # TMA: strides of 1 or a multiple of 16 bytes
    padded = -(-size[-1] // alignment) * alignment
    stride = [padded, 1] if a_2d != b_2d else [size[1] * padded, padded, 1]
    return torch.empty_strided(size, stride, dtype=dtype, device=mat_a.device)


def cuda_optimizers(task) -> None:
    """Replace the task's optimizers (made by TrainTask.start on the CPU: foreach) with what
    make_optimizer builds on CUDA (fused), over the same parameters."""
    from memprobe.workloads.base import make_optimizer

    rebuilt = []
    for opt in task.optimizers:
        params = [p for group in opt.param_groups for p in group["params"]]
        rebuilt.append(make_optimizer(params, task.optimizer_spec, torch.device("cuda")))
    task.optimizers = rebuilt
