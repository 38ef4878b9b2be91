"""A plan as text: a table (github, plain), json or csv."""

from __future__ import annotations

import json
from typing import Any

from memprobe.compare.tables import rows_text
from memprobe.core.estimates.plan import Plan, PlanRow
from memprobe.core.estimates.serving import ServingPlan, ServingRow
from memprobe.core.text import textwidth
from memprobe.core.text.units import gib

FORMATS = ("github", "plain", "json", "csv")
NOT_MEASURED = "not measured"


def _shown(row: PlanRow) -> dict[str, Any]:
    room = (
        ""
        if row.headroom_bytes is None
        else f"{gib(row.headroom_bytes, 2)} GiB"
        + ("" if "measured peak" == row.headroom_how else f" ({row.headroom_how})")
    )
    return {
        "setting": row.setting,
        "source": row.source,
        "max micro-batch": row.max_micro_batch,
        "cap (why)": f"{row.cap} ({row.cap_reason})",
        "micro-batch": row.micro_batch,
        "accumulation": "" if row.accumulation_steps is None else row.accumulation_steps,
        "global batch": "" if row.global_batch is None else row.global_batch,
        "headroom": room,
        "samples/s": NOT_MEASURED if row.samples_per_s is None else f"{row.samples_per_s:,.0f}",
        "s per global batch": NOT_MEASURED
        if row.seconds_per_global_batch is None
        else f"{row.seconds_per_global_batch:.3f}",
    }


def render_plan(plan: Plan | ServingPlan, fmt: str = "github") -> str:
    """The plan in `fmt` (FORMATS). json is the Plan's to_dict (raw numbers); csv has the raw fields too.
    Raises ValueError for an unknown format."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format '{fmt}' (choose from {', '.join(FORMATS)})")
    if isinstance(plan, ServingPlan):
        return render_serving(plan, fmt)
    if fmt == "json":
        return json.dumps(plan.to_dict(), indent=1)
    if fmt == "csv":
        return rows_text([r.to_dict() for r in plan.rows], "csv")
    target = f"global batch {plan.global_batch}" if plan.global_batch else "one micro-batch per optimizer step"
    return _table_text(
        f"plan for {plan.model} on the {plan.card}, {target}",
        [_shown(r) for r in plan.rows],
        "(no settings)",
        [f"{r.setting}: {r.note}" for r in plan.rows if r.note] + plan.notes,
        fmt,
    )


def _table_text(head: str, cells: list[dict[str, Any]], empty: str, notes: list[str], fmt: str) -> str:
    """A plan's text in a table format: its head line, the table of `cells`, and the notes under it. Each row's note
    (the split of the global batch, what was not measured) goes under the table, wrapped at 120 columns: in a table
    cell it was cut mid-sentence."""
    bullet = "- " if fmt == "github" else "  "
    return "\n\n".join(
        [
            head,
            rows_text(cells, fmt, empty=empty),
            textwidth.notes_text(notes, bullet, "  " if fmt == "github" else "    "),
        ]
    )


def serving_cells(row: ServingRow) -> dict[str, Any]:
    """A serving row as a table shows it: the sequences with where they come from, tokens/s where measured."""
    if row.sequences is None:
        fits = "-"
    else:
        safe = f" (safe {row.safe_sequences})" if row.safe_sequences is not None else ""
        fits = f"{row.sequences}{safe}"

    def rate(value: float | None) -> str:
        return NOT_MEASURED if value is None else f"{value:,.0f}"

    return {
        "card": row.card,
        "precision": row.precision,
        "source": row.source,
        "concurrent sequences": fits,
        "decode tok/s": rate(row.decode_tokens_per_s),
        "prefill tok/s": rate(row.prefill_tokens_per_s),
        "KV capacity": "-" if row.kv_capacity_sequences is None else row.kv_capacity_sequences,
    }


def render_serving(plan: ServingPlan, fmt: str = "github") -> str:
    """A serving plan (plan or guide --mode generate) in `fmt` (FORMATS)."""
    if fmt == "json":
        return json.dumps(plan.to_dict(), indent=1)
    if fmt == "csv":
        return rows_text([vars(r) for r in plan.rows], "csv")
    return _table_text(
        f"serving {plan.workload} on the {plan.card}: concurrent sequences that fit",
        [serving_cells(r) for r in plan.rows],
        "(no rows)",
        [f"{r.precision} on the {r.card}: {r.note}" for r in plan.rows if r.note] + plan.notes,
        fmt,
    )
