"""Classify what went wrong in a training trial, from the exception's type name and message.

Kept free of torch so the rules can be unit-tested and reused by the parent process, which never
imports torch. The order matters: a crash message must win over an OOM-looking one, because a
corrupted CUDA context cannot run another trial whatever else the message says.
"""

from __future__ import annotations

# Outcomes of one trial. Everything except FIT means "this batch does not train".
FIT = "fit"
OOM = "oom"          # out of memory: the allocator or a library could not get memory
LIMIT = "limit"      # a hard limit that is not memory (kernel launch configuration, 32-bit indexing)
CRASH = "crash"      # the CUDA context is unusable or the trial process died: a new process is needed
ERROR = "error"      # a bug or a misconfiguration: retrying at another batch will not help
TIMEOUT = "timeout"  # the trial ran past its time limit and was killed

OUTCOMES = (FIT, OOM, LIMIT, CRASH, ERROR, TIMEOUT)

_CRASH_MARKERS = (
    "illegal memory access",
    "an illegal instruction was encountered",
    "unspecified launch failure",
    "device-side assert",
    "misaligned address",
    "cuda error: launch failure",
    "uncorrectable ecc error",
    "cudaerrorlaunchfailure",
)
_OOM_MARKERS = (
    "out of memory",
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
    "cufft_alloc_failed",
    "failed to allocate",
    "memprobe fake allocator",
)
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


def classify_error(type_name: str, message: str) -> str:
    """Return the outcome (OOM, LIMIT, CRASH or ERROR) for an exception raised by a training step.

    `type_name` is the exception's class name (e.g. "OutOfMemoryError"), `message` its text.
    Never raises.
    """
    text = (message or "").lower()
    if any(marker in text for marker in _CRASH_MARKERS):
        return CRASH
    if type_name in ("OutOfMemoryError", "MemoryError") or any(m in text for m in _OOM_MARKERS):
        return OOM
    if any(marker in text for marker in _LIMIT_MARKERS):
        return LIMIT
    return ERROR
