"""The `memprobe` command line. Thin: parse, build a request, call one core function, print.

User errors are one line and a non-zero exit: 1 for a failed scan or bad file, 2 for bad usage or
no CUDA device (unless `scan --predict-if-no-gpu` predicted instead: 0), 130 for Ctrl-C (after
writing what finished).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from tabulate import tabulate

from memprobe.registry import RegistryError, Workload, load_registry, select
from memprobe.units import gib, parse_size

EXIT_NO_GPU = 2
EXIT_INTERRUPTED = 130
# Card sizes a no-GPU scan offers to predict for: 11 GB (GTX 1080 Ti / RTX 2080 Ti class), 24 GB (RTX 3090/4090),
# 48 GB (RTX A6000 / L40S), 80 GB (A100 / H100).
COMMON_CARD_SIZES = "11GiB,24GiB,48GiB,80GiB"


class NoGPUExit(click.ClickException):
    exit_code = EXIT_NO_GPU


def _registry(models: str | None) -> dict[str, Workload]:
    try:
        return load_registry(models)
    except RegistryError as exc:
        raise click.ClickException(str(exc)) from None


def _int_list(text: str | None, what: str) -> list[int]:
    if not text:
        return []
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got '{text}'", param_hint=what) from None
    if any(v < 1 for v in values):
        raise click.BadParameter("batch sizes must be at least 1", param_hint=what)
    return values


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="memprobe")
def main() -> None:
    """memprobe: the exact largest batch that trains on your GPU, and how fast it trains there.

    Start with `memprobe list` (the workloads), `memprobe device` (the GPU), then
    `memprobe scan --model bert-large`.
    """


@main.command("list")
@click.option("--models", "models_file", type=click.Path(dir_okay=False), help="Registry file (default: the packaged models.yaml).")
@click.option("--all", "show_all", is_flag=True, help="Include test-only workloads.")
def list_cmd(models_file: str | None, show_all: bool) -> None:
    """List the workloads memprobe can scan."""
    registry = _registry(models_file)
    rows = [
        [w.name, w.family, w.unit, w.optimizer.get("name"), ", ".join(f"{k}={v}" for k, v in w.params.items()), w.description]
        for w in registry.values() if show_all or not w.test_only
    ]
    click.echo(tabulate(rows, headers=["name", "family", "unit", "optimizer", "params", "description"], tablefmt="github"))


@main.command("device")
def device_cmd() -> None:
    """Show the GPUs: memory, driver, CUDA and torch versions, and other processes holding memory."""
    from memprobe.device import NoGPUError, gpus, host_environment

    env = host_environment()
    try:
        found = gpus()
    except NoGPUError as exc:
        raise NoGPUExit(f"no CUDA GPU: {exc}") from None
    rows = [[g.index, g.name, gib(g.total_bytes), gib(g.free_bytes), gib(g.used_bytes), len(g.processes)] for g in found]
    click.echo(tabulate(rows, headers=["index", "name", "total GiB", "free GiB", "used GiB", "processes"], tablefmt="github"))
    torch_cuda = _torch_cuda_version()
    click.echo(f"driver {env.get('driver')}, CUDA (driver) {env.get('cuda_driver')}, "
               f"torch {env['versions'].get('torch')} (CUDA runtime {torch_cuda})")
    click.echo(f"PYTORCH_CUDA_ALLOC_CONF={env.get('PYTORCH_CUDA_ALLOC_CONF') or '(unset)'}")
    for g in found:
        for p in g.processes:
            click.echo(f"warning: GPU {g.index}: process {p.pid} {p.name} holds {gib(p.used_bytes, 2)} GiB; "
                       "a scan's max batch will be lower while it runs", err=True)
        if not g.processes and g.used_bytes > 1 << 30:
            click.echo(f"warning: GPU {g.index}: {gib(g.used_bytes)} GiB in use by processes NVML cannot list", err=True)


def _torch_cuda_version() -> str:
    try:
        import torch
    except ImportError:
        return "torch not installed"
    return torch.version.cuda or "none (CPU build)"


class _ProgressPrinter:
    """Live progress on stderr: one line per trial, finished in place when the trial ends."""

    def precision_start(self, workload: str, precision: str) -> None:
        click.echo(f"[{workload} {precision}] starting (building the model in a trial process)", err=True)

    def trial_start(self, workload: str, precision: str, index: int, batch: int, fresh: bool) -> None:
        where = "fresh process" if fresh else "search"
        click.echo(f"[{workload} {precision}] trial {index} ({where}): batch {batch} ... ", err=True, nl=False)

    def trial_end(self, attempt) -> None:
        peak = f", peak {gib(attempt.peak_reserved, 2)} GiB" if attempt.peak_reserved else ""
        detail = f" ({attempt.message[:120]})" if attempt.message and not attempt.fits else ""
        click.echo(f"{attempt.outcome}{peak}, {attempt.seconds:.1f}s{detail}", err=True)

    def note(self, text: str) -> None:
        click.echo(f"  {text}", err=True)


@main.command("scan")
@click.option("--model", "-m", "model", required=True, help="Workload name(s), comma-separated; wildcards and 'all' work.")
@click.option("--precision", "-p", default="fp32,fp16,bf16", show_default=True,
              help="Comma-separated: fp32 (TF32 off), tf32, fp16 (autocast + GradScaler), bf16 (autocast).")
@click.option("--mode", type=click.Choice(["train", "infer"]), default="train", show_default=True,
              help="train: forward, loss, backward, optimizer step. infer: forward only.")
@click.option("--batch", "batches", help="Also measure throughput at these batch sizes (an OOM there is reported).")
@click.option("--out", "out_dir", default="reports", show_default=True, type=click.Path(file_okay=False),
              help="Folder for the result file.")
@click.option("--models", "models_file", type=click.Path(dir_okay=False), help="Registry file (default: the packaged models.yaml).")
@click.option("--steps", default=3, show_default=True, type=click.IntRange(3), help="Steps per trial: 1 warm-up + K >= 2.")
@click.option("--warmup", default=3, show_default=True, type=click.IntRange(0), help="Warm-up steps before timing.")
@click.option("--timed-steps", default=10, show_default=True, type=click.IntRange(1), help="Timed steps for throughput.")
@click.option("--max-batch", default=65536, show_default=True, type=click.IntRange(1), help="Largest batch the search tries.")
@click.option("--max-trials", default=40, show_default=True, type=click.IntRange(2), help="Most search trials per precision (fresh-process proof checks not counted).")
@click.option("--no-throughput", is_flag=True, help="Only find the max batch; skip timing.")
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
             steps: int, warmup: int, timed_steps: int, max_batch: int, max_trials: int, no_throughput: bool,
             cudnn_benchmark: bool, compile_step: bool, device: str, cpu_memory_budget: str | None,
             memory_cap: str | None, gpus: str | None, strategy: str, parallel: bool, predict_if_no_gpu: bool) -> None:
    """Find the exact max batch of each model and precision on this GPU, then measure throughput there.

    For each precision: a memory-guided search (small batches in one trial process, trials near
    the edge each in a fresh process forked from a pre-imported server), the final pair (B fits, B+1 does
    not) proven in fresh processes (a fresh search trial counts; B is re-run with the timed steps),
    then timed steps at B with utilization sampled.
    One result file per model is written (atomically, after every precision) under --out.
    """
    from memprobe.probe.scan import NoCudaError, ScanInterrupted, ScanOptions

    registry = _registry(models_file)
    try:
        workloads = select(registry, model)
    except RegistryError as exc:
        raise click.ClickException(str(exc)) from None
    budget = None
    if device == "cpu":
        if not cpu_memory_budget:
            raise click.UsageError("--device cpu needs --cpu-memory-budget (the CPU has no allocator limit to find)")
        try:
            budget = parse_size(cpu_memory_budget)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--cpu-memory-budget") from None
    cap = None
    if memory_cap:
        try:
            cap = parse_size(memory_cap)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--memory-cap") from None
    try:
        opts = ScanOptions(precisions=[p.strip() for p in precision.split(",") if p.strip()], mode=mode, steps=steps,
                           warmup=warmup, timed_steps=timed_steps, batches=_int_list(batches, "--batch"),
                           max_batch=max_batch, max_trials=max_trials, measure=not no_throughput, device=device,
                           cpu_budget_bytes=budget, cudnn_benchmark=cudnn_benchmark, memory_cap_bytes=cap,
                           compile=compile_step)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if device == "cuda":
        try:
            _require_gpu()
        except NoGPUExit as exc:
            _no_gpu(exc.message, workloads, opts, mode, out_dir, predict_if_no_gpu)
            return

    if parallel:
        _scan_parallel(workloads, opts, gpus, out_dir, models_file)
        return
    from memprobe.probe.distributed.scan import DistributedScanError, gpu_count
    from memprobe.probe.multi import parse_gpus, parse_strategies, scan_runs

    try:
        sizes = parse_gpus(gpus, gpu_count if device == "cuda" else lambda: os.cpu_count() or 1)
        strategies = parse_strategies(strategy)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    progress = _ProgressPrinter()
    finished = []
    failed = False
    for workload in workloads:
        try:
            for result, path in scan_runs(workload, opts, sizes, strategies, out_dir, progress):
                finished.append(result)
                failed |= any(p.status == "error" for p in result.precisions.values())
                click.echo(f"wrote {path}", err=True)
        except DistributedScanError as exc:
            raise click.UsageError(str(exc)) from None
        except NoCudaError as exc:
            _no_gpu(f"no CUDA device: {exc}", workloads, opts, mode, out_dir, predict_if_no_gpu)
            return
        except ScanInterrupted as stop:
            kept = (f"the finished precisions are in {stop.path} (marked partial)" if stop.path
                    else f"no precision of {workload.name} had finished, so no result file was written")
            click.echo(f"\ninterrupted: {kept}", err=True)
            sys.exit(EXIT_INTERRUPTED)
    _print_scans(finished)
    if failed:
        sys.exit(1)


def _print_scans(results: list) -> None:
    """The scan table of single-GPU results, then the scaling table of multi-GPU ones."""
    from memprobe.compare.report import scan_table
    from memprobe.compare.scaling import scaling_table, split_by_world_size

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
        slots = gpu_slots(count, opts.device)
    except ValueError as exc:
        raise click.UsageError(f"--parallel: {exc}" if "--gpus" in str(exc) else
                               f"--parallel takes --gpus N (how many GPUs to use) or all: {exc}") from None
    try:
        written, summary = run_parallel(workloads, opts, slots, out_dir, models_file,
                                        on_event=lambda text: click.echo(text, err=True))
    except KeyboardInterrupt:
        click.echo("\ninterrupted: the finished precisions were merged into result files (marked partial)", err=True)
        sys.exit(EXIT_INTERRUPTED)
    for _result, path in written:
        click.echo(f"wrote {path}", err=True)
    click.echo(f"parallel scan on {len(slots)} GPU(s): {summary.wall_seconds:.0f} s wall, serial estimate (sum of the "
               f"jobs) {summary.serial_estimate_seconds:.0f} s; log and summary in {summary.folder}", err=True)
    _print_scans([result for result, _path in written])
    if any(j["returncode"] not in (0, None) for j in summary.jobs):
        sys.exit(1)


def _require_gpu() -> None:
    from memprobe.device import NoGPUError, visible_gpu

    try:
        gpu = visible_gpu()
    except NoGPUError as exc:
        raise NoGPUExit(f"no CUDA GPU: {exc}") from None
    for p in gpu.processes:
        click.echo(f"warning: process {p.pid} {p.name} holds {gib(p.used_bytes, 2)} GiB on {gpu.name}; "
                   "the max batch found will be lower than on an idle card", err=True)


def _no_gpu(message: str, workloads: list[Workload], opts, mode: str, out_dir: str, predict_instead: bool) -> None:
    """No CUDA device for a scan: exit 2 offering `memprobe predict`, or (predict_instead) predict and return.

    The prediction subtracts the overhead measured in the result files under --out, when there are any.
    """
    names = ",".join(w.name for w in workloads)
    if not predict_instead:
        raise NoGPUExit(f"{message}. Without a GPU, `memprobe predict --model {names} --memory {COMMON_CARD_SIZES}` "
                        "predicts the max batch on those card sizes (or rerun this scan with --predict-if-no-gpu)")
    if mode != "train":
        raise NoGPUExit(f"{message}; --predict-if-no-gpu predicts training steps only (--mode train)")
    click.echo(f"{message}: predicting instead of measuring (memprobe predict; nothing is measured and no result "
               "file is written)", err=True)
    _predict_and_print(workloads, opts.precisions, COMMON_CARD_SIZES, (out_dir,), opts.steps, None)


def _memory_list(text: str) -> list[tuple[str, int]]:
    sizes = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        try:
            sizes.append((item, parse_size(item)))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--memory") from None
    if not sizes:
        raise click.BadParameter("give at least one memory size, e.g. 24GiB", param_hint="--memory")
    return sizes


def _predict_and_print(workloads: list[Workload], precisions: list[str], memory: str, overhead_from: tuple[str, ...],
                       steps: int, compare: str | None) -> None:
    from memprobe.predict.predictor import PredictError, measured_overhead, memory_sizes, predict, render

    labels = _memory_list(memory)
    overhead, source = measured_overhead(overhead_from)
    try:
        sizes = memory_sizes(labels, overhead)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--memory") from None
    compare_with = None
    if compare:
        from memprobe.results import ResultFileError, read_result

        try:
            compare_with = (compare, read_result(compare))
        except ResultFileError as exc:
            raise click.ClickException(str(exc)) from None
        if compare_with[1].workload.get("name") not in {w.name for w in workloads}:
            raise click.ClickException(f"{compare} is a scan of {compare_with[1].workload.get('name')}, "
                                       f"not of {', '.join(w.name for w in workloads)}")
    for workload in workloads:
        click.echo(f"[{workload.name}] tracing on fake tensors (no GPU used) ...", err=True)
        try:
            prediction = predict(workload, precisions, sizes, overhead, source, steps=steps,
                                 compare_with=compare_with if compare_with and
                                 compare_with[1].workload.get("name") == workload.name else None)
        except PredictError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(render(prediction))


@main.command("predict")
@click.option("--model", "-m", "model", required=True, help="Workload name(s), comma-separated; wildcards work.")
@click.option("--memory", default=COMMON_CARD_SIZES, show_default=True,
              help="Comma-separated memory sizes of the cards to predict for (datasheet sizes: 24GiB, 80GiB, 11GB).")
@click.option("--precision", "-p", default="fp32,fp16,bf16", show_default=True,
              help="Comma-separated: fp32, tf32, fp16, bf16 (as in scan).")
@click.option("--models", "models_file", type=click.Path(dir_okay=False), help="Registry file (default: the packaged models.yaml).")
@click.option("--overhead-from", "overhead_from", multiple=True, type=click.Path(), default=("reports",),
              show_default=True,
              help="Scan result file(s) or folder(s): the memory a real card's allocator could not use (CUDA context, "
                   "driver) is measured there and subtracted from each size, as `memprobe guide` does.")
@click.option("--compare", type=click.Path(exists=True, dir_okay=False),
              help="A scan result file of this workload: also print predicted vs measured peaks for its trials, and "
                   "the predicted max batch at its allocator capacity beside the measured one.")
@click.option("--steps", default=3, show_default=True, type=click.IntRange(3), help="Steps per trial: 1 warm-up + K >= 2.")
def predict_cmd(model: str, memory: str, precision: str, models_file: str | None, overhead_from: tuple[str, ...],
                compare: str | None, steps: int) -> None:
    """Predict the max batch for any memory size, with no GPU (labelled predicted, not measured).

    Runs the scan's trial (1 warm-up + K steps, optimizer state included) on fake tensors with the
    CUDA code paths of an H100 (fused attention, fused dropout and optimizers, CUDA autocast),
    records every allocation and replays it through a model of the CUDA caching allocator. Takes
    seconds to a minute on a CPU. Needs torch, but no GPU.
    """
    registry = _registry(models_file)
    try:
        workloads = select(registry, model)
    except RegistryError as exc:
        raise click.ClickException(str(exc)) from None
    precisions = _precision_list(precision) or []
    if not precisions:
        raise click.BadParameter("give at least one precision", param_hint="--precision")
    _predict_and_print(workloads, precisions, memory, overhead_from, steps, compare)


_FORMATS = ("github", "plain", "csv", "json")


def _load_results(paths: tuple[str, ...]) -> list:
    """(path, result) pairs. A file named explicitly must be a result file (one-line error otherwise);
    a .json found under a folder that is not one is skipped with a warning (e.g. benchmark outputs)."""
    from memprobe.results import ResultFileError, load_results

    try:
        return load_results(list(paths), on_skip=lambda exc: click.echo(f"warning: skipped {exc}", err=True))
    except ResultFileError as exc:
        raise click.ClickException(str(exc)) from None


def _precision_list(text: str | None) -> list[str] | None:
    from memprobe.catalog import PRECISIONS

    if not text:
        return None
    chosen = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in PRECISIONS]
    if unknown:
        raise click.BadParameter(f"unknown precision(s) {', '.join(unknown)} (known: {', '.join(PRECISIONS)})",
                                 param_hint="--precision")
    return chosen


@main.command("report")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--reference", help="GPU that throughput is normalized to (catalog or device name). "
                                  "Default: Quadro RTX 8000 where present, else the first GPU given.")
@click.option("--precision", "-p", "precision", help="Comma-separated precisions to show (default: all found).")
@click.option("--format", "fmt", type=click.Choice(_FORMATS), default="github", show_default=True,
              help="github (markdown), plain, csv or json.")
@click.option("--with-published", is_flag=True,
              help="Add published figures (2020 study, 2023-2025 PyTorch catalog) for the workloads that have them, "
                   "marked (pub).")
@click.option("--charts", "charts_dir", type=click.Path(file_okay=False),
              help="Also write PNG and SVG charts into this folder.")
@click.option("--scans", is_flag=True,
              help="Print the scan summary instead (max batch, proof, trials, throughput, MFU, utilization): one row "
                   "per GPU, workload and precision, from the newest file that finished it.")
def report_cmd(paths: tuple[str, ...], reference: str | None, precision: str | None, fmt: str, with_published: bool,
               charts_dir: str | None, scans: bool) -> None:
    """Compare result files from any number of machines.

    PATHS are result files or folders (searched for *.json; other JSON files there are skipped with a
    warning). Prints max batch, throughput with MFU, throughput relative to a reference GPU (OOM = 0),
    the mixed-precision gain over fp32 and utilization. Cells memprobe did not measure are marked.
    """
    from memprobe.compare.report import ReportError, comparison_report, scan_table

    from memprobe.compare.scaling import scaling_table, split_by_world_size

    loaded, multi = split_by_world_size(_load_results(paths))
    if multi and (loaded or with_published) and fmt == "json":
        raise click.UsageError("--format json makes one document: report multi-GPU and single-GPU files separately")
    if multi:  # multi-GPU files get the scaling table, not the single-GPU tables
        click.echo(scaling_table([r for _p, r in multi], [r for _p, r in loaded], fmt), nl=False)
        if not loaded and not with_published:
            return
    if scans:
        if not loaded:
            raise click.ClickException(f"no memprobe result files in {', '.join(paths)}")
        click.echo(scan_table([result for _path, result in loaded], fmt, newest_only=True,
                              precisions=_precision_list(precision)))
        return
    if not loaded and not with_published:
        raise click.ClickException(f"no memprobe result files in {', '.join(paths)}")
    try:
        text, comparison, relative = comparison_report(loaded, reference=reference, precisions=_precision_list(precision),
                                                       fmt=fmt, with_published=with_published)
    except ReportError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(text, nl=False)
    if charts_dir:
        from memprobe.compare.charts import write_charts

        for written in write_charts(comparison, relative, loaded, charts_dir):
            click.echo(f"wrote {written}", err=True)


@main.command("guide")
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--budget", type=click.FloatRange(min=0), help="Only cards whose typical price (USD) is at most this.")
@click.option("--format", "fmt", type=click.Choice(_FORMATS), default="github", show_default=True,
              help="github (markdown), plain, csv or json.")
def guide_cmd(paths: tuple[str, ...], budget: float | None, fmt: str) -> None:
    """GPU purchase guidance from result files: the max batch predicted on every catalog card.

    Uses each scan's fitted memory model (static + per-sample bytes) and the memory overhead measured on
    the scanned card; adds throughput per 1000 USD and per watt where measured or published, and a
    one-line verdict per card. Without PATHS it shows the catalog and the published figures only.
    """
    from memprobe.compare.guide import guide_report
    from memprobe.compare.scaling import split_by_world_size

    loaded, _multi_gpu = split_by_world_size(_load_results(paths))  # the guide is about one card
    if paths and not loaded:
        raise click.ClickException(f"no memprobe result files in {', '.join(paths)}")
    click.echo(guide_report(loaded, budget=budget, fmt=fmt), nl=False)


if __name__ == "__main__":
    main()
