"""Emulating a smaller card on a bigger one: the arithmetic of `scan --memory-cap`. No torch.

A card of C bytes gives PyTorch's allocator C minus what the CUDA context, loaded kernels and
library handles hold outside it. That outside part is measured on the real card (total - free -
PyTorch's reserved bytes), not guessed, and re-measured before every trial because CUDA loads
kernels lazily as new operators run; the allocator is then capped with
torch.cuda.set_per_process_memory_fraction(limit / total).
"""

from __future__ import annotations

from dataclasses import dataclass


class MemoryCapError(ValueError):
    """The cap cannot be emulated on this card (larger than it, or smaller than its fixed overhead)."""


@dataclass(frozen=True)
class CapPlan:
    cap_bytes: int  # the emulated card's memory, as its driver would report the total
    outside_bytes: int  # held outside PyTorch's allocator right now (context, kernels, libraries)
    limit_bytes: int  # what PyTorch's allocator may reserve: cap - outside
    fraction: float  # limit / the real card's total, for set_per_process_memory_fraction


def plan_cap(cap_bytes: int, total_bytes: int, free_bytes: int, reserved_bytes: int) -> CapPlan:
    """The allocator limit that makes this card behave like one of `cap_bytes`.

    total/free come from cudaMemGetInfo, reserved from PyTorch. Raises MemoryCapError when the cap is
    not below the card's total or leaves nothing after the memory held outside the allocator.
    """
    if cap_bytes >= total_bytes:
        raise MemoryCapError(
            f"a cap of {cap_bytes / 2**30:.2f} GiB is not below this card's "
            f"{total_bytes / 2**30:.2f} GiB: scan without --memory-cap"
        )
    outside = max(0, total_bytes - free_bytes - reserved_bytes)
    limit = cap_bytes - outside
    if limit <= 0:
        raise MemoryCapError(
            f"a cap of {cap_bytes / 2**30:.2f} GiB leaves nothing once the "
            f"{outside / 2**30:.2f} GiB held outside PyTorch is counted"
        )
    return CapPlan(cap_bytes, outside, limit, limit / total_bytes)


EMULATED_MARK = "[emulated "


def emulated_name(gpu_name: str, cap_bytes: int) -> str:
    """The name results carry for an emulated card, so reports never take it for the real one."""
    return f"{gpu_name} {EMULATED_MARK}{cap_bytes / 2**30:g} GiB cap]"


def is_emulated(gpu_name: str) -> bool:
    return EMULATED_MARK in gpu_name
