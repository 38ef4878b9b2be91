"""Option parsing and signal handling shared by the CLI commands (kept out of cli.py to keep it thin)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import click

from memprobe.units import parse_size


def positive_size(text: str, option: str) -> int:
    """Bytes of a size option; BadParameter for garbage or a size that is not positive."""
    try:
        nbytes = parse_size(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None
    if nbytes <= 0:
        raise click.BadParameter(f"{option} must be larger than 0, got '{text}'", param_hint=option)
    return nbytes


def memory_list(text: str | None, gpus: str | None = None):
    """The cardsize.Sizes of --memory sizes and --gpu cards, saying on stderr how each was read."""
    from memprobe.cardsize import SizeError, read_sizes

    try:
        sizes = read_sizes(text, gpus)
    except SizeError as exc:
        raise click.BadParameter(str(exc), param_hint=exc.option) from None
    for note in sizes.notes:
        click.echo(f"note: {note}", err=True)
    return sizes


@contextmanager
def stop_on_signals() -> Iterator[list[int]]:
    """While scanning, SIGTERM and SIGHUP stop the scan as Ctrl-C does (trial processes ended, finished
    precisions kept, file marked partial); the yielded list gets the signal, for exit status 128 + signal."""
    import signal

    received: list[int] = []

    def stop(signum: int, _frame) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield received
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def card_names(gpus: str | None) -> list[str] | None:
    """Catalog names of the cards in a comma-separated --gpu (cardnames.resolve_card: names, aliases, short names),
    saying on stderr how an ambiguous one was taken; None when not given. BadParameter for a bad name."""
    if gpus is None:
        return None
    from memprobe.cardnames import CardNameError, resolve_cards

    try:
        resolved = resolve_cards(gpus)
    except CardNameError as exc:
        raise click.BadParameter(str(exc), param_hint="--gpu") from None
    for found in resolved:
        if found.note:
            click.echo(f"note: {found.note}", err=True)
    return [found.card.name for found in resolved]
