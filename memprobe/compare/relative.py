"""Throughput normalized to a reference card (the 2020 study's Quadro RTX 8000 = 1.0 by default).

No torch. An out-of-memory cell counts as 0; the reference is chosen among the compared cards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memprobe.compare.comparison import (
    DEFAULT_REFERENCE,
    MEASURED,
    PRECISION_ORDER,
    PUBLISHED,
    Comparison,
    Point,
    ReportError,
)
from memprobe.compare.tables import Cell, Table, _mark, fmt_number
from memprobe.core.cards.catalog import Catalog, default_catalog


@dataclass
class RelativeCell:
    """Throughput over the reference's, for one card and one workload column."""

    value: float
    origin: str
    oom: bool = False
    vs_published: bool = False
    at: str = "B"  # where the card's throughput was taken (comparison.Point.at)
    source: str = ""  # the result file of a measured cell (comparison.Point.source); "" for a published one


@dataclass
class RelativeRow:
    """One card's normalized throughputs (measured and published rows are kept apart)."""

    gpu: str
    origin: str
    cells: dict[tuple[str, str], RelativeCell]
    mean: float | None
    count: int


@dataclass
class Relative:
    """Throughput normalized to `reference` = 1.0, per (workload, precision) column, and the mean over columns."""

    reference: str
    columns: list[tuple[str, str]]
    reference_values: dict[tuple[str, str], Point]
    rows: list[RelativeRow]
    notes: list[str] = field(default_factory=list)
    basis: str = "throughput at each card's max batch"  # what was normalized (compare.curves.LABELS)

    def fell_back(self, cell: RelativeCell) -> bool:
        """Whether a measured cell is at B while others are like for like (its file has no curve): marked."""
        mixed = any(c.at != "B" for r in self.rows for c in r.cells.values() if c.origin == MEASURED)
        return mixed and cell.origin == MEASURED and cell.at == "B" and not cell.oom


def resolve_reference(comparison: Comparison, requested: str | None, catalog: Catalog | None = None) -> str:
    """The reference card: `requested` (a catalog or device name), else the Quadro RTX 8000 when present,
    else the first card given. Raises ReportError when the requested card is not among the inputs."""
    gpus = comparison.gpu_order
    if not requested:
        return DEFAULT_REFERENCE if DEFAULT_REFERENCE in gpus else gpus[0]
    folded = requested.strip().casefold()
    for gpu in gpus:
        if gpu.casefold() == folded:
            return gpu
    canonical = (catalog or default_catalog()).canonical(requested)
    if canonical in gpus:
        return canonical
    for p in comparison.points:
        if p.device.casefold() == folded:
            return p.gpu
    partial = [g for g in gpus if folded in g.casefold()]
    if len(partial) == 1:
        return partial[0]
    raise ReportError(
        f"reference GPU '{requested}' is not among the results"
        + (f" (ambiguous: {', '.join(partial)})" if partial else "")
        + f"; GPUs: {', '.join(gpus)}"
    )


