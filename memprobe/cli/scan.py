"""`memprobe scan`: parse the options into ScanOptions, run probe.scan (or the multi-GPU / parallel drivers), print.
"""

from __future__ import annotations

import os
import sys

import click

from memprobe.cli import checks
from memprobe.cli.app import COMMON_CARD_SIZES, NoGPUExit, _int_list, _workloads, main
from memprobe.cli.helpers import interrupted_status, positive_size
from memprobe.cli.models import model_options as _model_options
from memprobe.cli.predict import _predict_and_print
from memprobe.cli.variants import split_batches
from memprobe.cli.variants import variant_options as _variant_options
from memprobe.core.registry import Workload
from memprobe.core.units import gib
from memprobe.core.variants import base_name


class _ProgressPrinter:
    """Live progress on stderr: one line per trial, finished in place when the trial ends. `n_names`
    names what a trial's n is per workload (default "batch"; "seq len" for a sequence-length search)."""

    def __init__(self, n_names: dict[str, str] | None = None) -> None:
        self.n_names = n_names or {}

    def precision_start(self, workload: str, precision: str) -> None:
        click.echo(f"[{workload} {precision}] starting (building the model in a trial process)", err=True)

    def trial_start(self, workload: str, precision: str, index: int, batch: int, fresh: bool) -> None:
        where = "fresh process" if fresh else "search"
        n_name = self.n_names.get(workload, "batch")
        click.echo(f"[{workload} {precision}] trial {index} ({where}): {n_name} {batch} ... ", err=True, nl=False)

    def trial_end(self, attempt) -> None:
        peak = f", peak {gib(attempt.peak_reserved, 2)} GiB" if attempt.peak_reserved else ""
        detail = f" ({attempt.message.splitlines()[0][:120]})" if attempt.message and not attempt.fits else ""
        click.echo(f"{attempt.outcome}{peak}, {attempt.seconds:.1f}s{detail}", err=True)

    def note(self, text: str) -> None:
        click.echo(f"  {text}", err=True)


@main.command("scan")
@click.option("--model", "-m", "model", required=True,
              help="Workload name(s), comma-separated; wildcards and 'all' work. Also timm:NAME, hf:NAME, "
                   "hf-config:PATH, FILE.py:FUNCTION or package.module:FUNCTION (README: your own model).")
@click.option("--precision", "-p", default="fp32,fp16,bf16", show_default=True,
              help="Comma-separated: fp32 (TF32 off), tf32, fp16 (autocast + GradScaler), bf16 (autocast).")
@click.option("--mode", type=click.Choice(["train", "infer"]), default="train", show_default=True,
              help="train: forward, loss, backward, optimizer step. infer: forward only.")
@click.option("--batch", "batches", help="Also measure throughput at these batch sizes (an OOM there is reported). "
                                         "With --search seq-len: the one batch the sequence length is searched at (default 1).")
@_variant_options
@click.option("--out", "out_dir", default="reports", show_default=True, type=checks.Path(file_okay=False),
              help="Folder for the result file.")
@click.option("--models", "models_file", type=checks.Path(dir_okay=False), help="Registry file (default: the packaged models.yaml).")
@click.option("--steps", default=3, show_default=True, type=click.IntRange(3, checks.MAX_SCAN_STEPS),
              help="Steps per trial: 1 warm-up + K >= 2 (longer runs: --soak).")
@click.option("--warmup", default=3, show_default=True, type=click.IntRange(0, checks.MAX_WARMUP),
              help="Warm-up steps before timing.")
@click.option("--timed-steps", default=10, show_default=True, type=click.IntRange(1, checks.MAX_TIMED_STEPS),
              help="Timed steps for throughput.")
@click.option("--max-batch", default=65536, show_default=True, type=click.IntRange(1, checks.MAX_BATCH),
              help="Largest batch the search tries.")
@click.option("--max-trials", default=40, show_default=True, type=click.IntRange(2, checks.MAX_TRIALS), help="Most search trials per precision (fresh-process proof checks not counted).")
@click.option("--no-throughput", is_flag=True, help="Only find the max batch; skip timing.")
@click.option("--soak", default=0, show_default=True, type=click.IntRange(0, checks.MAX_SOAK),
              help="After the proof, train the max batch this many more steps in a fresh process and lower it "
                   "until that passes (recorded as proof.soak); 0 = off.")
