"""`--search frontier` for scan and predict: the batch x sequence-length frontier (probe/frontier.py, predict/frontier.py)."""

from __future__ import annotations

import sys

import click

from memprobe.cli.model_code import model_code
from memprobe.core.workload.registry import Workload


def scan_frontiers(
    workloads: list[Workload], opts, out_dir: str, budget: float | None, checkpointing: bool, lora: int | None, progress
) -> None:
    """Measure each workload's frontier, say where it is written, and print its table."""
    from memprobe.cli.helpers import interrupted_status
    from memprobe.compare.frontier import frontier_rows
    from memprobe.compare.tables import rows_text
    from memprobe.core.records.frontier import FrontierError
    from memprobe.probe.frontier import scan_frontier
    from memprobe.probe.scan import ScanInterrupted

    loaded = []
    for workload in workloads:
        try:
            result, path = scan_frontier(workload, opts, out_dir, progress, budget, checkpointing, lora)
        except FrontierError as exc:
            raise click.UsageError(str(exc)) from None
        except ScanInterrupted as stop:
            click.echo(
                f"\ninterrupted: the finished points are in {stop.path} (marked partial)"
                if stop.path
                else "\ninterrupted: no frontier point had finished",
                err=True,
            )
            sys.exit(interrupted_status())
        if path is None:
            click.echo(f"Error: no frontier point of {workload.name} finished: nothing written", err=True)
            sys.exit(1)
        click.echo(f"wrote {path}", err=True)
        loaded.append((path, result))
    click.echo(rows_text(frontier_rows(loaded), keep=4))


def predict_frontiers(
    workloads: list[Workload],
    precisions: list[str],
    sizes: list,
    budget: float | None,
    checkpointing: bool,
    lora: int | None,
    steps: int,
    out_dir: str | None,
    progress,
) -> None:
    """Predict each workload's frontier for the one memory size, print it, and write it to `out_dir` when given."""
    from memprobe.compare.frontier import frontier_rows
    from memprobe.compare.tables import rows_text
    from memprobe.core.records.frontier import FrontierError, frontier_name
    from memprobe.core.records.generation import settings_of
    from memprobe.core.records.results import ScanResult, result_filename, write_result
    from memprobe.predict.frontier import predict_frontier
    from memprobe.predict.parallel import cores

    if len(sizes) != 1:
        raise click.UsageError("--search frontier predicts for one memory size or card: give one --memory or --gpu")
    size = sizes[0]
    loaded = []
    for workload in workloads:
        try:
            with model_code():
                frontiers = {
                    p: predict_frontier(workload, p, size, budget, checkpointing, lora, steps, cores(), progress)
                    for p in precisions
                }
        except FrontierError as exc:
            raise click.UsageError(str(exc)) from None
        name = frontier_name(workload, checkpointing, lora)
        result = ScanResult(
            workload={**workload.to_dict(), "name": name},
            environment={"gpu": {"name": size.label, "predicted": True}},
            settings={
                "mode": "generate" if settings_of(workload) is not None else "train",
                "search": "frontier",
                "predicted": True,
                "frontier_budget_s": budget,
                "capacity_bytes": size.capacity_bytes,
                "capacity_how": size.how,
            },
            status="complete" if any(p.found is not None for f in frontiers.values() for p in f.points) else "failed",
            frontier={p: f.to_dict() for p, f in frontiers.items()},
        )
        path = None
        if out_dir:
            path = write_result(result, f"{out_dir}/{result_filename(size.label + ' predicted', name, result.mode)}")
            click.echo(f"wrote {path}", err=True)
        loaded.append((path, result))
    click.echo(rows_text(frontier_rows(loaded), keep=4))
