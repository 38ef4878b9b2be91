"""`memprobe predict`: the max batch for memory sizes or cards by name, with no GPU (predict.summary)."""

from __future__ import annotations

import click

from memprobe.cli import checks
from memprobe.cli.app import COMMON_CARD_SIZES, _precision_list, _workloads, main
from memprobe.cli.helpers import memory_list, progress_lines, trace_without_gpus, writable
from memprobe.cli.models import model_options as _model_options
from memprobe.cli.options import models_file_option, strategies_option
from memprobe.cli.variants import variant_options as _variant_options
from memprobe.cli.width import wide_option
from memprobe.core import textwidth
from memprobe.core.registry import Workload


def _predict_and_print(
    workloads: list[Workload],
    precisions: list[str],
    memory: str | None,
    override,
    steps: int,
    compare: str | None,
    cards: str | None = None,
    worlds: list | None = None,
    mode: str = "train",
) -> list:
    """Predict each workload for the sizes and cards asked and print it. `override`: an overhead.Override
    (--overhead-from / --overhead) or None for the packaged per-card figures."""
    from memprobe.predict.collector import paused

    with paused(keep=True):  # torch's import: see collector.py
        from memprobe.predict.torch_internals import TorchInternalsError, untested_torch_note
        from memprobe.workloads.torchvision_guard import ensure_loadable, standin_reason

        try:
            from memprobe.predict.parallel import cores
            from memprobe.predict.render import render
            from memprobe.predict.summary import memory_sizes, predict
            from memprobe.predict.trace import PredictError
        except TorchInternalsError as exc:
            raise click.ClickException(str(exc)) from None

    asked = memory_list(memory, cards, hints=memory != COMMON_CARD_SIZES)  # no hints about memprobe's own default
    torch_note = untested_torch_note()  # imports torch and reads its version: once
    if torch_note:
        click.echo(f"note: {torch_note}", err=True)
    ensure_loadable()  # before the first workload imports timm or transformers, so the note below is true
    if standin_reason():
        click.echo(
            f"note: {standin_reason()}; a stand-in that raises on use takes its place (no workload calls "
            "torchvision; `pip uninstall torchvision`, or one built for this torch, ends this note)",
            err=True,
        )
    try:
        sizes = memory_sizes(asked.labels, asked.cards, override)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--gpu" if asked.cards else "--memory") from None
    compare_with = None
    if compare:
        from memprobe.core.results import ResultFileError, read_result

        try:
            compare_with = (compare, read_result(compare))
        except ResultFileError as exc:
            raise click.ClickException(str(exc)) from None
        if compare_with[1].workload.name not in {w.name for w in workloads}:
            raise click.ClickException(
                f"{compare} is a scan of {compare_with[1].workload.name}, not of {', '.join(w.name for w in workloads)}"
            )
        _check_same_world(compare, compare_with[1], worlds)
        scanned_mode = compare_with[1].mode
        if scanned_mode != mode:
            raise click.ClickException(f"{compare} is a --mode {scanned_mode} scan; this prediction is --mode {mode}")
    made = []
    for workload in workloads:
        for world in worlds or [None]:
            where = f" as rank 0 of {world.label}" if world else ""
            click.echo(f"[{workload.name}] tracing on fake tensors{where} (no GPU used) ...", err=True)
            try:
                with progress_lines() as progress:
                    prediction = predict(
                        workload,
                        precisions,
                        sizes,
                        None,
                        "",
                        steps=steps,
                        compare_with=compare_with
                        if compare_with and compare_with[1].workload.name == workload.name
                        else None,
                        world=world,
                        mode=mode,
                        workers=cores(),
                        progress=progress,
                    )
            except (PredictError, TorchInternalsError, RuntimeError) as exc:
                raise click.ClickException(str(exc).splitlines()[0]) from None
            click.echo(textwidth.fit_text(render(prediction)))
            made.append((workload, prediction))
    return made


def _check_same_world(path: str, result, worlds: list | None) -> None:
    """--compare needs a scan made the way the prediction is: same GPU count and strategy."""
    from memprobe.compare.scaling import strategy as strategy_of
    from memprobe.compare.scaling import world_size

    size, strategy = world_size(result), strategy_of(result)
    asked = [(w.size, w.strategy) for w in worlds] if worlds else [(1, None)]
    if asked != [(size, strategy)]:
        made = f"{size} GPUs under {strategy}" if size > 1 else "1 GPU"
        wanted = ", ".join(f"{n} GPUs under {s}" if n > 1 else "1 GPU" for n, s in asked)
        raise click.ClickException(
            f"{path} was scanned on {made}; this prediction is for {wanted}: "
            "give --gpus/--strategy as the scan had them (one strategy)"
        )


