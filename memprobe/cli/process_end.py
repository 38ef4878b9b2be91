"""How the `memprobe` process starts and ends around a command: closed standard streams, threads a model leaves.

`memprobe list >&-` starts with no standard output: Python sets sys.stdout to None, so the first print raised an
AttributeError, and the next file opened would take descriptor 1. It is one Error line (on stderr, where there is
one) and exit 1. A model's build that starts a thread that is not a daemon (a data loader's, a logger's) would keep
the process alive after the command has printed its answer: Python waits for every such thread at exit. memprobe's
own threads are daemons, so a thread still running then is the model's: said in one note, and the process ends.
"""

from __future__ import annotations

import os
import sys
import threading


def closed_streams() -> bool:
    """Whether standard output is closed (sys.stdout None): then say so on stderr (where open) and return True. A
    closed stdin or stderr gets /dev/null in its place, so no file memprobe opens takes its descriptor."""
    for fd, name in ((0, "stdin"), (2, "stderr")):
        if getattr(sys, name) is None:
            _hold(fd)
            setattr(sys, name, open(os.devnull, "r" if fd == 0 else "w", encoding="utf-8"))
    if sys.stdout is not None:
        return False
    _hold(1)
    sys.stderr.write(
        "Error: cannot write the output (standard output is closed): give memprobe a standard output "
        "(`> out.txt`, or `> /dev/null` to drop it)\n"
    )
    sys.stderr.flush()
    return True


def _hold(fd: int) -> None:
    """Put /dev/null on descriptor `fd` when it is closed."""
    try:
        os.fstat(fd)
    except OSError:
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)


def stray_threads() -> bool:
    """Whether threads that are not daemons still run (the model's: memprobe's own are daemons); says so in one note."""
    left = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if left:
        names = ", ".join(t.name for t in left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
        print(
            f"note: the model's code left {len(left)} thread(s) running ({names}); memprobe is done and does not wait "
            "for them",
            file=sys.stderr,
        )
    return bool(left)


def status_of(code: object) -> int:
    """The exit status of SystemExit(code), as Python's own exit gives it: None 0, an integer itself, else 1."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1