def relative_throughput(
    comparison: Comparison, reference: str | None = None, catalog: Catalog | None = None
) -> Relative:
    """Normalize every card's throughput to the reference card's, per workload and precision, OOM as 0.

    A column exists only where the reference has a throughput above 0 (its measured value when it has one,
    else its published one). The mean is over the columns a row has. Raises ReportError for an unknown reference.
    """
    ref = resolve_reference(comparison, reference, catalog)
    notes: list[str] = []
    candidates: list[tuple[str, str]] = []
    for p in comparison.points:
        if p.throughput is not None and (p.workload, p.precision) not in candidates:
            candidates.append((p.workload, p.precision))
    order = {pr: i for i, pr in enumerate(PRECISION_ORDER)}
    workloads = {w: i for i, w in enumerate(comparison.workloads())}
    candidates.sort(key=lambda c: (workloads[c[0]], order.get(c[1], 99)))
    found: dict[tuple[str, str, str], Point] = {}  # the reference's first point per column and origin (as find)
    for p in comparison.points:
        if p.gpu == ref:
            found.setdefault((p.workload, p.precision, p.origin), p)
    columns, ref_values, skipped = [], {}, []
    ref_throughput: dict[tuple[str, str], float] = {}  # each column's reference samples/s (never 0 or None)
    for col in candidates:
        ref_point = found.get((col[0], col[1], MEASURED)) or found.get((col[0], col[1], PUBLISHED))
        if ref_point is None or not ref_point.throughput:
            skipped.append(
                f"{col[0]} {col[1]}" + (" (reference OOM)" if ref_point is not None and ref_point.oom else "")
            )
            continue
        columns.append(col)
        ref_values[col] = ref_point
        ref_throughput[col] = ref_point.throughput
    if skipped:
        notes.append(
            f"Not normalized (the reference {ref} has no throughput there): {', '.join(skipped)}; "
            "--reference picks a card that has them."
        )
    rows: dict[tuple[str, str], RelativeRow] = {}
    for p in comparison.points:
        col = (p.workload, p.precision)
        if col not in ref_values or p.throughput is None:
            continue
        kind = MEASURED if p.origin == MEASURED else PUBLISHED
        row = rows.setdefault((p.gpu, kind), RelativeRow(p.gpu, kind, {}, None, 0))
        if col in row.cells:
            notes.append(f"{p.gpu} {col[0]} {col[1]}: two published sources; kept the first.")
            continue
        ref_point = ref_values[col]
        row.cells[col] = RelativeCell(
            p.throughput / ref_throughput[col],
            p.origin,
            p.oom,
            vs_published=p.origin == MEASURED and ref_point.origin == PUBLISHED,
            at=p.at,
            source=p.source if p.origin == MEASURED else "",
        )
    for row in rows.values():
        row.count = len(row.cells)
        row.mean = sum(c.value for c in row.cells.values()) / row.count if row.count else None
    ordered = sorted(rows.values(), key=lambda r: (-(r.mean if r.mean is not None else -1), r.gpu, r.origin))
    published_refs = [
        f"{w} {pr} {fmt_number(ref_throughput[(w, pr)])} {p.unit} ({p.source})"
        for (w, pr), p in ref_values.items()
        if p.origin == PUBLISHED
    ]
    if published_refs:
        notes.append(
            f"The reference's values are published for: {'; '.join(published_refs)}. A measured cell divided "
            "by one of them compares two implementations and is marked (vs pub)."
        )
    return Relative(ref, columns, ref_values, ordered, notes)


def relative_table(relative: Relative) -> Table:
    """The normalized-throughput table: a row per card (measured and published apart), a column per workload
    and precision, and the mean over the columns the row has (with how many)."""
    total = len(relative.columns)
    columns = ["GPU", "source"] + [f"{w} {p}" for w, p in relative.columns] + ["mean"]
    rows = []
    for row in relative.rows:
        cells: list[Any] = [row.gpu, row.origin]
        for col in relative.columns:
            c = row.cells.get(col)
            if c is None:
                cells.append("-")
                continue
            text = "0 (OOM)" if c.oom else f"{c.value:.2f}"
            text = (
                _mark(text, c.origin)
                + (" (vs pub)" if c.vs_published else "")
                + (" (at B)" if relative.fell_back(c) else "")
            )
            cells.append(Cell(text, c.value, c.origin, c.source))
        if row.mean is None:
            cells.append("-")
        else:
            text = f"{row.mean:.2f}" + (f" ({row.count}/{total})" if row.count < total else "")
            cells.append(Cell(_mark(text, row.origin), row.mean, row.origin))
        rows.append(cells)
    notes = [
        f"Reference: {relative.reference} = 1.00 in every column it has. OOM counts as 0. The mean is the "
        "arithmetic mean over the columns a row has ((n/N) when it lacks some); means over different "
        "columns are not comparable."
    ] + relative.notes
    if any(relative.fell_back(c) for row in relative.rows for c in row.cells.values()):
        notes.append("(at B) = at the card's max batch B: its file has no throughput curve, so no best batch b*.")
    return Table("relative", f"Throughput relative to {relative.reference}", columns, rows, notes, keep=2)