@click.option("--predicted-start/--no-predicted-start", "predicted_start", default=None,
              help="Start the search at the max batch `memprobe predict` gives on the CPU, computed while the first "
                   "trials run (default: on for CUDA without --compile). Only the start: the search "
                   "and the fresh-process proof are unchanged.")
@click.option("--breakdown/--no-breakdown", "breakdown", default=None,
              help="After the proof, measure where the memory goes at B (parameters, gradients, optimizer state, "
                   "activations, ...) in one more fresh process under PyTorch's MemTracker; B is not changed "
                   "(default: on for CUDA training scans).")
@click.option("--curve", "curve", is_flag=False, flag_value="auto", default="auto", metavar="[B1,B2,...]",
              help="Throughput curve (default on): time a ladder of batches up to B and report the best batch b*. "
                   "Default ladder: powers of two below B (up to 7) plus B; give sizes to choose them.")
@click.option("--no-curve", is_flag=True, help="Skip the throughput curve (only B is timed).")
@click.option("--curve-budget", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Seconds the curve may take per precision: no point starts whose estimated cost would end past "
                   "them (default 45 in training, 20 in inference).")
@click.option("--cudnn-benchmark", is_flag=True, help="Let cuDNN pick algorithms by timing (changes memory near the edge).")
@click.option("--compile", "compile_step", is_flag=True,
              help="Run the model's forward and backward through torch.compile in every trial and timed run: the "
                   "max batch and throughput are those of the compiled step; compile time is reported apart.")
@click.option("--device", "device", type=click.Choice(["cuda", "cpu"]), default="cuda", show_default=True,
              help="cpu runs the same code path with a fake allocator (for tests and demos; needs --cpu-memory-budget).")
@click.option("--cpu-memory-budget", help="With --device cpu: the memory budget, e.g. 64MiB.")
@click.option("--memory-cap", help="Emulate a card with this much memory (e.g. 24GiB) on a bigger one: the allocator is "
                                  "capped at it minus the memory measured outside PyTorch (context, kernels); "
                                  "results are labelled emulated.")
@_model_options
@click.option("--gpus", "gpus", help="World size(s) to measure: N[,N...] or 'all' (default 1: the single-GPU scan). "
                                     "N > 1 finds the per-GPU max batch of N ranks launched by torchrun, and the scaling "
                                     "efficiency against 1 GPU. With --parallel: how many GPUs to spread jobs over (default all).")
@click.option("--strategy", default="ddp", show_default=True,
              help="With --gpus N > 1, comma-separated: ddp (DistributedDataParallel), fsdp (FSDP2 fully_shard per block).")
@click.option("--parallel", is_flag=True, help="Run different workloads and precisions on different GPUs at once "
                                               "(one child scan per GPU); writes the same result files as a serial scan.")
@click.option("--predict-if-no-gpu", is_flag=True,
              help=f"With no CUDA device, predict the max batch for {COMMON_CARD_SIZES} instead of failing "
                   "(memprobe predict; a prediction, not a measurement; exit 0).")
