"""`memprobe scan --parallel`: one child scan per workload and precision, each on its own GPU, then the tables."""

from __future__ import annotations

import sys
from typing import Sequence

import click

from memprobe.cli.helpers import interrupted_status
from memprobe.cli.scan_output import print_scans
from memprobe.request import ScanJob


def scan_parallel(job: ScanJob, gpus: Sequence[str] | None, out_dir: str) -> None:
    """--parallel: one child scan per workload and precision of `job`, each pinned to its own GPU and given its
    workload and options as data (probe/parallel.PartRequest). `gpus`: --gpus's items (one number, or 'all'; none:
    all)."""
    from memprobe.probe.parallel import gpu_slots, run_parallel

    try:
        if gpus and len(gpus) > 1:
            raise ValueError(f"got '{','.join(gpus)}'")
        count = None if not gpus or gpus[0] == "all" else int(gpus[0])
        slots = gpu_slots(count, job.options.device)
    except ValueError as exc:
        raise click.UsageError(
            f"--parallel: {exc}"
            if "--gpus" in str(exc)
            else f"--parallel takes --gpus N (how many GPUs to use) or all: {exc}"
        ) from None
    try:
        written, summary = run_parallel(
            job.workloads, job.options, slots, out_dir, on_event=lambda text: click.echo(text, err=True)
        )
    except KeyboardInterrupt:
        click.echo("\ninterrupted: the finished precisions were merged into result files (marked partial)", err=True)
        sys.exit(interrupted_status())
    for _result, path in written:
        click.echo(f"wrote {path}", err=True)
    click.echo(
        f"parallel scan on {len(slots)} GPU(s): {summary.wall_seconds:.0f} s wall, serial estimate (sum of the "
        f"jobs) {summary.serial_estimate_seconds:.0f} s; log and summary in {summary.folder}",
        err=True,
    )
    print_scans([result for result, _path in written])
    if any(j["returncode"] not in (0, None) for j in summary.jobs):
        sys.exit(1)
