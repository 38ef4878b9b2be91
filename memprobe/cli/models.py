"""The options that shape a model given by name (timm:, hf:, FILE.py:FUNC) rather than by a registry entry."""

from __future__ import annotations

from typing import Any

import click

from memprobe.request import ModelRequest


def model_options(command):
    """The options that shape a model given by name rather than by a registry entry."""
    from memprobe.cli.options import number_option
    from memprobe.core import option_bounds as bounds
    from memprobe.workloads.custom import HF_TASKS

    for option in reversed(
        [
            click.option("--input-size", help="timm: models: input C,H,W (default: the model's pretrained_cfg size)."),
            click.option(
                "--optimizer",
                type=click.Choice(["sgd", "adam", "adamw"]),
                help="Models given by name: the optimizer (default: sgd momentum for timm:, adamw otherwise).",
            ),
            click.option("--task", type=click.Choice(HF_TASKS), help="hf: models: the task head (default: causal-lm)."),
            number_option(
                bounds.SEQ_LEN,
                "hf: models: the sequence length (default: the config's maximum, at most 1024); LLM "
                "registry workloads (llama-*): the sequence length of the batch search.",
            ),
        ]
    ):
        command = option(command)
    return command


def model_request(params: dict[str, Any], batch: int = 1) -> ModelRequest:
    """The ModelRequest of a command's parsed options (click's parameter names: --model and the options above, the
    LLM variant's --search, --checkpointing and --lora); `batch`: the batch a --search seq-len runs at."""
    return ModelRequest(
        params["model"],
        params["models_file"],
        params["input_size"],
        params["optimizer"],
        params["task"],
        params["seq_len"],
        params["search"],
        batch,
        params["checkpointing"],
        params["lora"],
        params.get("prompt_len"),
        params.get("new_tokens"),
        params.get("prefill_chunk"),
    )
