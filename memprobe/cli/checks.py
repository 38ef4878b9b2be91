"""Every option a command accepts has an effect or is refused: options that do nothing in the company of others (a
`--strategy` without `--gpus N > 1`, `--charts` with `--scans`, ...). The bounds of numeric options are declared in
core/workload/option_bounds.py, for the command and the API alike."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Iterable

import click
from click.core import ParameterSource

if TYPE_CHECKING:
    from memprobe.request import PredictRequest, ScanRequest


class Path(click.Path):
    """click.Path that refuses an empty path: '' would be the working folder (`report ''`, `scan --out ''`)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            self.fail("an empty path (give a file or folder name)", param, ctx)
        if self.exists and isinstance(value, str) and os.path.islink(value) and not os.path.exists(value):
            try:
                os.stat(value)
            except OSError as exc:  # a loop, or a link to nothing: not "does not exist" when the link does
                self.fail(f"{value} is a symbolic link that cannot be followed ({exc.strerror})", param, ctx)
        return super().convert(value, param, ctx)


def given(ctx: click.Context, *names: str) -> list[str]:
    """The options among the parameters `names` the user set (on the command line or by environment), as typed."""
    flags = {p.name: max(getattr(p, "opts", []) or [p.name or ""], key=len) for p in ctx.command.params}
    return [
        flags[name]
        for name in names
        if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    ]


def refuse(options: Iterable[str], why: str) -> None:
    """A UsageError naming the options that have no effect here, when there are any."""
    options = list(options)
    if options:
        raise click.UsageError(f"{', '.join(options)} {'has' if len(options) == 1 else 'have'} no effect {why}")


def infer_checks(ctx: click.Context, mode: str) -> None:
    """scan and predict: the options that shape training do nothing to forward passes."""
    if mode == "infer":
        refuse(
            given(ctx, "optimizer", "lora", "checkpointing"),
            "with --mode infer (forward passes only: no optimizer state, no adapters trained, no backward to "
            "recompute for)",
        )


def predict_checks(ctx: click.Context, request: PredictRequest) -> None:
    """predict: --strategy needs --gpus N > 1; --batch needs --search seq-len; infer_checks."""
    infer_checks(ctx, request.mode)
    if request.gpus == 1:
        refuse(given(ctx, "strategies"), "without --gpus N > 1 (one GPU has no data-parallel strategy)")
    if request.model.search != "seq-len":
        refuse(given(ctx, "batch"), "without --search seq-len (it is the batch the length is predicted at)")


def scan_checks(ctx: click.Context, request: ScanRequest) -> None:
    """scan: options that only make sense with others (--cpu-memory-budget with --device cpu, ...); infer_checks."""
    infer_checks(ctx, request.mode)
    if request.device != "cpu":
        refuse(given(ctx, "cpu_memory_budget"), "without --device cpu (a GPU's allocator has its own limit)")
    else:
        refuse(given(ctx, "predict_if_no_gpu"), "with --device cpu (the scan does not need a GPU)")
        refuse(given(ctx, "cudnn_benchmark"), "with --device cpu (no cuDNN there)")
    if not request.curve or not request.throughput:
        refuse(given(ctx, "curve_batches"), "with --no-curve or --no-throughput (no curve is timed)")
    if request.one_gpu and not request.parallel:
        refuse(given(ctx, "strategies"), "without --gpus N > 1 (one GPU has no data-parallel strategy)")


def report_checks(ctx: click.Context, scans: bool, llm: bool, breakdown: bool = False, charts: bool = False) -> None:
    """report: --scans, --llm and --breakdown print their own tables; the comparison's options do nothing there.
    --predicted needs --breakdown or --charts, the two that show predicted breakdowns."""
    if sum((scans, llm, breakdown)) > 1:
        raise click.UsageError("give one of --scans, --llm and --breakdown")
    if not (breakdown or charts):
        refuse(given(ctx, "predicted_file"), "without --breakdown or --charts (they show predicted breakdowns)")
    if scans:
        refuse(given(ctx, "charts_dir", "reference", "at_batch"), "with --scans (they shape the comparison report)")
    if llm:
        refuse(
            given(ctx, "charts_dir", "reference", "at_batch", "with_published", "precision"),
            "with --llm (they shape the comparison report)",
        )
    if breakdown:
        refuse(
            given(ctx, "reference", "at_batch", "with_published", "precision"),
            "with --breakdown (they shape the comparison report)",
        )


def output_file(path: str, option: str, example: str = "out.json", reads: Iterable[str] = ()) -> None:
    """An output file option (`--breakdown-out`) can be written: its folder exists or can be made and takes a file,
    or it is a pipe or device that can be written (core/outputs.check_output_file); it names no folder ('dir/') nor
    standard output ('-', which carries the tables), and is none of the files the command `reads` and no result file
    (core/output_guard). One-line error otherwise."""
    from memprobe.core.files.output_guard import check_output_name, refuse_clobber
    from memprobe.core.files.outputs import OutputError, check_output_file

    try:
        check_output_name(path, example)
        refuse_clobber(path, reads)
        check_output_file(path)
    except OutputError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def files_read(params: dict) -> list[str]:
    """The files a predict or plan command reads (its --model files, --compare, --models, --overhead-from,
    --results): what an output of the command must not replace."""
    from memprobe.core.files.output_guard import model_files

    found = model_files(params.get("models") or params.get("model") or [])  # the request's name, or click's
    for key in ("compare", "models_file"):
        found += [params[key]] if params.get(key) else []
    for key in ("overhead_from", "results"):
        found += list(params.get(key) or ())
    return found


def reference_name(reference: str | None) -> None:
    """report --reference: a card name memprobe cannot read (empty, a memory size) is bad input, exit 1, as a bad
    --gpu name is in predict, guide and plan (README's exit codes); one not among the results says so later."""
    from memprobe.core.cards.cardnames import is_memory_size

    if reference is not None and not reference.strip():
        raise click.ClickException('--reference: no card name given (e.g. "H100 SXM")')
    if reference is not None and is_memory_size(reference):
        raise click.ClickException(
            f"--reference: '{reference.strip()}' is a memory size, not a card name: give a GPU among the results"
        )
