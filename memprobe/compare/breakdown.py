"""Tables of the memory breakdown at B: one record by category, and measured against predicted.

Reads records only (core.breakdown.Breakdown). The goal for a prediction is each category within 3% or
0.5 GiB of the measurement, whichever is larger.
"""

from __future__ import annotations

from typing import Any

from memprobe.compare.comparison import PREDICTED
from memprobe.compare.tables import Cell, Table
from memprobe.core.records.breakdown import CATEGORIES, LABELS, Breakdown, check_sum, what_buys_more_batch
from memprobe.core.text import textwidth

GIB = 1024**3
GOAL_SHARE, GOAL_BYTES = 0.03, GIB // 2


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / GIB:.3f}"


def breakdown_record_table(record: Breakdown, title: str, precision: str = "", family: str = "") -> Table:
    """A record as a Table: each category (GiB and share of the peak reserved) and their sum; its notes are the
    sum check, the memory outside PyTorch, the top modules by activation memory, and what buys more batch."""
    rows: list[list[Any]] = []
    for name in CATEGORIES:
        value = record.categories.get(name, 0)
        share = value / record.peak_reserved if record.peak_reserved else 0.0
        rows.append([LABELS[name], Cell(_gib(value), value / GIB), Cell(f"{share:.1%}", share)])
    rows.append(
        ["peak reserved (sum of the above)", Cell(_gib(record.peak_reserved), record.peak_reserved / GIB), "100%"]
    )
    notes = [
        check_sum(record) or f"sum rule: the categories add up to the peak reserved (off by {record.sum_error:.2%})"
    ]
    notes.append(
        f"outside PyTorch (CUDA context, driver): {_gib(record.outside_pytorch)} GiB"
        + ("" if record.outside_pytorch is not None else " (not measured on this device)")
    )
    notes.append(f"per extra sample: {_gib(record.per_sample_bytes)} GiB")
    if record.top_modules:
        notes.append(
            "top modules by activation memory: "
            + ", ".join(f"{m['module']} {m['bytes'] / GIB:.3f} GiB" for m in record.top_modules)
        )
    levers = what_buys_more_batch(record, precision, family)
    if levers:
        notes.append("what buys more batch (estimates; the bound if a category were freed entirely):")
        notes.extend(f"  {lever.text()}" for lever in levers)
    return Table(
        "breakdown",
        f"{title}: memory at the peak of a step at batch {record.batch} ({record.basis}; {record.instrument}, "
        f"{record.seconds if record.seconds is not None else '-'} s)",
        ["category", "GiB", "share of peak reserved"],
        rows,
        notes,
    )


def breakdown_table(record: Breakdown, title: str, precision: str = "", family: str = "") -> str:
    """A record as text: each category (GiB and share of the peak reserved), the sum check, the memory outside
    PyTorch, the top modules by activation memory, and what buys more batch (estimates)."""
    return _markdown(breakdown_record_table(record, title, precision, family))


def _markdown(table: Table) -> str:
    """A Table as its title line, a markdown table and its notes, one a line; the title and notes wrapped to
    textwidth.width() (an indented note's continuation indented further)."""
    lines = [table.title, "| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in table.rows]
    return "\n".join(_fitted(line) for line in lines + table.notes)


def _fitted(line: str) -> str:
    """A line as it fits textwidth.width(): a table row as it is, prose wrapped (an indented line's continuation
    indented two more)."""
    if line.startswith("|"):
        return line
    indent = line[: len(line) - len(line.lstrip(" "))]
    return textwidth.wrap(line.lstrip(" "), indent, indent + "  ")


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


def comparison_record_table(measured: Breakdown, predicted: Breakdown, title: str) -> Table:
    """Measured against predicted per category as a Table (predicted figures labelled)."""
    rows: list[list[Any]] = []
    for row in comparison_rows(measured, predicted):
        label = LABELS.get(row["category"], "peak reserved")
        rows.append(
            [
                label,
                Cell(_gib(row["measured"]), row["measured"] / GIB),
                Cell(_gib(row["predicted"]), row["predicted"] / GIB, PREDICTED),
                Cell(_gib(row["difference"]), row["difference"] / GIB, PREDICTED),
                "yes" if row["within_goal"] else "no",
            ]
        )
    return Table(
        "breakdown_vs_predicted",
        f"{title}: measured (batch {measured.batch}) against predicted (emulated, batch {predicted.batch})",
        ["category", "measured GiB", "predicted GiB", "predicted - measured", "within 3% or 0.5 GiB"],
        rows,
    )


def predicted_rows(predicted: list[dict[str, Any]] | None, workload: str, precision: str) -> list[dict[str, Any]]:
    """The predicted records (core.breakdown.read_predicted) for a workload and precision, in the file's order."""
    return [row for row in predicted or [] if row.get("workload") == workload and row.get("precision") == precision]


def breakdown_parts(results: list[Any], predicted: list[dict[str, Any]] | None = None) -> list[tuple[Any, Any]]:
    """(part, result) for each result and precision with a measured breakdown: its Table, and measured against
    predicted (a Table) where `predicted` (records of core.breakdown.read_predicted) has the same workload,
    precision and batch; records at other batches (e.g. another card's B) get one line (a str) saying so."""
    parts: list[tuple[Any, Any]] = []
    for result in results:
        name = str(result.workload.name)
        family = str(result.workload.family or "")
        gpu = result.gpu_name()
        for precision, p in result.precisions.items():
            if p.breakdown is None:
                continue
            title = f"{name} {precision} on {gpu}"
            parts.append((breakdown_record_table(p.breakdown, title, precision, family), result))
            rows = predicted_rows(predicted, name, precision)
            same = [row for row in rows if row["breakdown"].batch == p.breakdown.batch]
            for row in same:
                compared = f"{title} vs predicted for {row.get('memory', '?')}"
                parts.append((comparison_record_table(p.breakdown, row["breakdown"], compared), result))
            if rows and not same:  # predictions for other cards or batches: one line, not a table each
                batches = ", ".join(str(row["breakdown"].batch) for row in rows)
                parts.append(
                    (
                        f"predicted at batch {batches}, measured at {p.breakdown.batch}: not compared (predict at "
                        "the measured batch)",
                        result,
                    )
                )
    return parts


def breakdown_report(results: list[Any], predicted: list[dict[str, Any]] | None = None) -> str:
    """For each result and precision with a measured breakdown: its table, and measured against predicted where
    `predicted` (records of core.breakdown.read_predicted) has the same workload, precision and batch (records
    at other batches, e.g. another card's B, get one line saying they were not compared)."""
    parts = [
        _fitted(part) if isinstance(part, str) else _markdown(part)
        for part, _result in breakdown_parts(results, predicted)
    ]
    return "\n\n".join(parts) if parts else "no memory breakdown in these result files (scan with --breakdown)"
