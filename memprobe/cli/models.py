"""CLI helpers for naming models: registry names and models given by name, and the options that shape the latter."""

from __future__ import annotations

import click

from memprobe.core.registry import RegistryError, Workload


def resolve_workloads(
    registry: dict[str, Workload],
    model: str,
    input_size: str | None,
    optimizer: str | None,
    task: str | None,
    seq_len: int | None,
) -> list[Workload]:
    """Registry names and models given by name (timm:, hf:, hf-config:, FILE.py:FUNC), resolved; one-line errors."""
    from memprobe.workloads.custom import CustomOptions, parse_input_size, select_models

    try:
        size = parse_input_size(input_size) if input_size else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--input-size") from None
    try:
        return select_models(registry, model, CustomOptions(size, optimizer, task, seq_len))
    except RegistryError as exc:
        raise click.ClickException(str(exc)) from None


def model_options(command):
    """The options that shape a model given by name rather than by a registry entry."""
    from memprobe.cli.checks import MAX_SEQ_LEN
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
            click.option(
                "--seq-len",
                type=click.IntRange(2, MAX_SEQ_LEN),
                help="hf: models: the sequence length (default: the config's maximum, at most 1024); LLM "
                "registry workloads (llama-*): the sequence length of the batch search.",
            ),
        ]
    ):
        command = option(command)
    return command
