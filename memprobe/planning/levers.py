"""The lever settings a workload has: precision; checkpointing and LoRA for LLMs; the optimizer of a model given by name."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from memprobe.core.estimates.plan import Levers, PlanError
from memprobe.core.workload.registry import OPTIMIZERS, Workload
from memprobe.core.workload.variants import LLM_FAMILIES, VariantError, VariantRequest, apply_variant
from memprobe.workloads.custom import DEFAULT_OPTIMIZERS

# Families whose optimizer is chosen at resolve time (workloads/custom.py); a registry entry keeps its own.
OPTIMIZER_FAMILIES = ("timm", "hf", "module")
LORA_PRECISIONS = ("fp16", "bf16")  # LoRA keeps the frozen base in bf16: mixed precision only (variants.py)


@dataclass(frozen=True)
class Setting:
    """One lever setting and the workload variant that trains it (its name says the levers)."""

    levers: Levers
    workload: Workload


def settings(
    workload: Workload,
    precisions: Sequence[str],
    seq_len: int | None = None,
    lora: int | None = None,
    optimizers: Sequence[str] = (),
) -> list[Setting]:
    """Every lever combination that applies to `workload`: each precision; for LLM families checkpointing off and
    on, and LoRA of rank `lora` (fp16/bf16 only) when given; for models given by name each of `optimizers`
    (with memprobe's default settings of each, as `--optimizer` gives them). Raises PlanError for a lever the workload lacks."""
    llm = workload.family in LLM_FAMILIES
    if not llm and (lora or seq_len is not None):
        what = "--lora" if lora else "--seq-len"
        raise PlanError(
            f"{what} applies to the LLM workloads (family {', '.join(LLM_FAMILIES)}); "
            f"{workload.name} is {workload.family}"
        )
    if optimizers and workload.family not in OPTIMIZER_FAMILIES:
        raise PlanError(
            f"--optimizer chooses the optimizer of a model given by name (timm:, hf:, FILE.py:FUNC); "
            f"{workload.name} trains with its registry optimizer"
        )
    unknown = [o for o in optimizers if o not in OPTIMIZERS]
    if unknown:
        raise PlanError(f"unknown optimizer(s) {', '.join(unknown)} (known: {', '.join(OPTIMIZERS)})")
    out: list[Setting] = []
    choices: list[str | None] = [*optimizers] or [None]  # None: the registry's optimizer
    for optimizer in choices:
        base = workload if optimizer is None else replace(workload, optimizer=dict(DEFAULT_OPTIMIZERS[optimizer]))
        for precision in precisions:
            for ckpt in (False, True) if llm else (False,):
                for rank in ((None, lora) if lora and precision in LORA_PRECISIONS else (None,)) if llm else (None,):
                    request = VariantRequest(seq_len=seq_len, checkpointing=ckpt, lora=rank)
                    try:
                        variant = apply_variant(base, request, [precision])
                    except VariantError as exc:
                        raise PlanError(str(exc)) from None
                    out.append(Setting(Levers(precision, ckpt, rank, optimizer), variant))
    return out