def _worlds(count: int, strategy: str) -> list | None:
    """The data-parallel worlds asked for by --gpus/--strategy; None for one GPU."""
    from memprobe.probe.multi import parse_strategies

    try:
        strategies = parse_strategies(strategy)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--strategy") from None
    if count == 1:
        return None
    from memprobe.predict.data_parallel import World

    return [World(count, s) for s in strategies]


@main.command("predict")
@click.option(
    "--model",
    "-m",
    "model",
    required=True,
    help="Workload name(s), comma-separated; wildcards work. Also timm:NAME, hf:NAME, hf-config:PATH, "
    "FILE.py:FUNCTION or package.module:FUNCTION.",
)
@click.option(
    "--memory",
    help=f"Comma-separated memory sizes to predict for (24GiB, 11GB = decimal; default without "
    f"--gpu: {COMMON_CARD_SIZES}).",
)
@click.option(
    "--gpus",
    "world_size",
    default=1,
    show_default=True,
    type=click.IntRange(1, checks.MAX_GPUS),
    help="Predict per GPU for N GPUs training data-parallel (rank 0 of N, under each --strategy).",
)
@strategies_option
@click.option(
    "--gpu",
    "cards",
    help='Comma-separated cards by name, alias or short name ("H200", "H100 SXM", "a100 80gb", '
    "4090): predicts at the total memory the card's driver reports (see `memprobe "
    "guide` for the catalog).",
)
@click.option(
    "--precision",
    "-p",
    default="fp32,fp16,bf16",
    show_default=True,
    help="Comma-separated: fp32, tf32, fp16, bf16 (as in scan).",
)
@models_file_option
@click.option(
    "--overhead-from",
    "overhead_from",
    multiple=True,
    type=checks.Path(exists=True),
    help="Scan result file(s) or folder(s) to take the memory a real card's allocator could not use (CUDA "
    "context, driver) from, subtracted from every size. Default: the figures memprobe ships "
    "(memprobe/data/overhead.yaml: measured per scanned card, carried over to the others).",
)
@click.option(
    "--overhead",
    "overhead_size",
    help="The memory the allocator cannot use, given directly (e.g. 1.5GiB; 0 subtracts nothing); "
    "replaces the shipped figures.",
)
@click.option(
    "--compare",
    type=checks.Path(exists=True, dir_okay=False),
    help="A scan result file of this workload: also print predicted vs measured peaks for its trials, and "
    "the predicted max batch at its allocator capacity beside the measured one.",
)
@click.option(
    "--steps",
    default=None,
    type=click.IntRange(1, checks.MAX_PREDICT_STEPS),
    help="Steps per trial, as the scan's: 1 warm-up + K >= 2 in training (default 3); forward passes in "
    "inference (default 2).",
)
@click.option(
    "--mode",
    type=click.Choice(["train", "infer"]),
    default="train",
    show_default=True,
    help="infer: predict the max batch of forward passes under inference_mode (as `scan --mode infer`).",
)
@_model_options
@_variant_options
@click.option(
    "--breakdown",
    is_flag=True,
    help="Also predict where the memory goes at each predicted max batch (same categories as scan --breakdown).",
)
@click.option(
    "--breakdown-out",
    type=checks.Path(dir_okay=False),
    help="With --breakdown: write the predicted breakdowns to this JSON file (for report --breakdown --predicted).",
)
@click.option(
    "--batch",
    default=1,
    show_default=True,
    type=click.IntRange(1, checks.MAX_SEQ_BATCH),
    help="With --search seq-len: the batch the sequence length is predicted at.",
)
@click.option(
    "--out",
    "out_dir",
    type=checks.Path(file_okay=False),
    help="With --search frontier: a folder to write the predicted frontier to (for `report --frontier`).",
)
@wide_option
def predict_cmd(
    model: str,
    memory: str | None,
    world_size: int,
    strategy: str,
    cards: str | None,
    precision: str,
    models_file: str | None,
    overhead_from: tuple[str, ...],
    overhead_size: str | None,
    compare: str | None,
    steps: int,
    input_size: str | None,
    optimizer: str | None,
    task: str | None,
    seq_len: int | None,
    search: str,
    checkpointing: bool,
    lora: str | None,
    batch: int,
    mode: str,
    frontier_budget: float | None,
    out_dir: str | None,
    breakdown: bool = False,
    breakdown_out: str | None = None,
) -> None:
    """Predict the max batch for any memory size, with no GPU (labelled predicted, not measured).

    Runs the scan's trial (1 warm-up + K steps, optimizer state included) on fake tensors with the
    CUDA code paths of an H100 (fused attention, fused dropout and optimizers, CUDA autocast),
    records every allocation and replays it through a model of the CUDA caching allocator. Takes
    seconds to a minute on a CPU. Needs torch, but no GPU.
    """
    from memprobe.cli.frontier import frontier_request

    trace_without_gpus()
    checks.predict_checks(click.get_current_context(), world_size, search)
    frontier = frontier_request(search, seq_len, None, frontier_budget)
    if out_dir and not frontier:
        raise click.UsageError("--out has no effect without --search frontier")
    workloads = (
        _workloads(models_file, model, precision, input_size, optimizer, task, None, "batch", 1, False, None)
        if frontier
        else _workloads(
            models_file, model, precision, input_size, optimizer, task, seq_len, search, batch, checkpointing, lora
        )
    )
    precisions = _precision_list(precision) or []
    if not precisions:
        raise click.BadParameter("give at least one precision", param_hint="--precision")
    worlds = _worlds(world_size, strategy)
    if worlds and mode != "train":
        raise click.BadParameter("--gpus N predicts data-parallel training: leave --mode at train", param_hint="--mode")
    if steps is None:
        steps = 3 if mode == "train" else 2
    elif mode == "train" and steps < 3:
        raise click.BadParameter("a training trial is 1 warm-up step + K >= 2 steps (3 or more)", param_hint="--steps")
    if frontier and (breakdown or breakdown_out):
        raise click.UsageError("--breakdown predicts at the max batch, not along a frontier: drop --search frontier")
    if frontier:
        _predict_frontier(
            workloads,
            precisions,
            memory,
            cards,
            _override(overhead_from, overhead_size),
            steps,
            frontier_budget,
            checkpointing,
            lora,
            out_dir,
            bool(worlds or mode != "train" or compare),
        )
        return
    if memory is None and cards is None:
        memory = COMMON_CARD_SIZES
    if (breakdown or breakdown_out) and (worlds or mode != "train" or not breakdown):
        raise click.UsageError(
            "--breakdown predicts one GPU's training step (no --gpus, --mode train); --breakdown-out needs --breakdown"
        )
    if breakdown_out:  # its folder now, not after minutes of predicting
        checks.output_file(breakdown_out, "--breakdown-out")
    predictions = _predict_and_print(
        workloads, precisions, memory, _override(overhead_from, overhead_size), steps, compare, cards, worlds, mode
    )
    if breakdown:
        from memprobe.cli.breakdown import predicted_breakdowns

        with progress_lines() as progress:
            predicted_breakdowns(predictions, steps, breakdown_out, progress)