def scan_cmd(model: str, precision: str, mode: str, batches: str | None, out_dir: str, models_file: str | None,
             steps: int, warmup: int, timed_steps: int, max_batch: int, max_trials: int, no_throughput: bool, soak: int,
             curve: str, no_curve: bool, curve_budget: float | None, predicted_start: bool | None, breakdown: bool | None, cudnn_benchmark: bool, compile_step: bool,
             device: str, cpu_memory_budget: str | None,
             memory_cap: str | None, input_size: str | None, optimizer: str | None, task: str | None,
             seq_len: int | None, gpus: str | None, strategy: str, parallel: bool, predict_if_no_gpu: bool, search: str,
             checkpointing: bool, lora: str | None, frontier_budget: float | None) -> None:
    """Find the exact max batch of each model and precision on this GPU, then measure throughput there.

    For each precision: a memory-guided search (small batches in one trial process, trials near
    the edge each in a fresh process forked from a pre-imported server), the final pair (B fits, B+1 does
    not) proven in fresh processes (a fresh search trial counts; B is re-run with the timed steps),
    then timed steps at B with utilization sampled, then the throughput curve (--no-curve skips it).
    One result file per model is written (atomically, after every precision) under --out.
    """
    from memprobe.cli.frontier import frontier_request
    from memprobe.probe.scan import NoCudaError, ScanInterrupted, ScanOptions

    checks.scan_checks(click.get_current_context(), device, gpus, no_curve, no_throughput, parallel)
    frontier = frontier_request(search, seq_len, batches, frontier_budget)
    request_batch, timed_batches = split_batches(search, _int_list(batches, "--batch"))
    workloads = (_workloads(models_file, model, precision, input_size, optimizer, task, None, "batch", 1, False, None)
                 if frontier else _workloads(models_file, model, precision, input_size, optimizer, task, seq_len,
                                             search, request_batch, checkpointing, lora))
    budget = None
    if device == "cpu":
        if not cpu_memory_budget:
            raise click.UsageError("--device cpu needs --cpu-memory-budget (the CPU has no allocator limit to find)")
        budget = positive_size(cpu_memory_budget, "--cpu-memory-budget")
    cap = None
    if memory_cap:
        cap = positive_size(memory_cap, "--memory-cap")
    try:
        opts = ScanOptions(precisions=[p.strip() for p in precision.split(",") if p.strip()], mode=mode, steps=steps,
                           warmup=warmup, timed_steps=timed_steps, batches=timed_batches,
                           max_batch=max_batch, max_trials=max_trials, measure=not no_throughput, device=device,
                           cpu_budget_bytes=budget, cudnn_benchmark=cudnn_benchmark, memory_cap_bytes=cap,
                           compile=compile_step, soak=soak, curve=not no_curve, predicted_start=predicted_start,
                           curve_batches=[] if curve == "auto" else _int_list(curve, "--curve"),
                           curve_budget_s=curve_budget, breakdown=breakdown)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if device == "cuda":
        try:
            _require_gpu()
        except NoGPUExit as exc:
            _no_gpu(exc.message, workloads, opts, mode, predict_if_no_gpu)
            return

    _writable(out_dir)  # now, not after the first precision's minutes of trials
    if frontier:
        from memprobe.cli.frontier import scan_frontiers
        from memprobe.core.variants import parse_lora

        if parallel or gpus not in (None, "1"):
            raise click.UsageError("--search frontier runs on one GPU: drop --parallel and --gpus")
        scan_frontiers(workloads, opts, out_dir, frontier_budget, checkpointing, parse_lora(lora), _ProgressPrinter(
            {f"{w.name}": "n" for w in workloads}))
        return
    if parallel:
        _scan_parallel(workloads, opts, gpus, out_dir, models_file)
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
    progress = _ProgressPrinter({w.name: "seq len" for w in workloads if w.params.get("axis") == "seq_len"})
    finished = []
    failed = False
    user_errors = []
    for workload in workloads:
        try:
            for result, path in scan_runs(workload, opts, sizes, strategies, out_dir, progress):
                finished.append(result)
                failed |= any(p.status == "error" for p in result.precisions.values())
                user_errors += _after_scan(result, path, workload)
        except DistributedScanError as exc:
            raise click.UsageError(str(exc)) from None
        except NoCudaError as exc:
            _no_gpu(f"no CUDA device: {exc}", workloads, opts, mode, predict_if_no_gpu)
            return
        except ScanInterrupted as stop:
            kept = (f"the finished precisions are in {stop.path} (marked partial)" if stop.path
                    else f"no precision of {workload.name} had finished, so no result file was written")
            click.echo(f"\ninterrupted: {kept}", err=True)
            sys.exit(interrupted_status())
    _print_scans(finished)
    if user_errors:
        raise click.ClickException(user_errors[0])
    if failed:
        sys.exit(1)


def _after_scan(result, path, workload: Workload) -> list[str]:
    """Say what a finished scan wrote and why a model fits nothing where it does not; returns its user-code errors."""
    from memprobe.core.outcomes import USER_ERROR

    click.echo(f"wrote {path}" + (" (status failed: every precision ended in an error)"
                                  if result.status == "failed" else ""), err=True)
    from memprobe.probe.nothing_fits import described

    for line in described(result, workload):  # what the scan recorded where nothing trains at 1
        click.echo(line, err=True)
    return [f"{workload.name} {p.precision}: {p.error.splitlines()[0]} "
            f"({'traceback' if len(p.error.splitlines()) > 1 else 'details'} in {path})"
            for p in result.precisions.values() if p.stop == USER_ERROR]


