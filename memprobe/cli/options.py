"""Options that several commands declare the same way, declared once."""

from __future__ import annotations

import click

from memprobe.cli import checks

# --models FILE: scan, predict, plan and list read workloads from another registry file
models_file_option = click.option(
    "--models",
    "models_file",
    type=checks.Path(dir_okay=False),
    help="Registry file (default: the packaged models.yaml).",
)

# --strategy for the commands that take several (scan and predict, with --gpus N > 1)
strategies_option = click.option(
    "--strategy",
    default="ddp",
    show_default=True,
    help="With --gpus N > 1, comma-separated: ddp (DistributedDataParallel), fsdp (FSDP2 fully_shard per block).",
)