def _predict_frontier(
    workloads: list[Workload],
    precisions: list[str],
    memory: str | None,
    cards: str | None,
    override,
    steps: int,
    budget: float | None,
    checkpointing: bool,
    lora: str | None,
    out_dir: str | None,
    refused: bool,
) -> None:
    """predict --search frontier: one memory size or card, one GPU, training, no --compare."""
    from memprobe.cli.frontier import predict_frontiers
    from memprobe.core.variants import VariantError, parse_lora
    from memprobe.predict.summary import memory_sizes

    if refused:
        raise click.UsageError("--search frontier predicts one-GPU training: drop --gpus, --mode infer and --compare")
    if memory is None and cards is None:
        raise click.UsageError("--search frontier predicts for one card or size: give --gpu or --memory")
    asked = memory_list(memory, cards)
    try:
        sizes = memory_sizes(asked.labels, asked.cards, override)
        rank = parse_lora(lora)
    except (ValueError, VariantError) as exc:
        raise click.UsageError(str(exc)) from None
    if out_dir:
        writable(out_dir)
    with progress_lines() as progress:
        predict_frontiers(workloads, precisions, sizes, budget, checkpointing, rank, steps, out_dir, progress)


def _override(paths: tuple[str, ...], size: str | None):
    """The overhead.Override --overhead-from or --overhead give; None for the packaged figures."""
    from memprobe.core.overhead import OverheadError, choose_override

    try:
        return choose_override(paths, size)
    except OverheadError as exc:
        raise click.UsageError(str(exc)) from None
