"""`memprobe guide --mode generate`: its serving options checked, and its tables (compare/serving_guide.py)."""

from __future__ import annotations

import click

from memprobe.cli.app import _load_results
from memprobe.request.serving import ServingRequest


def checked(asked: ServingRequest) -> ServingRequest:
    """guide's serving options, checked (request/serving.py)."""
    from memprobe.cli.options import request_error
    from memprobe.request import RequestError

    try:
        asked.check()
    except RequestError as exc:
        raise request_error(exc) from None
    return asked


def guide_serving(
    paths: tuple[str, ...], asked: ServingRequest, model: str | None, fmt: str, budget: float | None, only: list | None
) -> None:
    """guide --mode generate: every shown card per generation in the files (compare/serving_guide.py)."""
    from memprobe.compare.comparison import ReportError
    from memprobe.compare.scaling import split_by_world_size
    from memprobe.compare.serving_guide import generations, serving_guide
    from memprobe.planning.render import render_serving

    if not paths:
        raise click.UsageError("--mode generate reads `scan --mode generate` result files: give PATHS")
    loaded, _multi = split_by_world_size(_load_results(paths))
    chosen = generations(loaded, asked.matches, model)
    settings = " ".join(f"{k} {v}" for k, v in asked.asked().items() if v is not None)
    try:
        if not chosen:
            what = " ".join(x for x in (model and f"of {model}", settings and f"at {settings}") if x)
            raise ReportError(f"no `scan --mode generate` result {what} in {', '.join(paths)}".replace("  ", " "))
        plans = serving_guide(chosen, budget, only)
    except ReportError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        "\n\n".join(render_serving(p, fmt if fmt in ("github", "plain", "json", "csv") else "github") for p in plans)
    )
