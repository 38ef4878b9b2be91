"""Every option a command accepts has an effect or is refused: options that do nothing in the company of others (a
`--strategy` without `--gpus N > 1`, `--charts` with `--scans`, ...). The bounds of numeric options are declared in
core/option_bounds.py, for the command and the API alike."""

from __future__ import annotations

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


def output_file(path: str, option: str) -> None:
    """An output file option (`--breakdown-out`) can be written: its folder exists or can be made and takes a file,
    or it is a pipe or device that can be written (core/outputs.check_output_file). One-line error otherwise."""
    from memprobe.core.outputs import OutputError, check_output_file

    try:
        check_output_file(path)
    except OutputError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None
