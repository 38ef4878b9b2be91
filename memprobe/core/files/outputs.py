"""Output folders and files memprobe writes (result files, charts, predicted breakdowns): checked before work starts,
written atomically.

No torch. A folder that cannot be made or written (`report --charts /proc/x`), or a folder standing where a chart
file goes, is one OutputError line before the report prints; a file is written to a temporary file in its folder
and renamed over, so Ctrl-C or a full disk never leaves half a PNG. A symbolic link is followed, not replaced; a
named pipe, a terminal or /dev/stdout is written to in place, and `-` is standard output.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Callable, Iterable


class OutputError(OSError):
    """An output folder or file that cannot be written; the message is one line naming it."""


STDOUT = "-"  # an output file named so is this process's standard output (`report --html -`), never a file


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def prepare_dir(path: str | Path, suffixes: Iterable[str] = (".png", ".svg")) -> Path:
    """Make `path` (and its parents) and check a file can be written there and that no folder stands where a file
    ending in one of `suffixes` goes. Raises OutputError."""
    if str(path) == STDOUT:
        raise OutputError("- is standard output, not a folder: give a folder name (./- for a folder named '-')")
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


# Paths under these are the system's (a terminal, /dev/stdout, /proc/self/fd/1, a named pipe's device): written in
# place, never replaced by a file of ours; `/dev/stdout` on a shell's `> out.txt` resolves to out.txt itself, which
# the shell holds open, so renaming a new file over it would send the rest of the output to an unlinked file.
_IN_PLACE_ROOTS = ("/dev/", "/proc/")


def _through_system_path(path: Path) -> bool:
    """Whether `path` or a symbolic link on the way to its target lies under /dev or /proc."""
    seen = 0
    current = Path(os.path.abspath(path))
    while seen < 40:  # the kernel's own limit on links followed
        if str(current).startswith(_IN_PLACE_ROOTS):
            return True
        if not current.is_symlink():
            return False
        current = Path(os.path.abspath(current.parent / os.readlink(current)))
        seen += 1
    return False


def output_target(path: str | Path) -> tuple[Path, bool]:
    """Where an output file is written and whether atomically: (the symlink's target, True) for a regular file or
    one not there yet, so a link is followed and stays a link; (`path`, False) for a named pipe, a terminal or
    /dev/stdout, written in place. Raises OutputError for a folder or an unreadable path."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise OutputError(f"cannot write {path} ({_reason(exc)})") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise OutputError(f"{path} is a folder, not a file")
    if mode is not None and (not stat.S_ISREG(mode) or _through_system_path(path)):
        return path, False
    return Path(os.path.realpath(path)), True


def _in_place(target: Path, binary: bool) -> IO[Any]:
    """A handle writing into a pipe, a terminal or a device in place. Where it is this process's standard output or
    error (`/dev/stdout` on a shell's `> out.txt`), a duplicate of that descriptor, so the file's offset is shared:
    what was printed stays before and what is printed after comes after. Else opened to append."""
    mode = "ab" if binary else "a"
    encoding = None if binary else "utf-8"
    try:
        found = os.stat(target)
    except OSError:
        found = None
    for stream in (sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
            info = os.fstat(fd)
        except (AttributeError, OSError, ValueError):  # a stand-in stream without a descriptor
            continue
        if found is not None and (info.st_dev, info.st_ino) == (found.st_dev, found.st_ino):
            stream.flush()
            return os.fdopen(os.dup(fd), mode.replace("a", "w"), encoding=encoding)  # fdopen never truncates
    if found is not None and stat.S_ISFIFO(found.st_mode):
        return os.fdopen(_open_pipe(target), mode.replace("a", "w"), encoding=encoding)
    return open(target, mode, encoding=encoding)


READER_WAIT_S = 10.0  # how long a named pipe nobody reads yet is given for its reader to come


def _open_pipe(target: Path) -> int:
    """A descriptor writing into the named pipe `target`, opened without blocking: a plain open() waits for ever
    for a reader that never comes. Waits up to READER_WAIT_S for one; raises OSError (ENXIO) saying so."""
    end = time.monotonic() + READER_WAIT_S
    while True:
        try:
            fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO or time.monotonic() > end:
                if exc.errno == errno.ENXIO:
                    raise OSError(
                        errno.ENXIO,
                        f"a named pipe no process reads: start its reader first, e.g. `cat {target} &`",
                    ) from None
                raise
            time.sleep(0.1)
            continue
        os.set_blocking(fd, True)  # the reader is there: the writes wait for it as a pipe's do
        return fd


def check_output_file(path: str | Path) -> Path:
    """Before work starts: an output file can be written (its folder exists or can be made and takes a file; a pipe
    or device is writable). Returns where it will go. Raises OutputError."""
    if str(path) == STDOUT:
        return Path(STDOUT)
    target, atomic = output_target(path)
    if not atomic:
        if not os.access(target, os.W_OK):
            raise OutputError(f"cannot write {path} (Permission denied)")
        return target
    prepare_dir(target.parent, suffixes=())
    return target


def atomic_write(path: str | Path, fill: Callable[[IO[Any]], None], binary: bool = False) -> Path:
    """Write `path` atomically: `fill(handle)` writes a temporary file in the same folder, which is flushed, fsynced,
    given the umask's permissions (mkstemp makes 0600; an output is meant to be shared) and renamed over `path`.
    Whatever stops it (an error, Ctrl-C, a full disk) removes the temporary file, so nothing half-written is left.
    A symbolic link is followed (its target is replaced; the link stays); a named pipe, a terminal or /dev/stdout
    is written in place (output_target); `-` is this process's standard output. Raises OutputError naming the file."""
    if str(path) == STDOUT:
        return _to_stdout(fill, binary)
    target, atomic = output_target(path)
    if not atomic:
        try:
            with _in_place(target, binary) as stream:
                fill(stream)
        except OSError as exc:
            raise OutputError(f"cannot write {path} ({_reason(exc)})") from None
        return Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise OutputError(f"cannot write {path} ({_reason(exc)})") from None
    try:
        handle: IO[Any] = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")
        with handle:
            fill(handle)
            handle.flush()
            os.fsync(handle.fileno())
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"cannot write {path} ({_reason(exc)})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(path)


def _to_stdout(fill: Callable[[IO[Any]], None], binary: bool) -> Path:
    """fill(standard output) and flush it (atomic_write's `-`). Raises OutputError."""
    stream = sys.stdout.buffer if binary else sys.stdout
    try:
        fill(stream)
        stream.flush()
    except OSError as exc:
        raise OutputError(f"cannot write the standard output ({_reason(exc)})") from None
    return Path(STDOUT)


def save_figure(fig: Any, path: str | Path, **savefig: Any) -> Path:
    """fig.savefig to `path` atomically (atomic_write). Raises OutputError naming the file."""
    path = Path(path)
    return atomic_write(
        path, lambda handle: fig.savefig(handle, format=path.suffix.lstrip("."), **savefig), binary=True
    )
