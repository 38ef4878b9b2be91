"""The command-line options that make an LLM workload a variant (variants.py), shared by scan and predict."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import click

from memprobe.core.registry import Workload
from memprobe.core.variants import VariantError, VariantRequest, apply_variant, parse_lora


def variant_options(command: Callable) -> Callable:
    """The options that turn an LLM workload into a variant (variants.py), shared by scan and predict.

    --seq-len comes with the model options (cli_models.model_options) and serves both."""
    options = [
        click.option(
            "--search",
            type=click.Choice(["batch", "seq-len", "frontier"]),
            default="batch",
            show_default=True,
            help="What to find the largest of: the batch, or (LLM workloads) the sequence length at --batch, "
            "or (LLM and hf: workloads) the frontier: the max batch at lengths 512, 1024, ... and the "
            "max length at batch 1, 2, 4, ..., each point proven like B.",
        ),
        click.option(
            "--frontier-budget",
            type=click.FloatRange(min=0, min_open=True),
            metavar="SECONDS",
            help="With --search frontier: seconds the frontier may take per precision; points not reached "
            "are recorded as skipped (default: no limit).",
        ),
        click.option(
            "--checkpointing", is_flag=True, help="LLM workloads: activation checkpointing per decoder layer."
        ),
        click.option(
            "--lora", help="LLM workloads: LoRA adapters of this rank (16 or r=16) on a frozen bf16 base (peft)."
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def variants(
    workloads: list[Workload],
    precision: str,
    search: str,
    batch: int,
    seq_len: int | None,
    checkpointing: bool,
    lora: str | None,
) -> list[Workload]:
    """The workloads as the options ask. Raises click.UsageError for a variant they cannot have."""
    from memprobe.workloads.custom import CUSTOM_FAMILIES

    try:
        request = VariantRequest(search, batch, seq_len, checkpointing, parse_lora(lora))
        # a model given by name took --seq-len when it was resolved (custom.resolve): not a variant setting
        named = replace(request, seq_len=None)
        precisions = [p.strip() for p in precision.split(",")]
        return [apply_variant(w, named if w.family in CUSTOM_FAMILIES else request, precisions) for w in workloads]
    except VariantError as exc:
        raise click.UsageError(str(exc)) from None


def split_batches(search: str, batches: list[int]) -> tuple[int, list[int]]:
    """scan's --batch: (the batch a --search seq-len runs at, the batches to time). With the batch search
    it lists batches to time; with seq-len it is the one batch (default 1). Raises click.BadParameter
    for several batches with seq-len."""
    if search != "seq-len":
        return 1, batches
    if len(batches) > 1:
        raise click.BadParameter("with --search seq-len give one batch to search the length at", param_hint="--batch")
    return (batches or [1])[0], []
