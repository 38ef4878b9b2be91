"""`memprobe scan`: parse the options into a ScanRequest (its declared fields), build its ScanOptions
(memprobe.request, as the API does), run probe.scan (or the multi-GPU / parallel drivers), print."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from memprobe.cli import checks
from memprobe.cli.app import NoGPUExit, main
from memprobe.cli.declared import request_options
from memprobe.cli.helpers import interrupted_status, writable
from memprobe.cli.no_gpu import no_gpu, require_gpu
from memprobe.cli.options import request_error
from memprobe.cli.scan_output import after_scan, print_scans
from memprobe.cli.scan_parallel import scan_parallel
from memprobe.cli.scan_progress import ProgressPrinter
from memprobe.cli.width import wide_option
from memprobe.core.process.interrupts import SCAN_CLEAN_UP_S, allow_clean_up
from memprobe.core.workload.registry import RegistryError, Workload
from memprobe.request import ModelRequest, RequestError, ScanJob, ScanRequest, scan_job
from memprobe.request.model import modelled


@main.command("scan")
@request_options(ModelRequest, only=["models"])
@request_options(ScanRequest)
@request_options(ModelRequest, skip=["models"])
@wide_option
def scan_cmd(**params: Any) -> None:
    """Find the exact max batch of each model and precision on this GPU, then measure throughput there.

    For each precision: a memory-guided search (small batches in one trial process, trials near
    the edge each in a fresh process forked from a pre-imported server), the final pair (B fits, B+1 does
    not) proven in fresh processes (a fresh search trial counts; B is re-run with the timed steps),
    then timed steps at B with utilization sampled, then the throughput curve (--no-curve skips it).
    One result file per model is written (atomically, after every precision) under --out.
    """
    allow_clean_up(SCAN_CLEAN_UP_S)  # after Ctrl-C a scan ends its trial processes, then writes what finished
    request = modelled(ScanRequest, dict(params))
    checks.scan_checks(click.get_current_context(), request)
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
            no_gpu(exc.message, request)
            return

    writable(str(request.out_dir))  # now, not after the first precision's minutes of trials
    if job.frontier:
        if request.parallel or not request.one_gpu:
            raise click.UsageError("--search frontier runs on one GPU: drop --parallel and --gpus")
        _frontiers(job, request)
        return
    if request.parallel:
        scan_parallel(job, request.gpus, str(request.out_dir))
        return
    from memprobe.probe.distributed.scan import DistributedScanError, gpu_count
    from memprobe.probe.multi import check_runs, parse_gpus
    from memprobe.probe.scan import NoCudaError

    try:
        sizes = parse_gpus(request.gpus, gpu_count if request.device == "cuda" else lambda: os.cpu_count() or 1)
        strategies = list(request.strategies)
        for workload in job.workloads:  # every workload, before the first one runs
            check_runs(workload, job.options, sizes, strategies)
    except ValueError as exc:  # DistributedScanError too
        raise click.UsageError(str(exc)) from None
    try:
        scan_and_print(job, sizes, strategies, str(request.out_dir))
    except DistributedScanError as exc:
        raise click.UsageError(str(exc)) from None
    except NoCudaError as exc:
        no_gpu(f"no CUDA device: {exc}", request)


def scan_and_print(job: ScanJob, sizes: list[int], strategies: list[str], out_dir: str) -> None:
    """Scan each workload of `job` at each world size (and strategy), saying what each wrote, then print the tables;
    exit 1 when a precision ended in an error, 130/143 when stopped (what finished is kept). Raises
    probe.scan.NoCudaError with no CUDA device, DistributedScanError for a multi-GPU scan that cannot run."""
    from memprobe.probe.multi import scan_runs
    from memprobe.probe.scan import ScanInterrupted

    progress = ProgressPrinter({w.name: "seq len" for w in job.workloads if w.params.get("axis") == "seq_len"})
    finished = []
    failed = False
    user_errors = []
    for workload in job.workloads:
        try:
            for result, path in scan_runs(workload, job.options, sizes, strategies, out_dir, progress):
                finished.append(result)
                failed |= any(p.status == "error" for p in result.precisions.values())
                user_errors += after_scan(result, path, workload)
        except ScanInterrupted as stop:
            _interrupted(stop.path, workload)
    print_scans(finished)
    if user_errors:
        raise click.ClickException(user_errors[0])
    if failed:
        sys.exit(1)


def _interrupted(path: Any, workload: Workload) -> None:
    """Say what an interrupted scan kept and exit with the signal's status."""
    kept = (
        f"what finished (precisions, trials so far) is in {path} (marked partial)"
        if path
        else f"no trial of {workload.name} had finished, so no result file was written"
    )
    click.echo(f"\ninterrupted: {kept}", err=True)
    sys.exit(interrupted_status())


def _frontiers(job: ScanJob, request: ScanRequest) -> None:
    """scan --search frontier: each workload's frontier, measured on this GPU."""
    from memprobe.cli.frontier import scan_frontiers

    scan_frontiers(
        job.workloads,
        job.options,
        str(request.out_dir),
        request.model.frontier_budget,
        request.model.checkpointing,
        job.lora_rank,
        ProgressPrinter({f"{w.name}": "n" for w in job.workloads}),
    )


@main.command("scan-part", hidden=True)
@click.argument("request_file", type=checks.Path(exists=True, dir_okay=False))
def scan_part_cmd(request_file: str) -> None:
    """One child of `scan --parallel`: the workload, precision and options its parent wrote to REQUEST_FILE
    (probe/parallel.PartRequest), scanned as a one-GPU scan on the GPU the parent pinned; says what it wrote."""
    from memprobe.probe.parallel import PartRequest
    from memprobe.probe.scan import NoCudaError

    allow_clean_up(SCAN_CLEAN_UP_S)
    try:
        part = PartRequest.read(request_file)
        workload, opts = part.scan()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise click.ClickException(f"{request_file}: not a scan part's request ({type(exc).__name__}: {exc})") from None
    if opts.device == "cuda":
        require_gpu()
    try:
        scan_and_print(ScanJob([workload], opts, False, None), [1], ["ddp"], part.out_dir)
    except NoCudaError as exc:
        raise NoGPUExit(f"no CUDA device: {exc}") from None