def _print_scans(results: list) -> None:
    """The scan table of single-GPU results, then the scaling table of multi-GPU ones."""
    from memprobe.compare.scaling import scaling_table, split_by_world_size
    from memprobe.compare.scan_table import scan_table

    single, multi = split_by_world_size(results)
    if single:
        click.echo(scan_table(single))
    if multi:
        click.echo(scaling_table(multi, single), nl=False)


def _scan_parallel(workloads: list[Workload], opts, gpus: str | None, out_dir: str, models_file: str | None) -> None:
    """--parallel: one child scan per workload and precision, each pinned to its own GPU."""
    from memprobe.probe.parallel import gpu_slots, run_parallel

    try:
        count = None if gpus in (None, "", "all") else int(gpus)
        if count is not None and count < 1:
            raise ValueError(f"--gpus {count}: give 1 or more GPUs")
        slots = gpu_slots(count, opts.device)
    except ValueError as exc:
        raise click.UsageError(f"--parallel: {exc}" if "--gpus" in str(exc) else
                               f"--parallel takes --gpus N (how many GPUs to use) or all: {exc}") from None
    try:
        written, summary = run_parallel(workloads, opts, slots, out_dir, models_file,
                                        on_event=lambda text: click.echo(text, err=True))
    except KeyboardInterrupt:
        click.echo("\ninterrupted: the finished precisions were merged into result files (marked partial)", err=True)
        sys.exit(interrupted_status())
    for _result, path in written:
        click.echo(f"wrote {path}", err=True)
    click.echo(f"parallel scan on {len(slots)} GPU(s): {summary.wall_seconds:.0f} s wall, serial estimate (sum of the "
               f"jobs) {summary.serial_estimate_seconds:.0f} s; log and summary in {summary.folder}", err=True)
    _print_scans([result for result, _path in written])
    if any(j["returncode"] not in (0, None) for j in summary.jobs):
        sys.exit(1)


def _writable(out_dir: str) -> None:
    """--out exists or can be made, and a result file can be written there; one-line error otherwise."""
    from memprobe.core.outputs import OutputError, prepare_dir

    try:
        prepare_dir(out_dir, suffixes=(".json",))
    except OutputError as exc:
        raise click.BadParameter(str(exc), param_hint="--out") from None


def _require_gpu() -> None:
    from memprobe.probe.device import NoGPUError, visible_gpu

    try:
        gpu = visible_gpu()
    except NoGPUError as exc:
        raise NoGPUExit(f"no CUDA GPU: {exc}") from None
    for p in gpu.processes:
        click.echo(f"warning: process {p.pid} {p.name} holds {gib(p.used_bytes, 2)} GiB on {gpu.name}; "
                   "the max batch found will be lower than on an idle card", err=True)


def _no_gpu(message: str, workloads: list[Workload], opts, mode: str, predict_instead: bool) -> None:
    """No CUDA device for a scan: exit 2 offering `memprobe predict`, or (predict_instead) predict and return.

    The prediction subtracts the overhead memprobe ships (memprobe/data/overhead.yaml), as `memprobe predict` does.
    """
    names = ",".join(dict.fromkeys(base_name(w.name) for w in workloads))
    same = " (with the same --search, --seq-len, --checkpointing and --lora)" if any("+" in w.name for w in workloads) else ""
    if not predict_instead:
        raise NoGPUExit(f"{message}. Without a GPU, `memprobe predict --model {names} --memory {COMMON_CARD_SIZES}`{same} "
                        "predicts the max batch on those card sizes (or rerun this scan with --predict-if-no-gpu)")
    if mode != "train":
        raise NoGPUExit(f"{message}; --predict-if-no-gpu predicts training steps only (--mode train)")
    click.echo(f"{message}: predicting instead of measuring (memprobe predict; nothing is measured and no result "
               "file is written)", err=True)
    _predict_and_print(workloads, opts.precisions, COMMON_CARD_SIZES, None, opts.trial_steps, None, mode=opts.mode)
