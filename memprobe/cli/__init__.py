"""The `memprobe` command line. Thin: parse, build a request, call one core function, print.

One module per command family (scan, predict, report/guide); app.py holds the click group and what they
share. Importing this package registers every command on `main`.
"""

import gc
import signal

from memprobe.cli import plan, predict, report, scan  # noqa: F401  (registers the commands on main)
from memprobe.cli.app import main

__all__ = ["main", "run"]


def run() -> None:
    """The `memprobe` program (and `python -m memprobe`): main(), which exits (SystemExit), then a quick end.

    Python's exit runs a full collection over every object the process still holds: after a prediction over a
    million (traces, fake tensors' dispatch cache, torch), and the exit took 1.7 s of a nasnet-large prediction.
    Frozen first, they are not walked (0.25 s). Only garbage in reference cycles is then left to the operating
    system; memprobe's commands close their files and end their processes before they return.
    """
    try:
        main()
    finally:
        # The command has ended (its exit status is set): a Ctrl-C now would only make Python's exit print a
        # traceback.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        gc.freeze()
