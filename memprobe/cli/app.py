"""The `memprobe` click group, the options and helpers every command shares, and the small commands (list, device).

User errors are one line and a non-zero exit: 1 for a failed scan, a bad file or output that cannot be written, 2 for bad usage or
no CUDA device (unless `scan --predict-if-no-gpu` predicted instead: 0), 130 for Ctrl-C, 143 for SIGTERM and
129 for SIGHUP (after writing what finished), in every command: the group (MemprobeGroup) does it once for all.
"""

from __future__ import annotations

import sys

import click
from tabulate import tabulate

from memprobe import __version__
from memprobe.cli.declared import request_options
from memprobe.cli.helpers import SIGNALS_KEY, interrupted_status, library_messages, one_line, stop_on_signals
from memprobe.cli.output_errors import output_failure
from memprobe.core.process.interrupts import signal_name
from memprobe.core.text.units import gib
from memprobe.core.workload.registry import RegistryError, Workload, load_registry
from memprobe.request import ModelRequest

EXIT_NO_GPU = 2


class NoGPUExit(click.ClickException):
    exit_code = EXIT_NO_GPU


def _registry(models: str | None) -> dict[str, Workload]:
    try:
        return load_registry(models)
    except RegistryError as exc:
        raise click.ClickException(str(exc)) from None


class MemprobeGroup(click.Group):
    """The memprobe group: what every command shares when it ends. Ctrl-C exits 130 and SIGTERM/SIGHUP 128 +
    the signal (not click's "Aborted!" and 1), after the command's own clean-up ran (a scan writes what finished);
    an error message is one line a terminal can show (helpers.one_line)."""

    def invoke(self, ctx: click.Context):
        with stop_on_signals() as received, library_messages():
            ctx.meta[SIGNALS_KEY] = received  # a command that says more itself exits with interrupted_status()
            try:
                value = super().invoke(ctx)
                sys.stdout.flush()  # a full disk or a closed pipe shows now, as one Error line, not at Python's exit
                return value
            except KeyboardInterrupt:
                if not received:  # no Ctrl-C and no signal came: code raised it (a model's own, say)
                    raise click.ClickException(
                        "KeyboardInterrupt raised by the code that ran, with no Ctrl-C or signal: find what raises it"
                    ) from None
                _stopped(received)
            except Exception as exc:
                if received:
                    # A signal came and its interrupt surfaced as another error: Python 3.11 wraps a KeyboardInterrupt
                    # raised in a class's __set_name__ (an import under way) in a RuntimeError, which a command may
                    # then report as its own. The command was stopped all the same.
                    _stopped(received)
                if isinstance(exc, click.ClickException):
                    # click types `message` Final; it is a plain attribute that show() reads, rewritten on purpose
                    exc.message = one_line(exc.message)  # type: ignore[misc]
                    raise
                failed = output_failure(exc) if isinstance(exc, OSError) else None
                if failed is None:
                    raise
                raise click.ClickException(one_line(failed)) from None  # output that cannot be written: one line


def _stopped(received: list[int]) -> None:
    """End a command that a signal stopped: say so, exit 128 + the signal."""
    click.echo(f"\ninterrupted ({signal_name(received[0])}): stopped", err=True)
    sys.exit(interrupted_status())


@click.group(cls=MemprobeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="memprobe")  # not package metadata: a checkout on PYTHONPATH has none
def main() -> None:
    """memprobe: the exact largest batch that trains on your GPU, and how fast it trains there.

    Start with `memprobe list` (the workloads), `memprobe device` (the GPU), then
    `memprobe scan --model bert-large`.
    """


@main.command("list")
@click.argument("names", nargs=-1)
@request_options(ModelRequest, only=["models_file"])
@click.option("--all", "show_all", is_flag=True, help="Include test-only workloads.")
def list_cmd(names: tuple[str, ...], models_file: str | None, show_all: bool) -> None:
    """List the workloads memprobe can scan; with NAMES (wildcards work), each one's whole entry and params."""
    from memprobe.cli.listing import workload_detail, workload_table
    from memprobe.core.workload.registry import match

    registry = _registry(models_file)
    if not names:
        click.echo(workload_table([w for w in registry.values() if show_all or not w.test_only]))
        return
    if show_all:
        raise click.UsageError("--all has no effect with NAMES (a name lists its workload, test-only or not)")
    chosen: list[Workload] = []
    for name in names:
        try:
            found = match(registry, name)
        except RegistryError as exc:
            raise click.ClickException(str(exc)) from None
        chosen += [w for w in found if w not in chosen]
    click.echo("\n\n".join(workload_detail(w) for w in chosen))


@main.command("device")
def device_cmd() -> None:
    """Show the GPUs: memory, driver, CUDA and torch versions, and other processes holding memory."""
    from memprobe.probe.device import NoGPUError, gpus, host_environment

    env = host_environment()
    try:
        found = gpus()
    except NoGPUError as exc:
        raise NoGPUExit(f"no CUDA GPU: {exc}") from None
    rows = [
        [g.index, g.name, gib(g.total_bytes), gib(g.free_bytes), gib(g.used_bytes), len(g.processes)] for g in found
    ]
    click.echo(
        tabulate(rows, headers=["index", "name", "total GiB", "free GiB", "used GiB", "processes"], tablefmt="github")
    )
    torch_cuda = _torch_cuda_version()
    click.echo(
        f"driver {env.get('driver')}, CUDA (driver) {env.get('cuda_driver')}, "
        f"torch {env['versions'].get('torch')} (CUDA runtime {torch_cuda})"
    )
    click.echo(f"PYTORCH_CUDA_ALLOC_CONF={env.get('PYTORCH_CUDA_ALLOC_CONF') or '(unset)'}")
    for g in found:
        for p in g.processes:
            click.echo(
                f"warning: GPU {g.index}: process {p.pid} {p.name} holds {gib(p.used_bytes, 2)} GiB; "
                "a scan's max batch will be lower while it runs",
                err=True,
            )
        if not g.processes and g.used_bytes > 1 << 30:
            click.echo(
                f"warning: GPU {g.index}: {gib(g.used_bytes)} GiB in use by processes NVML cannot list", err=True
            )


def _torch_cuda_version() -> str:
    try:
        import torch
    except ImportError:
        return "torch not installed"
    return torch.version.cuda or "none (CPU build)"


_FORMATS = ("github", "plain", "csv", "json")


def _load_results(paths: tuple[str, ...]) -> list:
    """(path, result) pairs of the result files in `paths` (files, and folders searched for *.json). A file that is
    not a valid result file is skipped with one warning line naming it and what is wrong; when nothing is left, one
    error line: that file's reason, or how many were skipped."""
    from memprobe.core.records.results import ResultFileError, load_results

    skipped: list[ResultFileError] = []
    loaded = load_results(list(paths), on_skip=skipped.append, strict_files=False)
    if not loaded and len(skipped) == 1:
        from pathlib import Path

        folders = [p for p in paths if Path(p).is_dir()]
        raise click.ClickException(
            f"no memprobe result files in {', '.join(folders)}; skipped {skipped[0]}" if folders else str(skipped[0])
        )
    for exc in skipped:
        click.echo(f"warning: skipped {exc}", err=True)
    if not loaded and skipped:
        raise click.ClickException(f"no memprobe result files in {', '.join(paths)} ({len(skipped)} skipped, above)")
    return loaded
