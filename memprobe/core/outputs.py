"""Output folders and files the CLI writes besides result files (charts): checked before work starts, written atomically.

No torch. A folder that cannot be made or written (`report --charts /proc/x`), or a folder standing where a chart
file goes, is one OutputError line before the report prints; a chart is written to a temporary file in its folder
and renamed over, so Ctrl-C or a full disk never leaves half a PNG.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO, Any, Callable, Iterable


class OutputError(OSError):
    """An output folder or file that cannot be written; the message is one line naming it."""


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def prepare_dir(path: str | Path, suffixes: Iterable[str] = (".png", ".svg")) -> Path:
    """Make `path` (and its parents) and check a file can be written there and that no folder stands where a file
    ending in one of `suffixes` goes. Raises OutputError."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"{path} is a file, not a folder") from None
    except OSError as exc:
        raise OutputError(f"cannot make the folder {path} ({_reason(exc)})") from None
    try:
        fd, probe = tempfile.mkstemp(prefix=".memprobe-write-check-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"cannot write in {path} ({_reason(exc)})") from None
    wanted = set(suffixes)
    blocking = sorted(p.name for p in path.iterdir() if p.suffix in wanted and p.is_dir())
    if blocking:
        raise OutputError(f"{path / blocking[0]} is a folder, where a chart file would be written")
    return path


def atomic_write(path: str | Path, fill: Callable[[IO[Any]], None], binary: bool = False) -> Path:
    """Write `path` atomically: `fill(handle)` writes a temporary file in the same folder, which is flushed, fsynced,
    given the umask's permissions (mkstemp makes 0600; an output is meant to be shared) and renamed over `path`.
    Whatever stops it (an error, Ctrl-C) removes the temporary file. OSError as raised."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        handle: IO[Any] = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")
        with handle:
            fill(handle)
            handle.flush()
            os.fsync(handle.fileno())
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def save_figure(fig: Any, path: str | Path, **savefig: Any) -> Path:
    """fig.savefig to `path` atomically (atomic_write). Raises OutputError naming the file."""
    path = Path(path)
    try:
        return atomic_write(
            path, lambda handle: fig.savefig(handle, format=path.suffix.lstrip("."), **savefig), binary=True
        )
    except OSError as exc:
        raise OutputError(f"cannot write {path} ({_reason(exc)})") from None
