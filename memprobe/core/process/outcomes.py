"""Classify what went wrong in a training trial, from the exception's type name and message.

Kept free of torch so the rules can be unit-tested and reused by the parent process, which never
imports torch. The order matters: a crash message must win over an OOM-looking one, because a
corrupted CUDA context cannot run another trial whatever else the message says.
"""

from __future__ import annotations

import re

# Outcomes of one trial. Everything except FIT means "this batch does not train".
FIT = "fit"
OOM = "oom"  # out of memory: the allocator or a library could not get memory
LIMIT = "limit"  # a hard limit that is not memory (kernel launch configuration, 32-bit indexing)
CRASH = "crash"  # the CUDA context is unusable or the trial process died: a new process is needed
ERROR = "error"  # a bug or a misconfiguration: retrying at another batch will not help
TIMEOUT = "timeout"  # the trial ran past its time limit and was killed
# The user's model code (a module:function build, or a name that cannot be resolved) raised something
# that is not out of memory: the user must fix it; the message carries their traceback.
USER_ERROR = "user-error"
# The batch is too small for the model to train at all (batch norm in training needs more than one value per
# channel: a 1x1 feature map at batch 1, as in ResNeSt's split attention or LeViT's head). A larger batch can fit.
TOO_SMALL = "too-small"

OUTCOMES = (FIT, OOM, LIMIT, CRASH, ERROR, TIMEOUT, USER_ERROR, TOO_SMALL)
STOPPING = (ERROR, USER_ERROR)  # outcomes that end a search: another batch size will not help

_CRASH_MARKERS = (
    "illegal memory access",
    "an illegal instruction was encountered",
    "unspecified launch failure",
    # "device-side assert triggered", not just "device-side assert": every CUDA error message ends with
    # "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions", an out-of-memory one included
    "device-side assert triggered",
    "misaligned address",
    "cuda error: launch failure",
    "uncorrectable ecc error",
    "cudaerrorlaunchfailure",
)
_BOILERPLATE_HINTS = (
    "torch_use_cuda_dsa",
    "cuda_launch_blocking",
    "cuda kernel errors might be asynchronously reported",
)
_OOM_MARKERS = (
    "out of memory",
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
    "cufft_alloc_failed",
    "failed to allocate",
    "memprobe fake allocator",
)
_TOO_SMALL_MARKERS = ("expected more than 1 value per channel when training",)
_LIMIT_MARKERS = (
    "invalid configuration argument",
    "too many resources requested for launch",
    "cantuse32bitindexmath",
    "canuse32bitindexmath",
    "integer out of range",
    "numel needs to be smaller than int32",
    "input tensor must fit into 32-bit index math",
    "cublas_status_not_supported",
    "cublas_status_invalid_value",
)


# cuDNN and cuBLAS report an internal allocation that failed as a generic internal error. Counted as
# out of memory only when the caching allocator held nearly all of the memory at the time (seen on
# the H100: NasNet-Large fp32 at batch 80, CUDNN_STATUS_INTERNAL_ERROR with 78.4 of 79.2 GiB reserved).
_STARVED_MARKERS = (
    "cudnn_status_internal_error",
    "cublas_status_internal_error",
)
STARVED_SHARE = 0.9  # reserved share of the capacity from which an internal library error counts as OOM


def classify_error(type_name: str, message: str, reserved_share: float | None = None) -> str:
    """Return the outcome (OOM, LIMIT, CRASH, TOO_SMALL or ERROR) for an exception raised by a training step.

    `type_name` is the exception's class name (e.g. "OutOfMemoryError"), `message` its text,
    `reserved_share` the peak reserved memory over the capacity when known (a cuDNN or cuBLAS
    internal error at >= STARVED_SHARE is an allocation that failed). Never raises.
    """
    # torch's CUDA errors (AcceleratorError) end with hints that name "device-side assertions" whatever the
    # error was; without them, "CUDA error: out of memory" reads as the OOM it is, wherever it was raised.
    text = "\n".join(
        line for line in (message or "").lower().splitlines() if not any(hint in line for hint in _BOILERPLATE_HINTS)
    )
    if any(marker in text for marker in _CRASH_MARKERS):
        return CRASH
    if type_name in ("OutOfMemoryError", "MemoryError") or any(m in text for m in _OOM_MARKERS):
        return OOM
    if any(marker in text for marker in _LIMIT_MARKERS):
        return LIMIT
    if any(marker in text for marker in _TOO_SMALL_MARKERS):
        return TOO_SMALL
    if reserved_share is not None and reserved_share >= STARVED_SHARE and any(m in text for m in _STARVED_MARKERS):
        return OOM
    return ERROR


def with_memory_state(
    outcome: str, type_name: str, message: str, peak_reserved: int | None, capacity_bytes: int | None
) -> tuple[str, str]:
    """Re-classify an ERROR now that the peak reserved memory is known: (outcome, note), where the
    note ("" when nothing changed) is for the trial's message. Never raises."""
    if outcome != ERROR or not capacity_bytes or peak_reserved is None:
        return outcome, ""
    share = peak_reserved / capacity_bytes
    changed = classify_error(type_name, message, reserved_share=share)
    if changed == outcome:
        return outcome, ""
    return changed, f" [counted as out of memory: {share:.0%} of the capacity was reserved]"


_SIZE = r"([\d.]+) (GiB|MiB|KiB|bytes|B)\b"
_UNITS = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10, "bytes": 1, "B": 1}
# The figures of PyTorch's CUDA out-of-memory message ("Tried to allocate 27.60 GiB. GPU 0 has a total capacity of
# 139.81 GiB of which 12.19 GiB is free. Including non-PyTorch memory, this process has 127.61 GiB memory in use. Of
# the allocated memory 125.02 GiB is allocated by PyTorch, and 1.84 GiB is reserved by PyTorch but unallocated."),
# each read on its own: a message cut short keeps the figures before the cut.
_OOM_FIGURES = {
    "requested_bytes": rf"Tried to allocate {_SIZE}",
    "total_bytes": rf"total capacity of {_SIZE}",
    "free_bytes": rf"of which {_SIZE} is free",
    "process_in_use_bytes": rf"this process has {_SIZE} memory in use",
    "allocated_bytes": rf"{_SIZE} is allocated by PyTorch",
    "reserved_unallocated_bytes": rf"{_SIZE} is reserved by PyTorch but unallocated",
}


def oom_numbers(message: str) -> dict[str, int]:
    """The byte figures of PyTorch's CUDA out-of-memory message, by name (requested_bytes, total_bytes,
    free_bytes, process_in_use_bytes, allocated_bytes, reserved_unallocated_bytes): those the message
    states, {} when it states none (another error, another allocator). Never raises."""
    numbers = {}
    for name, pattern in _OOM_FIGURES.items():
        found = re.search(pattern, message or "")
        if found:
            numbers[name] = round(float(found.group(1)) * _UNITS[found.group(2)])
    return numbers


def message_of(exc: BaseException) -> str:
    """str(exc); where that raises itself (an exception class whose __str__ is broken, in a model's code), a line
    saying so. Never raises: the message of a failure must not become a failure of its own."""
    try:
        return str(exc)
    except Exception as inner:  # noqa: BLE001 - whatever a broken __str__ raises
        return f"(its message could not be read: its __str__ raised {type(inner).__name__})"


def described(exc: BaseException) -> str:
    """'TypeName: message' (message_of: the type name is kept whatever its message does); the type name alone for
    an empty message."""
    text = message_of(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
