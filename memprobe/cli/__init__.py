"""The `memprobe` command line. Thin: parse, build a request, call one core function, print.

One module per command family (scan, predict, report/guide); app.py holds the click group and what they
share. Importing this package registers every command on `main`.
"""

import gc
import os
import signal
import sys
from typing import NoReturn

from memprobe.cli import plan, predict, report, scan  # noqa: F401  (registers the commands on main)
from memprobe.cli.app import main

__all__ = ["main", "run"]


INTERRUPTED = (129, 130, 143)  # SIGHUP, Ctrl-C, SIGTERM: 128 + the signal


def _exit_now(code: int) -> NoReturn:
    """End a command stopped by a signal with its status, now. Python's own exit can turn it into death by SIGINT:
    CPython's `_Py_UnhandledKeyboardInterrupt`, which an interrupt's way through the interpreter can leave set
    though memprobe handled it (3 of 12 Ctrl-Cs during a build on fake tensors ended so, after "interrupted").
    What the command wrote is flushed; its files are whole (written atomically) and its child processes die with it
    (core/process/lifeline.py)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):  # a closed pipe or stream (None when closed at start)
            pass
    os._exit(code)


def run() -> None:
    """The `memprobe` program (and `python -m memprobe`): main(), which exits (SystemExit), then a quick end.

    Python's exit runs a full collection over every object the process still holds: after a prediction over a
    million (traces, fake tensors' dispatch cache, torch), and the exit took 1.7 s of a nasnet-large prediction.
    Frozen first, they are not walked (0.25 s). Only garbage in reference cycles is then left to the operating
    system; memprobe's commands close their files and end their processes before they return.
    """
    from memprobe.cli.process_end import closed_streams, status_of, stray_threads

    if closed_streams():  # `memprobe list >&-`: nothing could be printed, and a file opened now would take fd 1
        _exit_now(1)
    try:
        main()
    except SystemExit as end:
        if end.code in INTERRUPTED:
            _exit_now(int(end.code))
        if stray_threads():  # a model's own thread would keep the process alive after the command: it ends now
            _exit_now(status_of(end.code))
        raise
    finally:
        # The command has ended (its exit status is set): a Ctrl-C now would only make Python's exit print a
        # traceback.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        gc.freeze()
