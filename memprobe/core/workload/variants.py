"""Workload variants asked for on the command line: sequence length, search axis, checkpointing, LoRA.

No torch here. A variant is a registry workload with changed params and a name that says what was
changed (so its result file, its report rows and its predictions are never mixed with the entry's).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from memprobe.core.workload.registry import Workload

# Families whose builder understands seq_len, axis, batch, checkpointing and lora (workloads/llm.py).
LLM_FAMILIES = ("llama-causal-lm",)
SEARCHES = ("batch", "seq-len")


class VariantError(ValueError):
    """A variant that the workload or the precisions cannot have; the message is one line for the user."""


@dataclass(frozen=True)
class VariantRequest:
    """What to change. search "seq-len" searches the longest sequence at `batch` sequences per step."""

    search: str = "batch"
    batch: int = 1
    seq_len: int | None = None
    checkpointing: bool = False
    lora: int | None = None

    @property
    def is_default(self) -> bool:
        return self == VariantRequest(batch=self.batch) and self.search == "batch"

    def suffix(self) -> str:
        """What the variant's name appends to the workload's, e.g. '+ckpt+lora16+maxseq@b1'."""
        parts = []
        if self.seq_len is not None:
            parts.append(f"seq{self.seq_len}")
        if self.checkpointing:
            parts.append("ckpt")
        if self.lora:
            parts.append(f"lora{self.lora}")
        if self.search == "seq-len":
            parts.append(f"maxseq@b{self.batch}")
        return "".join(f"+{p}" for p in parts)


def parse_lora(text: str | None) -> int | None:
    """The LoRA rank from '--lora 16' or '--lora r=16'; None for no LoRA. Raises VariantError otherwise."""
    if text is None:
        return None
    value = text.strip().lower()
    if value.startswith("r="):
        value = value[2:]
    if not value.isdigit() or int(value) < 1:
        raise VariantError(f"--lora expects a rank such as 16 or r=16, got '{text}'")
    return int(value)


def apply_variant(
    workload: Workload, request: VariantRequest, precisions: list[str] | tuple[str, ...] = ()
) -> Workload:
    """The workload with the request's params and a name that says so; the workload itself when the
    request changes nothing.

    Raises VariantError when the workload's family has no such settings (only LLM workloads have
    them), for a sequence length or batch below 1, and for LoRA in fp32/tf32 (the frozen base
    weights are stored in bf16, which only a mixed-precision step can multiply with).
    """
    if request.search not in SEARCHES:
        raise VariantError(f"--search must be one of {', '.join(SEARCHES)}, got '{request.search}'")
    if request.is_default:
        return workload
    if workload.family not in LLM_FAMILIES:
        raise VariantError(
            f"--search seq-len, --seq-len, --checkpointing and --lora apply to the LLM workloads "
            f"(family {', '.join(LLM_FAMILIES)}); {workload.name} is {workload.family}"
        )
    if request.seq_len is not None and request.seq_len < 1:
        raise VariantError(f"--seq-len must be at least 1, got {request.seq_len}")
    if request.batch < 1:
        raise VariantError(f"--batch must be at least 1, got {request.batch}")
    if request.search == "seq-len" and request.seq_len is not None:
        raise VariantError("--search seq-len finds the sequence length itself: drop --seq-len")
    if request.lora and any(p in ("fp32", "tf32") for p in precisions):
        raise VariantError(
            "--lora stores the frozen base weights in bf16, so it trains in bf16 or fp16 only: use --precision bf16"
        )
    params = dict(workload.params)
    if request.seq_len is not None:
        params["seq_len"] = request.seq_len
    if request.checkpointing:
        params["checkpointing"] = True
    if request.lora:
        params["lora"] = request.lora
    if request.search == "seq-len":
        params.update(axis="seq_len", batch=request.batch)
        params.pop("seq_len", None)
    description = workload.description + _describe(request)
    return replace(workload, name=workload.name + request.suffix(), params=params, description=description)


def _describe(request: VariantRequest) -> str:
    notes = []
    if request.seq_len is not None:
        notes.append(f"at seq {request.seq_len}")
    if request.checkpointing:
        notes.append("with activation checkpointing")
    if request.lora:
        notes.append(f"LoRA r={request.lora} (frozen bf16 base, fp32 adapters)")
    if request.search == "seq-len":
        notes.append(f"searching the sequence length at batch {request.batch} (n = tokens per sequence)")
    return "; " + ", ".join(notes)


def search_axis(params: Mapping[str, object] | None) -> str:
    """'seq_len' when a workload with these params searches the sequence length, else 'batch'."""
    return str((params or {}).get("axis", "batch"))


def axis_name(params: Mapping[str, object] | None) -> str:
    """What a result's n counts, for people (from its workload's params): "seq len" for a sequence-length search,
    else "batch"."""
    return "seq len" if search_axis(params) == "seq_len" else "batch"


def base_name(name: str) -> str:
    """The registry name a variant was made from ('llama-1b+ckpt' -> 'llama-1b'); other names unchanged."""
    return name.split("+", 1)[0]
