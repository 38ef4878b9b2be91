"""`python -m memprobe` runs the CLI (the same as the `memprobe` command)."""

from .cli import main

main()
