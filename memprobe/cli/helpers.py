"""Option parsing and signal handling shared by the CLI commands (kept out of cli.py to keep it thin)."""

from __future__ import annotations

import functools
import logging
import os
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import click

PROGRESS_EVERY_S = 5.0  # on a terminal, the longest silence while predicting
# The heartbeat speaks after this much silence: its thread ticks every quarter second and may wait for the GIL.
_HEARTBEAT_AFTER_S = PROGRESS_EVERY_S - 0.5


def progress_lines():
    """A predict.progress.TraceProgress writing to stderr (stdout keeps the command's answer alone); on a terminal also
    a line whenever PROGRESS_EVERY_S seconds would pass without one. Enter it to start that heartbeat."""
    from memprobe.predict.progress import TraceProgress

    return TraceProgress(
        lambda text: click.echo(text, err=True), every=_HEARTBEAT_AFTER_S, heartbeat=sys.stderr.isatty()
    )


class _Echo(logging.Handler):
    """Prints a library message as the CLI prints its own: `note: ...` (INFO) or `warning: ...` (WARNING and up) on
    stderr, through click (so CliRunner captures it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            kind = "note" if record.levelno < logging.WARNING else "warning"
            click.echo(f"{kind}: {record.getMessage()}", err=True)
        except Exception:  # noqa: BLE001 - logging's rule: a message that cannot be shown must not end the command
            self.handleError(record)


@contextmanager
def library_messages() -> Iterator[None]:
    """For a command's duration, print the messages memprobe's modules log (the `memprobe` logger's, INFO and up)
    as `note:` and `warning:` lines on stderr, and keep them from the root logger's handlers (printed once). The
    logger's level, handlers and propagation are put back after."""
    logger = logging.getLogger("memprobe")
    handler, level, propagate = _Echo(), logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def traces_without_gpus(command: Callable[..., Any]) -> Callable[..., Any]:
    """Run a command that traces (predict, plan) with the GPUs hidden from this process: a fake CUDA tensor on a
    CUDA build creates a real CUDA context (torch's FakeTensor init_gpu_context), which takes GPU memory from a scan
    running beside the prediction and breaks the forked trace workers (CUDA cannot be used after fork). Tracing needs
    no GPU. The trace runs in this process and its forks, which an `env=` cannot reach, so the variable is set here
    before torch first looks, and put back when the command ends: a command run in another's process (CliRunner,
    scan --predict-if-no-gpu) leaves CUDA_VISIBLE_DEVICES as it found it. Put it right above the command's function."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        before = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        try:
            return command(*args, **kwargs)
        finally:
            if before is None:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = before

    return run


# An error line longer than this is cut: a terminal shows it whole, and the rest is said to be cut.
MAX_ERROR_CHARS = 400


def one_line(message: str, limit: int = MAX_ERROR_CHARS) -> str:
    """`message` as one line a terminal can show: its first line, cut at `limit` characters with what was cut said."""
    lines = message.strip().splitlines() or [""]
    text, rest = lines[0], sum(len(line) + 1 for line in lines[1:])
    if len(text) > limit:
        rest += len(text) - limit
        text = text[:limit].rstrip()
    return text + (f" ... ({rest} more characters not shown)" if rest else "")


SIGNALS_KEY = "memprobe.signals"  # ctx.meta: the signals the group's handlers received while the command ran


def interrupted_status() -> int:
    """The exit status of a command stopped by Ctrl-C or a signal: 128 + the signal (SIGINT 130, SIGTERM 143)."""
    received = click.get_current_context().meta.get(SIGNALS_KEY) or []
    return 128 + (received[0] if received else 2)


def stop_on_signals():
    """SIGINT, SIGTERM and SIGHUP stop a command (core.interrupts.stop_on_signals: a scan ends its trial processes,
    keeps the finished precisions, marks its file partial; an interrupt lost in a finalizer is sent again, one
    swallowed ends the process); the yielded list gets the signal, for exit status 128 + signal."""
    from memprobe.core.process.interrupts import stop_on_signals as stop

    return stop()


def card_name_error(exc: Exception) -> click.ClickException:
    """The error for a --gpu name that names no card, the same in predict, guide and plan: a bad name exits 1, as
    an unknown model does (README's exit codes), and the option is named."""
    return click.ClickException(f"--gpu: {exc}")


def card_names(gpus: str | None) -> list[str] | None:
    """Catalog names of the cards in a comma-separated --gpu (cardnames.resolve_card: names, aliases, short names),
    saying on stderr how an ambiguous one was taken; None when not given. ClickException (exit 1) for a bad name."""
    if gpus is None:
        return None
    from memprobe.core.cards.cardnames import CardNameError, resolve_cards

    try:
        resolved = resolve_cards(gpus)
    except CardNameError as exc:
        raise card_name_error(exc) from None
    for found in resolved:
        if found.note:
            click.echo(f"note: {found.note}", err=True)
    return [found.card.name for found in resolved]


def writable(out_dir: str, option: str = "--out") -> None:
    """The folder of an output option (--out, or an output file's folder) exists or can be made, and a file can be
    written there; one-line error otherwise."""
    from memprobe.core.files.outputs import OutputError, prepare_dir

    try:
        prepare_dir(out_dir, suffixes=(".json",))
    except OutputError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None
