"""The facts the CUDA emulation copied from PyTorch's C++, checked against the installed torch (headers and run time).

predict emulates CUDA on the CPU with facts taken from PyTorch's C++ sources: the CUDA autocast op lists, the
caching allocator's constants, the scaled-dot-product-attention backend rules and kernel workspaces. A torch
upgrade that changed one would give wrong numbers, not an error; these tests name what changed. They read the
headers shipped in the torch wheel (torch/include/...; `--torch-include DIR` reads another wheel's) and ask torch at
run time. A header absent from the wheel skips its test; present and different, the test fails.

Not checkable from a wheel (defined in .cpp/.cu files that are not shipped), so not checked here:
kLargeBuffer (20 MiB, CUDACachingAllocator.cpp), the allocator's best-fit and split rules, the cuBLAS workspace size
(CublasHandlePool.cpp), the flash/efficient dtype and alignment rules of sdp_utils.cpp (beyond the head-dim limit),
flash attention's head-dim padding to 8 (attention.cpp), the flash backward workspaces (flash_api.cpp), and
cudnn_convolution(_transpose)'s lower-precision policy (autocast_mode.cpp; their AutocastCUDA registration is checked).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from memprobe.predict import allocator, autocast_policy, sdpa_choice  # noqa: E402

# Emulation entries that some torch release in the claimed range (2.11-2.13) lacks, read from the headers of the
# 2.11.0 and 2.13.0 wheels. Any other difference between the emulation's lists and the header fails.
AUTOCAST_BY_VERSION = {
    "rms_norm": "fp32 in 2.13, not autocast in 2.11",
    "prod.dim_Dimname": "2.11 only",
    "softmax.Dimname": "2.11 only",
    "log_softmax.Dimname": "2.11 only",
    "cumprod.dimname": "2.11 only",
    "cumsum.dimname": "2.11 only",
    "sum.dim_DimnameList": "2.11 only",
    "norm.names_ScalarOpt_dim": "2.11 only",
}
# Registered for CUDA by autocast_mode.cpp, not by the header's lists.
CPP_ONLY_LOWER = {"cudnn_convolution", "cudnn_convolution_transpose"}
# Registered for AutocastCUDA only by builds with cuDNN (aten/src/ATen/cudnn/AutocastRNN.cpp; seen on torch
# 2.11+cu130). The emulation has no policy for it: no registry workload has an RNN, and on a CPU build an RNN on
# fake tensors takes the native path, whose matmuls autocast by their own policy.
CUDNN_BUILD_ONLY = {"_cudnn_rnn"}
POLICY_MACROS = {
    "lower": "AT_FORALL_LOWER_PRECISION_FP",
    "fp32": "AT_FORALL_FP32",
    "fp32_set_opt_dtype": "AT_FORALL_FP32_SET_OPT_DTYPE",
    "fp32_append_dtype": "AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE",
    "promote": "AT_FORALL_PROMOTE",
}


@pytest.fixture(scope="module")
def include(request) -> Path:
    given = request.config.getoption("--torch-include")
    return Path(given) if given else Path(os.path.dirname(torch.__file__)) / "include"


def _source(include: Path) -> str:
    """Whose headers: the installed torch's, or the folder given with --torch-include."""
    installed = Path(os.path.dirname(torch.__file__)) / "include"
    return f"torch {torch.__version__}" if include == installed else f"the headers in {include}"


def _header(include: Path, *names: str) -> str:
    """The first of `names` present under `include`; skips the test when none is (a wheel without headers)."""
    for name in names:
        if (include / name).is_file():
            return (include / name).read_text()
    pytest.skip(f"none of {', '.join(names)} under {include}")


def macro_entries(text: str, name: str) -> set[str]:
    """The ops of an AT_FORALL_* list macro: `_(op)` / `_(op, overload)` as "op" / "op.overload", or for the
    redispatch list its quoted "op.overload" names. Raises LookupError when the macro is not there."""
    m = re.search(r"#define " + name + r"\(_\)\s*\\\n((?:.*\\\n)*.*\n)", text)
    if m is None:
        raise LookupError(f"{name} not found")
    body = m.group(1)
    if "ADD_NS" in body:
        return set(re.findall(r'"([\w.]+)"', body))
    return {".".join(p.strip() for p in e.split(",")) for e in re.findall(r"\b_\(([^()]*)\)", body)}


