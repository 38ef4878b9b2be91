"""`python -m memprobe` runs the CLI (the same as the `memprobe` command)."""

from memprobe.cli import run

run()
