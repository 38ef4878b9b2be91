"""`memprobe predict`: the max batch for memory sizes or cards by name, with no GPU (predict.summary)."""

from __future__ import annotations

from typing import Any

import click

from memprobe.cli import checks
from memprobe.cli.app import main
from memprobe.cli.compare_scan import comparison_gaps, variant_hint
from memprobe.cli.declared import request_options
from memprobe.cli.helpers import progress_lines, traces_without_gpus, writable
from memprobe.cli.model_code import model_code
from memprobe.cli.options import request_error
from memprobe.cli.width import wide_option
from memprobe.core.text import textwidth
from memprobe.core.workload.registry import RegistryError
from memprobe.request import ModelRequest, PredictJob, PredictRequest, RequestError, predict_job
from memprobe.request.model import modelled


def _predict_and_print(job: PredictJob, compare: str | None) -> list:
    """Predict each workload of `job` for the sizes and cards asked and print it."""
    from memprobe.predict.collector import paused

    with paused(keep=True):  # torch's import: see collector.py
        from memprobe.predict.torch_internals import TorchInternalsError, untested_torch_note
        from memprobe.workloads.torchvision_guard import ensure_loadable, first_notice, notice_marker, standin_reason

        try:
            from memprobe.predict import summary  # noqa: F401  (job.predict's, imported here under paused())
            from memprobe.predict.render import render
            from memprobe.predict.trace import PredictError
        except TorchInternalsError as exc:
            raise click.ClickException(str(exc)) from None

    torch_note = untested_torch_note()  # imports torch and reads its version: once
    if torch_note:
        click.echo(f"note: {torch_note}", err=True)
    ensure_loadable()  # before the first workload imports timm or transformers, so the note below is true
    reason = standin_reason()
    if reason and first_notice(reason):  # once per environment, not on every command
        click.echo(
            f"note: {reason}; a stand-in that raises on use takes its place (no workload calls torchvision; "
            "`pip uninstall torchvision`, or one built for this torch, fixes it). Said once for this environment "
            f"(remembered in {notice_marker(reason)}).",
            err=True,
        )
    try:
        sizes = job.memory_sizes()
    except RequestError as exc:
        raise request_error(exc) from None
    workloads, worlds, mode = job.workloads, job.worlds, job.mode
    compare_with = None
    if compare:
        from memprobe.core.records.results import ResultFileError, read_result

        try:
            compare_with = (compare, read_result(compare))
        except ResultFileError as exc:
            raise click.ClickException(str(exc)) from None
        if compare_with[1].workload.name not in {w.name for w in workloads}:
            names = [w.name for w in workloads]
            raise click.ClickException(
                f"{compare} is a scan of {compare_with[1].workload.name}, not of {', '.join(names)}"
                + variant_hint(str(compare_with[1].workload.name), names)
            )
        _check_same_world(compare, compare_with[1], worlds)
        scanned_mode = compare_with[1].mode
        if scanned_mode != mode:
            raise click.ClickException(f"{compare} is a --mode {scanned_mode} scan; this prediction is --mode {mode}")
        _say_gaps(compare, compare_with[1], job.precisions)
    made = []
    for workload in workloads:
        for world in worlds or [None]:
            where = f" as rank 0 of {world.label}" if world else ""
            click.echo(f"[{workload.name}] tracing on fake tensors{where} (no GPU used) ...", err=True)
            try:
                with progress_lines() as progress, model_code():
                    same = compare_with and compare_with[1].workload.name == workload.name
                    prediction = job.predict(workload, sizes, world, progress, compare_with if same else None)
            except (PredictError, TorchInternalsError, RuntimeError) as exc:
                raise click.ClickException(str(exc).splitlines()[0]) from None
            click.echo(textwidth.fit_text(render(prediction)))
            made.append((workload, prediction))
    return made