def _emulated(policy: str) -> set[str]:
    return {name for name, p in autocast_policy.policies().items() if p == policy}


@pytest.mark.parametrize("policy", sorted(POLICY_MACROS))
def test_autocast_lists_match_the_header(include, policy):
    text = _header(include, "ATen/autocast_mode.h")
    try:
        header = macro_entries(text, POLICY_MACROS[policy])
    except LookupError as exc:
        pytest.fail(f"autocast_mode.h changed shape: {exc}")
    emulated = _emulated(policy) - (CPP_ONLY_LOWER if policy == "lower" else set())
    new = sorted(header - emulated)
    gone = sorted(emulated - header - set(AUTOCAST_BY_VERSION))
    assert not new and not gone, (
        f"CUDA autocast '{policy}' list of {_source(include)} differs from the "
        f"emulation's (autocast_policy.py): in the header only {new}, in the emulation only {gone}"
    )


def test_every_cuda_autocast_op_has_the_emulations_policy():
    """At run time: the ops this torch registers for AutocastCUDA are exactly those the emulation has a policy for
    (less the entries of other releases)."""
    registered = torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA")
    # aten only: libraries loaded earlier in the process (torchvision's nms, roi_align...) register their own
    cuda_ops = {n.removeprefix("aten::") for n in registered if n.startswith("aten::")}
    table = set(autocast_policy.policies())
    unknown = sorted(cuda_ops - table - CUDNN_BUILD_ONLY)
    gone = sorted(table - cuda_ops - set(AUTOCAST_BY_VERSION))
    assert not unknown and not gone, (
        f"torch {torch.__version__} autocasts on CUDA {unknown} with no policy in the "
        f"emulation; the emulation lists {gone}, which it does not autocast"
    )


def test_autocast_by_version_lists_only_emulated_ops():
    assert set(AUTOCAST_BY_VERSION) <= set(autocast_policy.policies())


def _fake_cuda(mode, *shapes, dtype=torch.float32):
    from torch._subclasses.fake_tensor import FakeTensor

    return [FakeTensor(mode, torch.empty(s, device="meta", dtype=dtype), torch.device("cuda")) for s in shapes]


CASES = {  # op -> (call on tensors, input dtypes): one op per policy
    "mm (lower)": (lambda a, b: torch.mm(a, b), (torch.float32, torch.float32)),
    "exp (fp32)": (lambda a: torch.exp(a), (torch.float16,)),
    "softmax (fp32_set_opt_dtype)": (lambda a: torch.softmax(a, -1), (torch.float16,)),
    "norm (fp32_append_dtype)": (lambda a: torch.norm(a), (torch.float16,)),
    "addcmul (promote)": (lambda a, b, c: torch.addcmul(a, b, c), (torch.float16, torch.float32, torch.float16)),
    "binary_cross_entropy (banned)": (
        lambda a, b: torch.nn.functional.binary_cross_entropy(a, b),
        (torch.float16, torch.float16),
    ),
}


