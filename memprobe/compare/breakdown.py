"""Tables of the memory breakdown at B: one record by category, and measured against predicted.

Reads records only (core.breakdown.Breakdown). The goal for a prediction is each category within 3% or
0.5 GiB of the measurement, whichever is larger.
"""

from __future__ import annotations

from typing import Any

from memprobe.core.breakdown import CATEGORIES, LABELS, Breakdown, check_sum, what_buys_more_batch

GIB = 1024**3
GOAL_SHARE, GOAL_BYTES = 0.03, GIB // 2


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / GIB:.3f}"


def breakdown_table(record: Breakdown, title: str, precision: str = "", family: str = "") -> str:
    """A record as text: each category (GiB and share of the peak reserved), the sum check, the memory outside
    PyTorch, the top modules by activation memory, and what buys more batch (estimates)."""
    lines = [
        f"{title}: memory at the peak of a step at batch {record.batch} ({record.basis}; {record.instrument}, "
        f"{record.seconds if record.seconds is not None else '-'} s)",
        "| category | GiB | share of peak reserved |",
        "|---|---|---|",
    ]
    for name in CATEGORIES:
        value = record.categories.get(name, 0)
        share = value / record.peak_reserved if record.peak_reserved else 0.0
        lines.append(f"| {LABELS[name]} | {_gib(value)} | {share:.1%} |")
    lines.append(f"| peak reserved (sum of the above) | {_gib(record.peak_reserved)} | {1:.0%} |")
    problem = check_sum(record)
    lines.append(problem or f"sum rule: the categories add up to the peak reserved (off by {record.sum_error:.2%})")
    lines.append(
        f"outside PyTorch (CUDA context, driver): {_gib(record.outside_pytorch)} GiB"
        + ("" if record.outside_pytorch is not None else " (not measured on this device)")
    )
    per_sample = record.per_sample_bytes
    lines.append(f"per extra sample: {_gib(per_sample)} GiB")
    if record.top_modules:
        lines.append(
            "top modules by activation memory: "
            + ", ".join(f"{m['module']} {m['bytes'] / GIB:.3f} GiB" for m in record.top_modules)
        )
    levers = what_buys_more_batch(record, precision, family)
    if levers:
        lines.append("what buys more batch (estimates; the bound if a category were freed entirely):")
        lines.extend(f"  {lever.text()}" for lever in levers)
    return "\n".join(lines)


def within_goal(measured: int, predicted: int) -> bool:
    """Whether a predicted category is within 3% or 0.5 GiB of the measured one, whichever is larger."""
    return abs(predicted - measured) <= max(GOAL_SHARE * abs(measured), GOAL_BYTES)


def comparison_rows(measured: Breakdown, predicted: Breakdown) -> list[dict[str, Any]]:
    """Per category (and the peak reserved): measured and predicted bytes, the difference, within the goal."""
    rows = []
    for name in [*CATEGORIES, "peak_reserved"]:
        m = measured.peak_reserved if name == "peak_reserved" else measured.categories.get(name, 0)
        p = predicted.peak_reserved if name == "peak_reserved" else predicted.categories.get(name, 0)
        rows.append(
            {"category": name, "measured": m, "predicted": p, "difference": p - m, "within_goal": within_goal(m, p)}
        )
    return rows


def comparison_table(measured: Breakdown, predicted: Breakdown, title: str) -> str:
    """Measured against predicted per category, as text (predicted figures labelled)."""
    lines = [
        f"{title}: measured (batch {measured.batch}) against predicted (emulated, batch {predicted.batch})",
        "| category | measured GiB | predicted GiB | predicted - measured | within 3% or 0.5 GiB |",
        "|---|---|---|---|---|",
    ]
    for row in comparison_rows(measured, predicted):
        label = LABELS.get(row["category"], "peak reserved")
        lines.append(
            f"| {label} | {_gib(row['measured'])} | {_gib(row['predicted'])} | {_gib(row['difference'])} | "
            f"{'yes' if row['within_goal'] else 'no'} |"
        )
    return "\n".join(lines)


def predicted_rows(predicted: list[dict[str, Any]] | None, workload: str, precision: str) -> list[dict[str, Any]]:
    """The predicted records (core.breakdown.read_predicted) for a workload and precision, in the file's order."""
    return [row for row in predicted or [] if row.get("workload") == workload and row.get("precision") == precision]


def breakdown_report(results: list[Any], predicted: list[dict[str, Any]] | None = None) -> str:
    """For each result and precision with a measured breakdown: its table, and measured against predicted where
    `predicted` (records of core.breakdown.read_predicted) has the same workload, precision and batch (records
    at other batches, e.g. another card's B, get one line saying they were not compared)."""
    parts = []
    for result in results:
        name = str(result.workload.get("name"))
        family = str(result.workload.get("family", ""))
        gpu = str((result.environment.get("gpu") or {}).get("name", "?"))
        for precision, p in result.precisions.items():
            if p.breakdown is None:
                continue
            title = f"{name} {precision} on {gpu}"
            parts.append(breakdown_table(p.breakdown, title, precision, family))
            rows = predicted_rows(predicted, name, precision)
            same = [row for row in rows if row["breakdown"].batch == p.breakdown.batch]
            for row in same:
                parts.append(
                    comparison_table(
                        p.breakdown, row["breakdown"], f"{title} vs predicted for {row.get('memory', '?')}"
                    )
                )
            if rows and not same:  # predictions for other cards or batches: one line, not a table each
                batches = ", ".join(str(row["breakdown"].batch) for row in rows)
                parts.append(
                    f"predicted at batch {batches}, measured at {p.breakdown.batch}: not compared (predict at the "
                    "measured batch)"
                )
    return "\n\n".join(parts) if parts else "no memory breakdown in these result files (scan with --breakdown)"
