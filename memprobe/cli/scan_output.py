"""What `memprobe scan` says when a scan is done: the file written, why nothing fits, its user-code errors, the tables."""

from __future__ import annotations

import click

from memprobe.core.workload.registry import Workload


def after_scan(result, path, workload: Workload) -> list[str]:
    """Say what a finished scan wrote and why a model fits nothing where it does not; returns its user-code errors."""
    from memprobe.core.process.outcomes import USER_ERROR

    click.echo(
        f"wrote {path}" + (" (status failed: every precision ended in an error)" if result.status == "failed" else ""),
        err=True,
    )
    from memprobe.probe.nothing_fits import described

    for line in described(result, workload):  # what the scan recorded where nothing trains at 1
        click.echo(line, err=True)
    for p in result.precisions.values():
        if p.stop == "cap" and p.max_batch:  # B is the search's cap, not an edge: the table's figure is a floor
            click.echo(
                f"note: {workload.name} {p.precision}: every batch up to the search's cap trained, {p.max_batch} "
                f"included: the max batch is {p.max_batch} or more; raise --max-batch to find the edge",
                err=True,
            )
    return [
        f"{workload.name} {p.precision}: {p.error.splitlines()[0]} "
        f"({'traceback' if len(p.error.splitlines()) > 1 else 'details'} in {path})"
        for p in result.precisions.values()
        if p.stop == USER_ERROR
    ]


def print_scans(results: list) -> None:
    """The scan table of single-GPU results, then the scaling table of multi-GPU ones."""
    from memprobe.compare.generation import NOTES, generation_rows
    from memprobe.compare.scaling import scaling_table, split_by_world_size
    from memprobe.compare.scan_table import scan_table
    from memprobe.compare.tables import rows_text

    single, multi = split_by_world_size(results)
    if single:
        click.echo(scan_table(single))
    generated = generation_rows([(None, r) for r in single])
    if generated:
        click.echo("\n" + rows_text(generated, keep=3) + "\n\n" + "\n".join(NOTES))
    if multi:
        click.echo(scaling_table(multi, single), nl=False)
