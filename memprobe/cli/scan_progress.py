"""A scan's live progress on stderr: one line per trial, finished in place when the trial ends."""

from __future__ import annotations

import click

from memprobe.core.text.units import gib


class ProgressPrinter:
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
