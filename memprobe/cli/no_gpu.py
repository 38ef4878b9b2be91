"""A scan and the CUDA GPU: warn about other processes on it, or with none, offer (or run) `memprobe predict`.

The prediction offered is the scan's own: every option typed that shapes what is measured (model, precisions, mode,
the model's options, the LLM variants, --gpus and --strategy, --memory-cap as the memory) is carried over to
`memprobe predict`, and --predict-if-no-gpu runs exactly the command it offers. The options that only time,
prove or write (--soak, --curve, --out, ...) have nothing to do in a prediction and are named as left out.
"""

from __future__ import annotations

import shlex
from typing import Sequence

import click

from memprobe.cli.app import NoGPUExit
from memprobe.cli.checks import given
from memprobe.core.text.units import gib
from memprobe.core.workload.option_bounds import MAX_PREDICT_STEPS
from memprobe.request import COMMON_CARD_SIZES, ModelRequest, PredictRequest, ScanRequest
from memprobe.request.option import command_line, option_names

# The scan's options a prediction takes as they are (the model's, precisions, mode, strategies) or in another form
# (memory_cap as the memory, gpus as one prediction per count, batches as a seq-len search's batch, steps up to
# what predict traces); any other typed is left out and said so.
_CARRIED = option_names(ModelRequest) | {"precisions", "mode", "strategies", "memory_cap", "gpus", "device"}
_CARRIED |= {"predict_if_no_gpu", "batches", "steps"}


def require_gpu() -> None:
    from memprobe.probe.device import NoGPUError, visible_gpu

    try:
        gpu = visible_gpu()
    except NoGPUError as exc:
        raise NoGPUExit(f"no CUDA GPU: {exc}") from None
    for p in gpu.processes:
        click.echo(
            f"warning: process {p.pid} {p.name} holds {gib(p.used_bytes, 2)} GiB on {gpu.name}; "
            "the max batch found will be lower than on an idle card",
            err=True,
        )


def predict_requests(ctx: click.Context, scan: ScanRequest) -> tuple[list[PredictRequest], list[str]]:
    """The predict requests that predict what `scan` (the one in `ctx`) would measure, one per GPU count of its
    --gpus, and the scan options typed that a prediction has no use for."""
    typed = _typed(ctx)
    memory = scan.memory_cap if "memory_cap" in typed else None
    if memory is None:  # a frontier is predicted for one size: the largest common one
        memory = "80GiB" if scan.model.search == "frontier" else COMMON_CARD_SIZES
    dropped = [flag for name, flag in typed.items() if name not in _CARRIED]
    batch = 1
    if "batches" in typed:
        if scan.model.search == "seq-len":  # the batch the length is searched at: predict's --batch
            batch = scan.batches[0]
        else:
            dropped.append("--batch")
    steps = None
    if "steps" in typed:
        if scan.steps <= MAX_PREDICT_STEPS:
            steps = scan.steps
        else:
            dropped.append(f"--steps (predict traces at most {MAX_PREDICT_STEPS})")
    counts = _gpu_counts(scan.gpus)
    if counts is None:
        dropped.append("--gpus all (give a number)")
        counts = [1]
    requests = [
        PredictRequest(
            scan.model,
            memory=memory,
            gpus=n,
            strategies=scan.strategies if n > 1 else ("ddp",),
            precisions=scan.precisions,
            steps=steps,
            mode=scan.mode,
            batch=batch,
        )
        for n in counts
    ]
    return requests, dropped


def predict_argv(request: PredictRequest) -> list[str]:
    """The `memprobe predict` options that ask `request`: --model, the prediction's options, the model's."""
    model = request.model
    return command_line(model, only={"models"}) + command_line(request) + command_line(model, skip={"models"})


def _typed(ctx: click.Context) -> dict[str, str]:
    """The scan's parameters the user set, name -> the option as typed."""
    names = [p.name for p in ctx.command.params if p.name]
    return {name: flag for name in names for flag in given(ctx, name)}


def _gpu_counts(gpus: Sequence[str] | None) -> list[int] | None:
    """The GPU counts of scan's --gpus (["1", "2", "4"]; None or none: one GPU); None for "all" (no GPU here to
    count)."""
    if not gpus:
        return [1]
    if "all" in gpus:
        return None
    return sorted({int(n) for n in gpus})


def _shown(argv: list[str]) -> str:
    return "memprobe predict " + " ".join(shlex.quote(a) for a in argv)


def no_gpu(message: str, scan: ScanRequest) -> None:
    """No CUDA device for `scan`: exit 2 offering the `memprobe predict` of this scan, or (--predict-if-no-gpu) run
    it and return. The prediction subtracts the overhead memprobe ships (memprobe/data/overhead.yaml), as `memprobe
    predict` does."""
    ctx = click.get_current_context()
    requests, dropped = predict_requests(ctx, scan)
    commands = [predict_argv(r) for r in requests]
    left_out = f"; {', '.join(dropped)} left out: a prediction times nothing" if dropped else ""
    if not scan.predict_if_no_gpu:
        again = [" ".join(command_line(r, only={"gpus", "strategies"})) for r in requests[1:]]
        more = f" (and again with {' / '.join(again)})" if again else ""
        raise NoGPUExit(
            f"{message}. Without a GPU, `{_shown(commands[0])}` predicts the max batch{more}{left_out}; or rerun "
            "this scan with --predict-if-no-gpu"
        )
    click.echo(
        f"{message}: predicting instead of measuring (memprobe predict; nothing is measured and no result "
        f"file is written){left_out}",
        err=True,
    )
    from memprobe.cli.predict import predict_cmd

    for argv in commands:
        click.echo(_shown(argv), err=True)
        with predict_cmd.make_context("memprobe predict", list(argv), parent=ctx.parent) as sub:
            predict_cmd.invoke(sub)
