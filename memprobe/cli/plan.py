"""`memprobe plan`: which micro-batch and accumulation to run per memory lever on a card (memprobe.planning.build)."""

from __future__ import annotations

from typing import Any

import click

from memprobe.cli.app import main
from memprobe.cli.declared import request_options
from memprobe.cli.helpers import progress_lines, traces_without_gpus
from memprobe.cli.model_code import model_code
from memprobe.cli.options import format_option, request_error
from memprobe.cli.width import wide_option
from memprobe.core.workload.registry import RegistryError
from memprobe.request import PlanRequest


@main.command("plan")
@request_options(PlanRequest)
@format_option(["github", "plain", "json", "csv"], "Output format.")
@wide_option
@traces_without_gpus
def plan_cmd(fmt: str, **params: Any) -> None:
    """Plan the micro-batch and gradient accumulation for each memory lever on a card (or N of them).

    For each precision (and, for LLM workloads, activation checkpointing off/on and LoRA when --lora is given):
    the max micro-batch B on the card (measured where --results holds a scan of that card and setting, else
    predicted on the CPU and labelled so), the micro-batch to run (at most b* and never past the knee of a measured
    throughput curve), the accumulation steps to reach --global-batch, the memory headroom, and the throughput and
    time per global batch where measured ("not measured" otherwise). Rows are sorted by time per global batch.
    With --gpus N the micro-batch is per GPU and a global step is N micro-batches.

    With --mode generate (--prompt-len P, --new-tokens N, --prefill-chunk C): per precision, the concurrent
    sequences of that generation that fit on the card (measured where --results holds a `scan --mode generate` of
    that model, P, N, C and precision on the card, else predicted with a safe figure, labelled), with the decode and
    prefill tokens/s and the KV capacity where measured.
    """
    from memprobe.core.estimates.plan import PlanError
    from memprobe.planning.render import render_plan
    from memprobe.predict.parallel import cores
    from memprobe.request import RequestError, plan_job

    try:
        job = plan_job(PlanRequest(**params))
    except RequestError as exc:
        raise request_error(exc) from None
    except RegistryError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        with progress_lines() as progress, model_code():
            # a result file skipped is said as report and guide say it
            plan = job.plan(cores(), progress, on_skip=lambda exc: click.echo(f"warning: skipped {exc}", err=True))
    except PlanError as exc:
        raise click.ClickException(str(exc)) from None
    except RuntimeError as exc:  # PredictError: the setting cannot be traced on fake tensors
        raise click.ClickException(str(exc).splitlines()[0]) from None
    click.echo(render_plan(plan, fmt))
