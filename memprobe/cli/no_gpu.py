"""A scan and the CUDA GPU: warn about other processes on it, or with none, offer (or run) `memprobe predict`."""

from __future__ import annotations

import click

from memprobe.cli.app import COMMON_CARD_SIZES, NoGPUExit
from memprobe.cli.predict import _predict_and_print
from memprobe.core.registry import Workload
from memprobe.core.units import gib
from memprobe.core.variants import base_name


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


def no_gpu(message: str, workloads: list[Workload], opts, mode: str, predict_instead: bool) -> None:
    """No CUDA device for a scan: exit 2 offering `memprobe predict`, or (predict_instead) predict and return.

    The prediction subtracts the overhead memprobe ships (memprobe/data/overhead.yaml), as `memprobe predict` does.
    """
    names = ",".join(dict.fromkeys(base_name(w.name) for w in workloads))
    same = (
        " (with the same --search, --seq-len, --checkpointing and --lora)"
        if any("+" in w.name for w in workloads)
        else ""
    )
    if not predict_instead:
        raise NoGPUExit(
            f"{message}. Without a GPU, `memprobe predict --model {names} --memory {COMMON_CARD_SIZES}`{same} "
            "predicts the max batch on those card sizes (or rerun this scan with --predict-if-no-gpu)"
        )
    if mode != "train":
        raise NoGPUExit(f"{message}; --predict-if-no-gpu predicts training steps only (--mode train)")
    click.echo(
        f"{message}: predicting instead of measuring (memprobe predict; nothing is measured and no result "
        "file is written)",
        err=True,
    )
    _predict_and_print(workloads, opts.precisions, COMMON_CARD_SIZES, None, opts.trial_steps, None, mode=opts.mode)