def _say_gaps(path: str, result, precisions: list[str]) -> None:
    """--compare: a note for each precision asked that the scan cannot be compared in; an error when none can."""
    gaps = comparison_gaps(result, precisions)
    if len(gaps) == len(precisions):
        raise click.ClickException(
            f"--compare: nothing in {path} to compare with: {'; '.join(gaps)}; give -p with a precision it measured"
        )
    for gap in gaps:
        click.echo(f"note: --compare: no comparison for one precision asked: {path}: {gap}", err=True)


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


@main.command("predict")
@request_options(ModelRequest, only=["models"])
@request_options(PredictRequest)
@click.option(
    "--compare",
    type=checks.Path(exists=True, dir_okay=False),
    help="A scan result file of this workload: also print predicted vs measured peaks for its trials, and "
    "the predicted max batch at its allocator capacity beside the measured one.",
)
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
    "--out",
    "out_dir",
    type=checks.Path(file_okay=False),
    help="With --search frontier: a folder to write the predicted frontier to (for `report --frontier`).",
)
@request_options(ModelRequest, skip=["models"])
@wide_option
@traces_without_gpus
def predict_cmd(**params: Any) -> None:
    """Predict the max batch for any memory size, with no GPU (labelled predicted, not measured).

    Runs the scan's trial (1 warm-up + K steps, optimizer state included) on fake tensors with the
    CUDA code paths of an H100 (fused attention, fused dropout and optimizers, CUDA autocast),
    records every allocation and replays it through a model of the CUDA caching allocator. Takes
    seconds to a minute on a CPU. Needs torch, but no GPU.
    """
    # --compare, --breakdown, --breakdown-out and --out say what to print or write besides the prediction: the
    # command's own options, not the request's (the API returns the prediction)
    request = modelled(PredictRequest, dict(params))
    checks.predict_checks(click.get_current_context(), request)
    frontier = request.model.search == "frontier"
    compare, breakdown, breakdown_out = params["compare"], params["breakdown"], params["breakdown_out"]
    if params["out_dir"] and not frontier:
        raise click.UsageError("--out has no effect without --search frontier")
    if frontier and (breakdown or breakdown_out):
        raise click.UsageError("--breakdown predicts at the max batch, not along a frontier: drop --search frontier")
    if frontier and compare:
        raise click.UsageError("--search frontier predicts one-GPU training: drop --gpus, --mode infer and --compare")
    try:
        job = predict_job(request)
    except RequestError as exc:
        raise request_error(exc) from None
    except RegistryError as exc:
        raise click.ClickException(str(exc)) from None
    if frontier:
        _predict_frontier(job, request.model.frontier_budget, request.model.checkpointing, params["out_dir"])
        return
    if (breakdown or breakdown_out) and (job.worlds or job.mode != "train" or not breakdown):
        raise click.UsageError(
            "--breakdown predicts one GPU's training step (no --gpus, --mode train); --breakdown-out needs --breakdown"
        )
    if breakdown_out:  # its folder now, not after minutes of predicting
        checks.output_file(breakdown_out, "--breakdown-out", "breakdowns.json", checks.files_read(params))
    predictions = _predict_and_print(job, compare)
    if breakdown:
        from memprobe.cli.breakdown import predicted_breakdowns

        with progress_lines() as progress:
            predicted_breakdowns(predictions, job.steps, breakdown_out, progress)


def _predict_frontier(job: PredictJob, budget: float | None, checkpointing: bool, out_dir: str | None) -> None:
    """predict --search frontier: one memory size or card, one GPU, training, no --compare."""
    from memprobe.cli.frontier import predict_frontiers

    try:
        sizes = job.memory_sizes()
    except RequestError as exc:
        raise click.UsageError(exc.message) from None
    if out_dir:
        writable(out_dir)
    with progress_lines() as progress:
        predict_frontiers(
            job.workloads, job.precisions, sizes, budget, checkpointing, job.lora_rank, job.steps, out_dir, progress
        )
