"""Around a model's own code that runs in the command's process (predict, plan): stdout stays memprobe's.

`predict` and `plan` build and trace the model in their own process. What the model's code prints (a print() in
its build, a library's banner, a subprocess it starts) went into memprobe's standard output, so `plan --format json`
was no longer JSON; a build that called os.chdir() moved `--breakdown-out bd.json` to another folder while memprobe
said `wrote bd.json`. Inside model_code(), standard output is standard error (sys.stdout, and descriptor 1 for
what writes there directly or is started from here), and the working folder is put back afterwards.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator


@contextlib.contextmanager
def model_code() -> Iterator[None]:
    """Run the block with standard output sent to standard error and the working folder put back after it."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()
    here = os.open(".", os.O_RDONLY)
    saved = _point_fd1_at_fd2()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        with contextlib.suppress(AttributeError, OSError, ValueError):
            sys.stderr.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)
        os.fchdir(here)
        os.close(here)


def _point_fd1_at_fd2() -> int | None:
    """Descriptor 1 made a copy of descriptor 2; returns a copy of what 1 was (None where either is closed)."""
    try:
        os.fstat(1)
        os.fstat(2)
    except OSError:
        return None
    saved = os.dup(1)
    os.dup2(2, 1)
    return saved
