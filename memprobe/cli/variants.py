"""The command-line options that make an LLM workload a variant (core/variants.py), shared by scan and predict."""

from __future__ import annotations

from typing import Callable

import click

from memprobe.cli.options import number_option
from memprobe.core import option_bounds as bounds


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
        number_option(
            bounds.FRONTIER_BUDGET,
            "With --search frontier: seconds the frontier may take per precision; points not reached "
            "are recorded as skipped (default: no limit).",
            metavar="SECONDS",
        ),
        click.option(
            "--checkpointing", is_flag=True, help="LLM workloads: activation checkpointing per decoder layer."
        ),
        click.option(
            "--lora", help="LLM workloads: LoRA adapters of this rank (16 or r=16) on a frozen bf16 base (peft)."
        ),
        number_option(
            bounds.PROMPT_LEN,
            "--mode generate: tokens in each random prompt (default 2048, or what the model's positions leave).",
        ),
        number_option(bounds.NEW_TOKENS, "--mode generate: new tokens each sequence generates (default 128)."),
        number_option(
            bounds.PREFILL_CHUNK,
            "--mode generate: prefill the prompt this many tokens at a time through the KV cache, as serving "
            "engines do (default: the whole prompt in one forward).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command
