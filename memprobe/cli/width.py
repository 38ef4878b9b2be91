"""The --wide option: tables and notes at their full width, instead of fitted to 120 columns (core/text/textwidth.py)."""

from __future__ import annotations

import functools
from typing import Any, Callable

import click

from memprobe.core.text import textwidth


def wide_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command `--wide`: without it, what the command prints fits textwidth.WIDTH columns (a table too wide
    split by columns, a long cell cut, a note wrapped); with it, nothing is split, cut or wrapped. Refused beside
    --format csv or json and --html, which are never fitted. Put it right above the command's function."""

    @functools.wraps(command)
    def run(*args: Any, wide: bool = False, **kwargs: Any) -> Any:
        if wide and kwargs.get("fmt") in ("csv", "json"):
            raise click.UsageError(
                f"--wide has no effect with --format {kwargs['fmt']} (it is never fitted to a width)"
            )
        if wide and kwargs.get("html_file"):
            raise click.UsageError("--wide has no effect with --html (a page is never fitted to a width)")
        with textwidth.limit(None if wide else textwidth.WIDTH):
            return command(*args, **kwargs)

    return click.option(
        "--wide",
        is_flag=True,
        help=f"Print tables and notes at full width (default: fit {textwidth.WIDTH} columns: a wide table is split "
        "by columns, a long cell cut, a note wrapped).",
    )(run)
