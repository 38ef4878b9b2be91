"""A scan and the CUDA GPU: warn about other processes on it, or with none, offer (or run) `memprobe predict`.

The prediction offered is the scan's own: every option typed that shapes what is measured (model, precisions, mode,
the model's options, the LLM variants, --gpus and --strategy, --memory-cap as the memory) is carried over to
`memprobe predict`, and --predict-if-no-gpu runs exactly the command it offers. The options that only time,
prove or write (--soak, --curve, --out, ...) have nothing to do in a prediction and are named as left out.
"""

from __future__ import annotations

import shlex

import click

from memprobe.cli.app import NoGPUExit
from memprobe.cli.checks import given
from memprobe.cli.options import joined
from memprobe.core.option_bounds import MAX_PREDICT_STEPS
from memprobe.core.units import gib
from memprobe.request import COMMON_CARD_SIZES

# scan's parameter -> predict's option, for those carried over as they are (flags: the option alone).
_SAME = {
    "precision": "-p",
    "mode": "--mode",
    "models_file": "--models",
    "input_size": "--input-size",
    "optimizer": "--optimizer",
    "task": "--task",
    "seq_len": "--seq-len",
    "search": "--search",
    "frontier_budget": "--frontier-budget",
    "lora": "--lora",
}
_FLAGS = {"checkpointing": "--checkpointing"}
# Handled one by one below: what predict takes in another form.
_OWN = {"model", "memory_cap", "gpus", "strategy", "batches", "steps", "predict_if_no_gpu", "device"}


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


def predict_commands(ctx: click.Context) -> tuple[list[list[str]], list[str]]:
    """The `memprobe predict` argument lists that predict what the scan in `ctx` would measure (one per GPU count of
    its --gpus), and the scan options typed that a prediction has no use for."""
    params = ctx.params
    typed = set(_typed(ctx))
    memory = params.get("memory_cap") if "memory_cap" in typed else None
    if memory is None:  # a frontier is predicted for one size: the largest common one
        memory = "80GiB" if params.get("search") == "frontier" else COMMON_CARD_SIZES
    common = ["--model", joined(params["model"]), "--memory", memory]
    for name, option in _SAME.items():
        if name in typed and params.get(name) is not None:
            common += [option, joined(params[name])]
    common += [option for name, option in _FLAGS.items() if name in typed and params.get(name)]
    dropped = [flag for name, flag in _typed(ctx).items() if name not in {*_SAME, *_FLAGS, *_OWN}]
    if "batches" in typed:
        if params.get("search") == "seq-len":  # the batch the length is searched at: predict's --batch
            common += ["--batch", joined(params["batches"])]
        else:
            dropped.append("--batch")
    if "steps" in typed:
        if params["steps"] <= MAX_PREDICT_STEPS:
            common += ["--steps", str(params["steps"])]
        else:
            dropped.append(f"--steps (predict traces at most {MAX_PREDICT_STEPS})")
    counts = _gpu_counts(params.get("gpus") if "gpus" in typed else None)
    if counts is None:
        dropped.append("--gpus all (give a number)")
        counts = [1]
    commands = []
    for n in counts:
        world = (
            ["--gpus", str(n)] + (["--strategy", joined(params["strategy"])] if "strategy" in typed else [])
            if n > 1
            else []
        )
        commands.append(common + world)
    return commands, dropped


def _typed(ctx: click.Context) -> dict[str, str]:
    """The scan's parameters the user set, name -> the option as typed."""
    names = [p.name for p in ctx.command.params if p.name]
    return {name: flag for name in names for flag in given(ctx, name)}


def _gpu_counts(gpus: list[str] | None) -> list[int] | None:
    """The GPU counts of scan's --gpus (["1", "2", "4"]; None or none: one GPU); None for "all" (no GPU here to
    count)."""
    if not gpus:
        return [1]
    if "all" in gpus:
        return None
    return sorted({int(n) for n in gpus})


def _shown(argv: list[str]) -> str:
    return "memprobe predict " + " ".join(shlex.quote(a) for a in argv)


def no_gpu(message: str, predict_instead: bool) -> None:
    """No CUDA device for a scan: exit 2 offering the `memprobe predict` of this scan, or (predict_instead) run it
    and return. The prediction subtracts the overhead memprobe ships (memprobe/data/overhead.yaml), as `memprobe
    predict` does."""
    ctx = click.get_current_context()
    commands, dropped = predict_commands(ctx)
    left_out = f"; {', '.join(dropped)} left out: a prediction times nothing" if dropped else ""
    if not predict_instead:
        again = [" ".join(argv[argv.index("--gpus") :]) for argv in commands[1:]]  # they differ in that alone
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
