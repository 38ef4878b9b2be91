"""`memprobe list`: the workloads as a table that fits a terminal, and one workload's whole entry. No torch.

The table keeps name, family, unit and optimizer whole and cuts the description to what is left of the width
(120 columns: a common terminal); the params, often hundreds of characters, are shown per workload
(`memprobe list NAME`), wrapped to the same width.
"""

from __future__ import annotations

import textwrap
from typing import Sequence

from memprobe.core.workload.registry import Workload

WIDTH = 120


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 3)].rstrip() + "..."


def workload_table(workloads: Sequence[Workload], width: int = WIDTH) -> str:
    """One row per workload (name, family, unit, optimizer, description cut to fit), no line over `width`."""
    from tabulate import tabulate

    headers = ["name", "family", "unit", "optimizer", "description"]
    rows = [[w.name, w.family, w.unit, str(w.optimizer.get("name")), w.description] for w in workloads]
    text = tabulate(rows, headers=headers, tablefmt="github")
    excess = max((len(line) for line in text.splitlines()), default=0) - width
    if excess > 0:  # cut the descriptions by what the widest line is over (tabulate pads the other columns)
        room = max(len(headers[4]), max(len(r[4]) for r in rows) - excess)
        text = tabulate([r[:4] + [_cut(r[4], room)] for r in rows], headers=headers, tablefmt="github")
    return text + "\n`memprobe list NAME` shows a workload's whole entry: its params and description."


def workload_detail(workload: Workload, width: int = WIDTH) -> str:
    """Every field of one workload, each wrapped to `width` columns."""
    fields = [
        ("name", workload.name),
        ("family", workload.family),
        ("unit", workload.unit),
        ("optimizer", ", ".join(f"{k}={v}" for k, v in workload.optimizer.items())),
        ("params", ", ".join(f"{k}={v}" for k, v in workload.params.items())),
        ("description", workload.description),
    ]
    lines = []
    for key, value in fields:
        lines += textwrap.wrap(
            str(value) or "-",
            width=width,
            initial_indent=f"{key + ':':13}",
            subsequent_indent=" " * 13,
            break_on_hyphens=False,
        ) or [f"{key}:"]
    return "\n".join(lines)
