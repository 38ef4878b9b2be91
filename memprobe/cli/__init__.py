"""The `memprobe` command line. Thin: parse, build a request, call one core function, print.

One module per command family (scan, predict, report/guide); app.py holds the click group and what they
share. Importing this package registers every command on `main`.
"""

from memprobe.cli import plan, predict, report, scan  # noqa: F401  (registers the commands on main)
from memprobe.cli.app import main

__all__ = ["main"]