def _run(fn, tensors):
    try:
        return fn(*tensors).dtype
    except RuntimeError as exc:
        return "refused" if "unsafe to autocast" in str(exc) else f"error: {str(exc)[:200]}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_autocast_at_run_time_matches_the_emulation(case):
    """torch's own CUDA autocast kernels, run on fake CUDA tensors (no GPU needed), give the output dtype the
    emulation gives on its CPU-device fakes."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from memprobe.predict.session import fake_session

    fn, dtypes = CASES[case]
    mode = FakeTensorMode()
    tensors = [_fake_cuda(mode, (4, 4), dtype=d)[0] for d in dtypes]
    before = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)  # torch.autocast("cuda") refuses a build without CUDA
    torch.set_autocast_dtype("cuda", torch.float16)
    try:
        with mode:
            real = _run(fn, tensors)
    finally:
        torch.set_autocast_enabled("cuda", before[0])
        torch.set_autocast_dtype("cuda", before[1])
        torch.clear_autocast_cache()
    with fake_session() as (_, behaviour), behaviour.autocast(torch.float16):
        emulated = _run(fn, [torch.empty(4, 4, dtype=d) for d in dtypes])
    assert real == emulated, (
        f"{case}: CUDA autocast of torch {torch.__version__} gives {real}, the emulation {emulated}"
    )
    assert not str(real).startswith("error"), real


ALLOCATOR_CONSTANTS = {
    "kMinBlockSize": allocator.K_MIN_BLOCK_SIZE,
    "kSmallSize": allocator.K_SMALL_SIZE,
    "kSmallBuffer": allocator.K_SMALL_BUFFER,
    "kMinLargeAlloc": allocator.K_MIN_LARGE_ALLOC,
    "kRoundLarge": allocator.K_ROUND_LARGE,
}
# kLargeBuffer (allocator.K_LARGE_BUFFER) is defined in CUDACachingAllocator.cpp: not in the wheel.


def test_allocator_constants_match_the_header(include):
    texts = [
        (include / n).read_text()
        for n in ("c10/core/AllocatorConfig.h", "c10/cuda/CUDACachingAllocator.h", "c10/cuda/CUDAAllocatorConfig.h")
        if (include / n).is_file()
    ]
    if not texts:
        pytest.skip(f"no caching allocator headers under {include}")
    found = {}
    for text in texts:
        for name, value in re.findall(r"constexpr size_t (k\w+) =\s*([\d\s*]+);", text):
            found.setdefault(name, math.prod(int(f) for f in value.split("*")))
    missing = sorted(set(ALLOCATOR_CONSTANTS) - set(found))
    changed = {n: (found[n], v) for n, v in ALLOCATOR_CONSTANTS.items() if n in found and found[n] != v}
    assert not missing and not changed, (
        f"caching allocator constants of {_source(include)}: not found "
        f"{missing}, changed (header, allocator.py) {changed}"
    )


def test_flash_attention_head_dim_limit_matches_the_header(include):
    text = _header(include, "ATen/native/transformers/cuda/flash_attn/static_switch.h")
    m = re.search(r"#define HEADDIM_SWITCH\(HEADDIM, \.\.\.\)((?:.*\\\n)*.*\n)", text)
    assert m, "static_switch.h has no HEADDIM_SWITCH"
    largest = max(int(d) for d in re.findall(r"HEADDIM <= (\d+)", m.group(1)))
    assert largest == sdpa_choice.FLASH_MAX_HEAD_DIM, (
        f"flash attention of {_source(include)} has kernels up to head dim {largest}; the emulation "
        f"(sdpa_choice.FLASH_MAX_HEAD_DIM) says {sdpa_choice.FLASH_MAX_HEAD_DIM}"
    )
    switch = re.search(r"#define FP16_SWITCH\(COND, \.\.\.\)((?:.*\\\n)*.*\n)", text)
    assert switch and {"cutlass::half_t", "cutlass::bfloat16_t"} == set(re.findall(r"cutlass::\w+", switch.group(1))), (
        "flash attention's kernels are no longer fp16 and bf16 only (fakecuda.sdpa_backend: flash for half types)"
    )


def test_efficient_attention_computes_delta_only_for_half(include):
    """workspaces.py: the fp32 memory-efficient backward allocates grad_out * out and its sum itself."""
    text = _header(include, "ATen/native/transformers/cuda/mem_eff_attention/kernel_backward.h")
    m = re.search(r"kKernelComputesDelta\s*=\s*([^;]+);", text)
    assert m, "kernel_backward.h has no kKernelComputesDelta"
    rule = " ".join(m.group(1).split())
    assert rule == "kIsHalf && (kOutputInRF || ArchTag::kMinComputeCapability != 70)", (
        f"memory-efficient attention backward of {_source(include)} computes delta when {rule!r}; "
        "workspaces.py assumes: for half types only (sm80+)"
    )


def test_sdpa_priority_order():
    """sdpa_choice.choose_backend tries flash, then efficient, then math, the default order, except where CUDA
    moves cuDNN to the front at its first call (check_prefer_cudnn_attention: sm90/sm10x with cuDNN > 9.15)."""
    order = [torch._C._SDPBackend(i).name for i in torch._C._get_sdp_priority_order()]
    known = [n for n in order if n in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH", "CUDNN_ATTENTION")]
    assert known == ["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH", "CUDNN_ATTENTION"], (
        f"torch {torch.__version__} picks attention backends in the order {order} by default; the emulation "
        "assumes flash, efficient, math (cuDNN last, or first where CUDA prefers it)"
    )
