"""`memprobe plan`: which micro-batch and accumulation to run per memory lever on a card (memprobe.planning.build)."""

from __future__ import annotations

import click

from memprobe.cli import checks
from memprobe.cli.app import main
from memprobe.cli.helpers import card_name_error, progress_lines, traces_without_gpus
from memprobe.cli.model_code import model_code
from memprobe.cli.options import (
    CommaList,
    format_option,
    joined,
    model_option,
    models_file_option,
    number_option,
    precision_option,
    request_error,
)
from memprobe.cli.width import wide_option
from memprobe.core import option_bounds as bounds
from memprobe.core.cardnames import CardNameError, resolve_cards
from memprobe.core.registry import RegistryError


@main.command("plan")
@model_option("One workload: a registry name, or timm:NAME, hf:NAME, hf-config:PATH, FILE.py:FUNCTION.")
@click.option("--gpu", "card", required=True, help='The card to plan for, by name ("H200", "H100 SXM", 4090).')
@number_option(
    bounds.GLOBAL_BATCH,
    "The global batch to reach by accumulation (default: none, one micro-batch per optimizer step).",
)
@number_option(bounds.SEQ_LEN, "LLM workloads and hf: models: the sequence length.")
@precision_option("Comma-separated precisions to plan: fp32, tf32, fp16, bf16.")
@click.option("--lora", help="LLM workloads: also plan LoRA adapters of this rank (16 or r=16), in fp16/bf16.")
@click.option(
    "--optimizer",
    "optimizers",
    type=CommaList(),
    help="Models given by name: comma-separated optimizers to plan (sgd, adam, adamw; default: the model's own).",
)
@click.option(
    "--results",
    multiple=True,
    type=checks.Path(exists=True),
    help="Result files or folders to take measured rows from (repeatable). Default: none (memprobe ships "
    "no measurements), so every row is predicted.",
)
@models_file_option
@number_option(
    bounds.PLAN_GPUS,
    "Plan for this many cards training data-parallel: the micro-batch is per GPU, measured where --results "
    "holds a `scan --gpus N` of the card under --strategy, else predicted per GPU.",
    default=1,
)
@click.option(
    "--strategy",
    type=click.Choice(["ddp", "fsdp"]),
    help="With --gpus N > 1: ddp (default) or fsdp.",
)
@format_option(["github", "plain", "json", "csv"], "Output format.")
@wide_option
@traces_without_gpus
def plan_cmd(
    model: list[str],
    card: str,
    global_batch: int | None,
    seq_len: int | None,
    precision: list[str],
    lora: str | None,
    optimizers: list[str] | None,
    results: tuple[str, ...],
    models_file: str | None,
    gpus: int,
    strategy: str | None,
    fmt: str,
) -> None:
    """Plan the micro-batch and gradient accumulation for each memory lever on a card (or N of them).

    For each precision (and, for LLM workloads, activation checkpointing off/on and LoRA when --lora is given):
    the max micro-batch B on the card (measured where --results holds a scan of that card and setting, else
    predicted on the CPU and labelled so), the micro-batch to run (at most b* and never past the knee of a measured
    throughput curve), the accumulation steps to reach --global-batch, the memory headroom, and the throughput and
    time per global batch where measured ("not measured" otherwise). Rows are sorted by time per global batch.
    With --gpus N the micro-batch is per GPU and a global step is N micro-batches.
    """
    from memprobe.core.plan import PlanError
    from memprobe.planning.build import build_plan
    from memprobe.planning.render import render_plan
    from memprobe.request import ModelRequest, RequestError, lora_rank, workloads_of
    from memprobe.workloads.custom import is_custom_name

    try:  # before the model is resolved, as predict and guide read --gpu first
        if len(resolve_cards(card)) > 1:
            raise click.UsageError(f"--gpu '{card}' names several cards; plan one at a time")
    except CardNameError as exc:
        raise card_name_error(exc) from None

    if strategy is not None and gpus == 1:
        raise click.UsageError("--strategy applies with --gpus N > 1")
    precisions = precision
    named = any(is_custom_name(m) for m in model)
    try:
        workloads = workloads_of(ModelRequest(model, models_file, seq_len=seq_len if named else None), precisions)
    except RegistryError as exc:
        raise click.ClickException(str(exc)) from None
    if len(workloads) != 1:
        raise click.UsageError(f"--model '{joined(model)}' names {len(workloads)} workloads; plan one at a time")
    try:
        rank = lora_rank(lora)
    except RequestError as exc:
        raise request_error(exc) from None
    chosen = optimizers or []
    try:
        with progress_lines() as progress, model_code():
            plan = build_plan(
                workloads[0],
                card,
                global_batch,
                precisions,
                None if named else seq_len,
                rank,
                chosen,
                results,
                workers=_cores(),
                progress=progress,
                gpus=gpus,
                strategy=strategy or "ddp",
                on_skip=lambda exc: click.echo(f"warning: skipped {exc}", err=True),  # as report and guide say it
            )
    except PlanError as exc:
        raise click.ClickException(str(exc)) from None
    except RuntimeError as exc:  # PredictError: the setting cannot be traced on fake tensors
        raise click.ClickException(str(exc).splitlines()[0]) from None
    click.echo(render_plan(plan, fmt))


def _cores() -> int:
    from memprobe.predict.parallel import cores

    return cores()
