"""`memprobe scan`: parse the options into ScanOptions, run probe.scan (or the multi-GPU / parallel drivers), print."""

from __future__ import annotations

import os
import sys

import click

from memprobe.cli import checks
from memprobe.cli.app import COMMON_CARD_SIZES, NoGPUExit, _int_list, _workloads, main
from memprobe.cli.helpers import interrupted_status, positive_size, writable
from memprobe.cli.models import model_options as _model_options
from memprobe.cli.no_gpu import no_gpu, require_gpu
from memprobe.cli.options import models_file_option, strategies_option
from memprobe.cli.scan_output import after_scan, print_scans
from memprobe.cli.scan_parallel import scan_parallel
from memprobe.cli.scan_progress import ProgressPrinter
from memprobe.cli.variants import split_batches
from memprobe.cli.variants import variant_options as _variant_options
from memprobe.cli.width import wide_option
from memprobe.core.interrupts import SCAN_CLEAN_UP_S, allow_clean_up
from memprobe.core.textlists import comma_items


@main.command("scan")
@click.option(
    "--model",
    "-m",
    "model",
    required=True,
    help="Workload name(s), comma-separated; wildcards and 'all' work. Also timm:NAME, hf:NAME, "
    "hf-config:PATH, FILE.py:FUNCTION or package.module:FUNCTION (README: your own model).",
)
@click.option(
    "--precision",
    "-p",
    default="fp32,fp16,bf16",
    show_default=True,
    help="Comma-separated: fp32 (TF32 off), tf32, fp16 (autocast + GradScaler), bf16 (autocast).",
)
@click.option(
    "--mode",
    type=click.Choice(["train", "infer"]),
    default="train",
    show_default=True,
    help="train: forward, loss, backward, optimizer step. infer: forward only.",
)
@click.option(
    "--batch",
    "batches",
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
@click.option(
    "--steps",
    default=3,
    show_default=True,
    type=click.IntRange(3, checks.MAX_SCAN_STEPS),
    help="Steps per trial: 1 warm-up + K >= 2 (longer runs: --soak).",
)
@click.option(
    "--warmup",
    default=3,
    show_default=True,
    type=click.IntRange(0, checks.MAX_WARMUP),
    help="Warm-up steps before timing.",
)
@click.option(
    "--timed-steps",
    default=10,
    show_default=True,
    type=click.IntRange(1, checks.MAX_TIMED_STEPS),
    help="Timed steps for throughput.",
)
@click.option(
    "--max-batch",
    default=65536,
    show_default=True,
    type=click.IntRange(1, checks.MAX_BATCH),
    help="Largest batch the search tries.",
)
@click.option(
    "--max-trials",
    default=40,
    show_default=True,
    type=click.IntRange(2, checks.MAX_TRIALS),
    help="Most search trials per precision (fresh-process proof checks not counted).",
)
@click.option("--no-throughput", is_flag=True, help="Only find the max batch; skip timing.")
@click.option(
    "--soak",
    default=0,
    show_default=True,
    type=click.IntRange(0, checks.MAX_SOAK),
    help="After the proof, train the max batch this many more steps in a fresh process and lower it "
    "until that passes (recorded as proof.soak); 0 = off.",
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
    metavar="[B1,B2,...]",
    help="Throughput curve (default on): time a ladder of batches up to B and report the best batch b*. "
    "Default ladder: powers of two below B (up to 7) plus B; give sizes to choose them.",
)
@click.option("--no-curve", is_flag=True, help="Skip the throughput curve (only B is timed).")
@click.option(
    "--curve-budget",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="Seconds the curve may take per precision: no point starts whose estimated cost would end past "
    "them (default 45 in training, 20 in inference).",
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
def scan_cmd(
    model: str,
    precision: str,
    mode: str,
    batches: str | None,
    out_dir: str,
    models_file: str | None,
    steps: int,
    warmup: int,
    timed_steps: int,
    max_batch: int,
    max_trials: int,
    no_throughput: bool,
    soak: int,
    curve: str,
    no_curve: bool,
    curve_budget: float | None,
    predicted_start: bool | None,
    breakdown: bool | None,
    cudnn_benchmark: bool,
    compile_step: bool,
    device: str,
    cpu_memory_budget: str | None,
    memory_cap: str | None,
    input_size: str | None,
    optimizer: str | None,
    task: str | None,
    seq_len: int | None,
    gpus: str | None,
    strategy: str,
    parallel: bool,
    predict_if_no_gpu: bool,
    search: str,
    checkpointing: bool,
    lora: str | None,
    frontier_budget: float | None,
) -> None:
    """Find the exact max batch of each model and precision on this GPU, then measure throughput there.

    For each precision: a memory-guided search (small batches in one trial process, trials near
    the edge each in a fresh process forked from a pre-imported server), the final pair (B fits, B+1 does
    not) proven in fresh processes (a fresh search trial counts; B is re-run with the timed steps),
    then timed steps at B with utilization sampled, then the throughput curve (--no-curve skips it).
    One result file per model is written (atomically, after every precision) under --out.
    """
    from memprobe.cli.frontier import frontier_request
    from memprobe.probe.scan import NoCudaError, ScanInterrupted, ScanOptions

    allow_clean_up(SCAN_CLEAN_UP_S)  # after Ctrl-C a scan ends its trial processes, then writes what finished
    checks.scan_checks(click.get_current_context(), device, gpus, no_curve, no_throughput, parallel)
    frontier = frontier_request(search, seq_len, batches, frontier_budget)
    request_batch, timed_batches = split_batches(search, _int_list(batches, "--batch"))
    workloads = (
        _workloads(models_file, model, precision, input_size, optimizer, task, None, "batch", 1, False, None)
        if frontier
        else _workloads(
            models_file,
            model,
            precision,
            input_size,
            optimizer,
            task,
            seq_len,
            search,
            request_batch,
            checkpointing,
            lora,
        )
    )
    budget = None
    if device == "cpu":
        if not cpu_memory_budget:
            raise click.UsageError("--device cpu needs --cpu-memory-budget (the CPU has no allocator limit to find)")
        budget = positive_size(cpu_memory_budget, "--cpu-memory-budget")
    cap = None
    if memory_cap:
        cap = positive_size(memory_cap, "--memory-cap")
    try:
        opts = ScanOptions(
            precisions=comma_items(precision),
            mode=mode,
            steps=steps,
            warmup=warmup,
            timed_steps=timed_steps,
            batches=timed_batches,
            max_batch=max_batch,
            max_trials=max_trials,
            measure=not no_throughput,
            device=device,
            cpu_budget_bytes=budget,
            cudnn_benchmark=cudnn_benchmark,
            memory_cap_bytes=cap,
            compile=compile_step,
            soak=soak,
            curve=not no_curve,
            predicted_start=predicted_start,
            curve_batches=[] if curve == "auto" else _int_list(curve, "--curve"),
            curve_budget_s=curve_budget,
            breakdown=breakdown,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if device == "cuda":
        try:
            require_gpu()
        except NoGPUExit as exc:
            no_gpu(exc.message, predict_if_no_gpu)
            return

    writable(out_dir)  # now, not after the first precision's minutes of trials
    if frontier:
        from memprobe.cli.frontier import scan_frontiers
        from memprobe.core.variants import parse_lora

        if parallel or gpus not in (None, "1"):
            raise click.UsageError("--search frontier runs on one GPU: drop --parallel and --gpus")
        scan_frontiers(
            workloads,
            opts,
            out_dir,
            frontier_budget,
            checkpointing,
            parse_lora(lora),
            ProgressPrinter({f"{w.name}": "n" for w in workloads}),
        )
        return
    if parallel:
        scan_parallel(workloads, opts, gpus, out_dir, models_file)
        return
    from memprobe.probe.distributed.scan import DistributedScanError, gpu_count
    from memprobe.probe.multi import check_runs, parse_gpus, parse_strategies, scan_runs

    try:
        sizes = parse_gpus(gpus, gpu_count if device == "cuda" else lambda: os.cpu_count() or 1)
        strategies = parse_strategies(strategy)
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
            for result, path in scan_runs(workload, opts, sizes, strategies, out_dir, progress):
                finished.append(result)
                failed |= any(p.status == "error" for p in result.precisions.values())
                user_errors += after_scan(result, path, workload)
        except DistributedScanError as exc:
            raise click.UsageError(str(exc)) from None
        except NoCudaError as exc:
            no_gpu(f"no CUDA device: {exc}", predict_if_no_gpu)
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
