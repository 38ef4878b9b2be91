"""`memprobe scan`: parse the options into a ScanRequest, build its ScanOptions (memprobe.request, as the API does),
run probe.scan (or the multi-GPU / parallel drivers), print."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from memprobe.cli import checks
from memprobe.cli.app import NoGPUExit, main
from memprobe.cli.helpers import interrupted_status, writable
from memprobe.cli.models import model_options as _model_options
from memprobe.cli.models import model_request
from memprobe.cli.no_gpu import no_gpu, require_gpu
from memprobe.cli.options import (
    BATCHES,
    CURVE_BATCHES,
    WORLD_SIZES,
    mode_option,
    model_option,
    models_file_option,
    number_option,
    precision_option,
    request_error,
    strategies_option,
)
from memprobe.cli.scan_output import after_scan, print_scans
from memprobe.cli.scan_parallel import scan_parallel
from memprobe.cli.scan_progress import ProgressPrinter
from memprobe.cli.variants import variant_options as _variant_options
from memprobe.cli.width import wide_option
from memprobe.core import option_bounds as bounds
from memprobe.core.interrupts import SCAN_CLEAN_UP_S, allow_clean_up
from memprobe.core.registry import RegistryError
from memprobe.request import COMMON_CARD_SIZES, RequestError, ScanJob, ScanRequest, scan_job


@main.command("scan")
@model_option(
    "Workload name(s), comma-separated; wildcards and 'all' work. Also timm:NAME, hf:NAME, "
    "hf-config:PATH, FILE.py:FUNCTION or package.module:FUNCTION (README: your own model)."
)
@precision_option("Comma-separated: fp32 (TF32 off), tf32, fp16 (autocast + GradScaler), bf16 (autocast).")
@mode_option("train: forward, loss, backward, optimizer step. infer: forward only.")
@click.option(
    "--batch",
    "batches",
    type=BATCHES,
    help="Also measure throughput at these batch sizes (an OOM there is reported). "
    "With --search seq-len: the one batch the sequence length is searched at (default 1).",
)
@_variant_options
@click.option(
    "--out",
    "out_dir",
    default="reports",
    show_default=True,
    type=checks.Path(file_okay=False),
    help="Folder for the result file.",
)
@models_file_option
@number_option(bounds.SCAN_STEPS, "Steps per trial: 1 warm-up + K >= 2 (longer runs: --soak).", default=3)
@number_option(bounds.WARMUP, "Warm-up steps before timing.", default=3)
@number_option(bounds.TIMED_STEPS, "Timed steps for throughput.", default=10)
@number_option(bounds.MAX_BATCH_OPTION, "Largest batch the search tries.", default=65536)
@number_option(
    bounds.MAX_TRIALS_OPTION, "Most search trials per precision (fresh-process proof checks not counted).", default=40
)
@click.option("--no-throughput", is_flag=True, help="Only find the max batch; skip timing.")
@number_option(
    bounds.REPEAT_OPTION,
    "B must complete the trial and the steps after it in this many consecutive fresh processes; batches that "
    "fitted once and failed once are reported as the flaky band.",
    default=bounds.REPEAT,
)
@number_option(
    bounds.SOAK,
    "After the proof, train the max batch this many more steps in a fresh process and lower it "
    "until that passes (recorded as proof.soak); 0 = off.",
    default=0,
)
@click.option(
    "--predicted-start/--no-predicted-start",
    "predicted_start",
    default=None,
    help="Start the search at the max batch `memprobe predict` gives on the CPU, computed while the first "
    "trials run (default: on for CUDA without --compile). Only the start: the search "
    "and the fresh-process proof are unchanged.",
)
@click.option(
    "--breakdown/--no-breakdown",
    "breakdown",
    default=None,
    help="After the proof, measure where the memory goes at B (parameters, gradients, optimizer state, "
    "activations, ...) in one more fresh process under PyTorch's MemTracker; B is not changed "
    "(default: on for CUDA training scans).",
)
@click.option(
    "--curve",
    "curve",
    is_flag=False,
    flag_value="auto",
    default="auto",
    type=CURVE_BATCHES,
    metavar="[B1,B2,...]",
    help="Throughput curve (default on): time a ladder of batches up to B and report the best batch b*. "
    "Default ladder: powers of two below B (up to 7) plus B; give sizes to choose them.",
)
@click.option("--no-curve", is_flag=True, help="Skip the throughput curve (only B is timed).")
@number_option(
    bounds.CURVE_BUDGET,
    "Seconds the curve may take per precision: no point starts whose estimated cost would end past "
    "them (default 45 in training, 20 in inference).",
    metavar="SECONDS",
)
@click.option(
    "--cudnn-benchmark", is_flag=True, help="Let cuDNN pick algorithms by timing (changes memory near the edge)."
)
@click.option(
    "--compile",
    "compile_step",
    is_flag=True,
    help="Run the model's forward and backward through torch.compile in every trial and timed run: the "
    "max batch and throughput are those of the compiled step; compile time is reported apart.",
)
@click.option(
    "--device",
    "device",
    type=click.Choice(["cuda", "cpu"]),
    default="cuda",
    show_default=True,
    help="cpu runs the same code path with a fake allocator (for tests and demos; needs --cpu-memory-budget).",
)
@click.option("--cpu-memory-budget", help="With --device cpu: the memory budget, e.g. 64MiB.")
@click.option(
    "--memory-cap",
    help="Emulate a card with this much memory (e.g. 24GiB) on a bigger one: the allocator is "
    "capped at it minus the memory measured outside PyTorch (context, kernels); "
    "results are labelled emulated.",
)
@_model_options
@click.option(
    "--gpus",
    "gpus",
    type=WORLD_SIZES,
    help="World size(s) to measure: N[,N...] or 'all' (default 1: the single-GPU scan). "
    "N > 1 finds the per-GPU max batch of N ranks launched by torchrun, and the scaling "
    "efficiency against 1 GPU. With --parallel: how many GPUs to spread jobs over (default all).",
)
@strategies_option
@click.option(
    "--parallel",
    is_flag=True,
    help="Run different workloads and precisions on different GPUs at once "
    "(one child scan per GPU); writes the same result files as a serial scan.",
)
@click.option(
    "--predict-if-no-gpu",
    is_flag=True,
    help=f"With no CUDA device, predict the max batch for {COMMON_CARD_SIZES} instead of failing "
    "(memprobe predict; a prediction, not a measurement; exit 0).",
)
@wide_option
def scan_cmd(**params: Any) -> None:
    """Find the exact max batch of each model and precision on this GPU, then measure throughput there.

    For each precision: a memory-guided search (small batches in one trial process, trials near
    the edge each in a fresh process forked from a pre-imported server), the final pair (B fits, B+1 does
    not) proven in fresh processes (a fresh search trial counts; B is re-run with the timed steps until it
    trained in --repeat of them in a row),
    then timed steps at B with utilization sampled, then the throughput curve (--no-curve skips it).
    One result file per model is written (atomically, after every precision) under --out.
    """
    from memprobe.probe.scan import NoCudaError, ScanInterrupted

    allow_clean_up(SCAN_CLEAN_UP_S)  # after Ctrl-C a scan ends its trial processes, then writes what finished
    request = scan_request(params)
    single = not request.gpus or list(request.gpus) == ["1"]
    checks.scan_checks(
        click.get_current_context(), request.device, single, not request.curve, not request.throughput, request.parallel
    )
    try:
        job = scan_job(request)
    except RequestError as exc:
        raise request_error(exc) from None
    except RegistryError as exc:
        raise click.ClickException(str(exc)) from None
    if request.device == "cuda":
        try:
            require_gpu()
        except NoGPUExit as exc:
            no_gpu(exc.message, request.predict_if_no_gpu)
            return

    writable(str(request.out_dir))  # now, not after the first precision's minutes of trials
    if job.frontier:
        if request.parallel or not single:
            raise click.UsageError("--search frontier runs on one GPU: drop --parallel and --gpus")
        _frontiers(job, request)
        return
    if request.parallel:
        models_file = None if request.model.models_file is None else str(request.model.models_file)
        scan_parallel(job.workloads, job.options, request.gpus, str(request.out_dir), models_file)
        return
    from memprobe.probe.distributed.scan import DistributedScanError, gpu_count
    from memprobe.probe.multi import check_runs, parse_gpus, scan_runs

    opts, workloads = job.options, job.workloads
    try:
        sizes = parse_gpus(request.gpus, gpu_count if request.device == "cuda" else lambda: os.cpu_count() or 1)
        strategies = list(request.strategies)
        for workload in workloads:  # every workload, before the first one runs
            check_runs(workload, opts, sizes, strategies)
    except ValueError as exc:  # DistributedScanError too
        raise click.UsageError(str(exc)) from None
    progress = ProgressPrinter({w.name: "seq len" for w in workloads if w.params.get("axis") == "seq_len"})
    finished = []
    failed = False
    user_errors = []
    for workload in workloads:
        try:
            for result, path in scan_runs(workload, opts, sizes, strategies, str(request.out_dir), progress):
                finished.append(result)
                failed |= any(p.status == "error" for p in result.precisions.values())
                user_errors += after_scan(result, path, workload)
        except DistributedScanError as exc:
            raise click.UsageError(str(exc)) from None
        except NoCudaError as exc:
            no_gpu(f"no CUDA device: {exc}", request.predict_if_no_gpu)
            return
        except ScanInterrupted as stop:
            kept = (
                f"what finished (precisions, trials so far) is in {stop.path} (marked partial)"
                if stop.path
                else f"no trial of {workload.name} had finished, so no result file was written"
            )
            click.echo(f"\ninterrupted: {kept}", err=True)
            sys.exit(interrupted_status())
    print_scans(finished)
    if user_errors:
        raise click.ClickException(user_errors[0])
    if failed:
        sys.exit(1)


def scan_request(params: dict[str, Any]) -> ScanRequest:
    """The typed request of scan's parsed options (click's parameter names): the flags are unchanged, their values
    grouped, the model's own options in a ModelRequest."""
    model = model_request(params, 1)
    curve = params["curve"]
    return ScanRequest(
        model,
        precisions=params["precision"],
        mode=params["mode"],
        batches=params["batches"] or [],
        frontier_budget=params["frontier_budget"],
        out_dir=params["out_dir"],
        steps=params["steps"],
        warmup=params["warmup"],
        timed_steps=params["timed_steps"],
        max_batch=params["max_batch"],
        max_trials=params["max_trials"],
        throughput=not params["no_throughput"],
        soak=params["soak"],
        repeat=params["repeat"],
        curve=not params["no_curve"],
        curve_batches=[] if curve == "auto" else curve,
        curve_budget=params["curve_budget"],
        predicted_start=params["predicted_start"],
        breakdown=params["breakdown"],
        cudnn_benchmark=params["cudnn_benchmark"],
        compile=params["compile_step"],
        device=params["device"],
        cpu_memory_budget=params["cpu_memory_budget"],
        memory_cap=params["memory_cap"],
        gpus=params["gpus"],
        strategies=params["strategy"],
        parallel=params["parallel"],
        predict_if_no_gpu=params["predict_if_no_gpu"],
    )


def _frontiers(job: ScanJob, request: ScanRequest) -> None:
    """scan --search frontier: each workload's frontier, measured on this GPU."""
    from memprobe.cli.frontier import scan_frontiers

    scan_frontiers(
        job.workloads,
        job.options,
        str(request.out_dir),
        request.frontier_budget,
        request.model.checkpointing,
        job.lora_rank,
        ProgressPrinter({f"{w.name}": "n" for w in job.workloads}),
    )
