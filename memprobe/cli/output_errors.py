"""Output that cannot be written (a full disk, a closed pipe, a file memprobe may not write) as one Error line.

`memprobe report > /dev/full` or `memprobe list | head -1` fail in the middle of printing: MemprobeGroup turns the
OSError into one `Error:` line and exit status 1 (not a traceback, and not Python's "Exception ignored" at exit).
"""

from __future__ import annotations

import errno
import os
import sys

# Errors of a write that the user's setup caused: the disk or quota is full, the reader of a pipe went away, the
# file grew past its limit, the device failed.
WRITE_ERRNOS = {errno.EPIPE, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO}


def output_failure(exc: OSError) -> str | None:
    """The one line to show for an OSError that came from writing output, or None for any other OSError. Standard
    output is pointed at /dev/null when it failed, so what it still buffers cannot fail again at exit."""
    from memprobe.core.files.outputs import OutputError

    if isinstance(exc, OutputError):
        return str(exc)
    if exc.errno not in WRITE_ERRNOS:
        return None
    if exc.filename is None:
        _drop_stdout()
    return f"cannot write {exc.filename or 'the output'} ({exc.strerror or type(exc).__name__})"


def _drop_stdout() -> None:
    """Send the rest of standard output to /dev/null (the Python documentation's recipe for a closed pipe)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a test runner's stand-in has no descriptor
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, fd)
    os.close(null)
