"""Like-for-like throughput for card comparisons: best throughput (at b*), at a common batch, or at B.

No torch here. A card's throughput at its own max batch B can be far below its best (ResNet-50 fp16 on an
H200: 34% slower at B = 3321 than at 1870), so ranking cards at B can invert them. `like_for_like`
replaces every point's throughput with the chosen figure, taken from the scan's throughput curve, and
says which points had to fall back to the figure at B (files without a curve, published figures).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from memprobe.compare.comparison import MEASURED, Comparison, Point, ReportError
from memprobe.compare.tables import Cell, Table, fmt_number
from memprobe.core.estimates.knee import KNEE_FALL, KNEE_RESOLUTION, resolved

AT_BATCH = ("best", "common", "max")
LABELS = {
    "best": "best throughput per card (at its best batch b*)",
    "common": "throughput at the largest batch every compared card fits",
    "max": "throughput at each card's max batch B (the 2020 study's method; not like for like)",
}


@dataclass
class Basis:
    """The comparison with like-for-like throughputs, what they are (`label`), and notes for the tables.

    `common` maps (workload, precision) to the common batch used there (at_batch "common" only)."""

    at_batch: str
    comparison: Comparison
    label: str
    notes: list[str] = field(default_factory=list)
    common: dict[tuple[str, str], int] = field(default_factory=dict)


def curve_at(p: Point, batch: float) -> float | None:
    """The point's measured throughput at exactly `batch` on its curve (None when not timed there)."""
    return next((speed for b, speed in p.curve if b == batch), None)


def common_batch(points: list[Point]) -> int | None:
    """The largest batch timed on every point's curve (None when the curves share none)."""
    shared = None
    for p in points:
        batches = {b for b, _ in p.curve}
        shared = batches if shared is None else shared & batches
    return int(max(shared)) if shared else None


def like_for_like(comparison: Comparison, at_batch: str = "best") -> Basis:
    """Replace each point's throughput with the `at_batch` figure: "best" (b*'s throughput), "common"
    (at the largest batch timed on every card's curve, per workload and precision) or "max" (at B, unchanged).

    A point without a curve keeps its throughput at B and is named in the notes; an OOM stays 0.
    Raises ReportError for an unknown `at_batch`.
    """
    if at_batch not in AT_BATCH:
        raise ReportError(f"unknown --at-batch '{at_batch}' (choose from {', '.join(AT_BATCH)})")
    basis = Basis(at_batch, comparison, LABELS[at_batch])
    if at_batch == "max":
        return basis
    common: dict[tuple[str, str], int] = {}
    if at_batch == "common":
        columns: dict[tuple[str, str], list[Point]] = {}
        for p in comparison.points:
            if p.origin == MEASURED and p.curve and not p.oom:
                columns.setdefault((p.workload, p.precision), []).append(p)
        common = {col: b for col, ps in columns.items() if (b := common_batch(ps)) is not None}
    points, fallback = [], []
    for p in comparison.points:
        figure, at = None, "b*"
        if p.throughput is not None and not p.oom:
            if at_batch == "best":
                figure = p.best_throughput
            elif (p.workload, p.precision) in common:
                at = f"common {common[(p.workload, p.precision)]}"
                figure = curve_at(p, common[(p.workload, p.precision)])
            if figure is None:
                fallback.append(p)
        # MFU scales with the throughput it is taken at (the same FLOPs per sample, the same peak)
        mfu = p.mfu * figure / p.throughput if figure is not None and p.mfu is not None and p.throughput else p.mfu
        points.append(p if figure is None else replace(p, throughput=figure, at=at, mfu=mfu))
    basis.comparison = replace(comparison, points=points)
    if not any(p.throughput for p in comparison.points if p not in fallback):
        basis.label = f"{LABELS['max']}: no throughput curve in these inputs"
        basis.notes.append(
            f"No result here has a throughput curve, so --at-batch {at_batch} could not apply: "
            "rescan with memprobe >= schema 2 (curves are on by default)."
        )
        return basis
    basis.common = common
    if common:
        basis.notes.append(
            "Common batch per column: "
            + ", ".join(f"{w} {pr} {b}" for (w, pr), b in common.items())
            + " (the largest batch timed on every compared card's curve)."
        )
    measured = [f"{p.gpu} {p.workload} {p.precision}" for p in fallback if p.origin == MEASURED]
    if measured:
        basis.notes.append(
            f"At B, not {at_batch} (no throughput curve in the result file: scanned before "
            f"curves, or with --no-curve): {', '.join(measured)}."
        )
    if any(p.origin != MEASURED for p in fallback):
        basis.notes.append("Published figures are at the batch their source ran, not on a curve.")
    return basis


def knee_text(before: float | None, after: float | None, drop: float | None) -> str:
    """A knee for a table: "2644 (-36.7% at 2684)", or the bracket where bisection did not narrow it to 2%
    ("2366-2684 (-36.6%, not located within 2%)"); "-" without one."""
    if before is None or after is None or drop is None:
        return "-"
    if resolved(int(before), int(after)):
        return f"{before:g} ({drop:+.1%} at {after:g})"
    return f"{before:g}-{after:g} ({drop:+.1%}, not located within {KNEE_RESOLUTION:.0%})"


def at_batch_text(p: Point) -> str:
    """Where a point's throughput was taken, for a table: "b* 2048", "B 3321 (no curve)", "common 1024", or
    "published" (at the batch its source ran)."""
    if p.origin != MEASURED:
        return "published"
    if p.at == "b*":
        return f"b* {fmt_number(p.best_batch or 0)}" + (" (best of timed)" if p.curve_skipped else "")
    if p.at == "B":
        return f"B {fmt_number(p.max_batch or 0)}" + ("" if p.curve else " (no curve)")
    return p.at


def best_text(p: Point) -> str:
    """b* for a table, marked when the curve's time budget skipped points (it is then the best of those timed)."""
    if p.best_batch is None:
        return "-"
    return fmt_number(p.best_batch) + (f" (best of timed; {p.curve_skipped} skipped)" if p.curve_skipped else "")


def best_batch_table(comparison: Comparison) -> Table:
    """b* beside B per workload, card and precision (measured points with a curve), with the throughput at
    each, how much lower B's is, and the knee."""
    columns = [
        "workload",
        "GPU",
        "precision",
        "B",
        "b*",
        "unit",
        "throughput at b*",
        "at B",
        "at B vs b*",
        "knee (fall)",
    ]
    rows: list[list[Any]] = []
    sources: list[str] = []
    for p in comparison.points:
        if p.origin != MEASURED or p.best_batch is None or not p.best_throughput:
            continue
        sources.append(p.source)
        at_b = p.throughput
        change = Cell(f"{at_b / p.best_throughput - 1:+.1%}", at_b / p.best_throughput - 1) if at_b else "-"
        rows.append(
            [
                p.workload,
                p.gpu,
                p.precision,
                fmt_number(p.max_batch or 0),
                best_text(p),
                p.unit,
                Cell(fmt_number(p.best_throughput), p.best_throughput),
                Cell(fmt_number(at_b), at_b) if at_b else "-",
                change,
                knee_text(p.knee_batch, p.knee_after_batch, p.knee_drop),
            ]
        )
    notes = [
        "b* = the batch with the highest throughput on the scan's curve (powers of two below B, B, and the "
        "batches the knee's bisection timed). A card's throughput at B can be well below its best. Where the "
        "curve's time budget skipped points, b* is the best of the points timed.",
        f"Knee = the last batch before throughput falls by more than {KNEE_FALL:.0%} (beyond the step-time "
        f"spread), located by bisection to within {KNEE_RESOLUTION:.0%}; '-' = no such fall on the curve.",
    ]
    return Table("best_batch", "Best batch b* beside max batch B", columns, rows, notes, sources, keep=3)


def ranking_table(comparison: Comparison) -> Table:
    """Where two or more measured cards have a workload and precision: each card's rank at its max batch B beside
    its rank at its best batch b* (throughput at B where a card has no curve, marked)."""
    columns = [
        "workload",
        "precision",
        "GPU",
        "B",
        "throughput at B",
        "rank at B",
        "b*",
        "throughput at b*",
        "rank at b*",
        "unit",
    ]
    rows: list[list[Any]] = []
    sources: list[str] = []
    groups: dict[tuple[str, str], list[Point]] = {}
    for p in comparison.points:
        if p.origin == MEASURED and p.throughput is not None:
            groups.setdefault((p.workload, p.precision), []).append(p)
    for (workload, precision), points in groups.items():
        if len(points) < 2 or not any(p.best_throughput for p in points):
            continue
        best = {id(p): (p.best_throughput if p.best_throughput and not p.oom else p.throughput) for p in points}
        at_b = {id(p): p.throughput for p in points}
        rank_b = {id(p): i + 1 for i, p in enumerate(sorted(points, key=lambda q: -(at_b[id(q)] or 0.0)))}
        rank_best = {id(p): i + 1 for i, p in enumerate(sorted(points, key=lambda q: -(best[id(q)] or 0.0)))}
        for p in sorted(points, key=lambda q: rank_best[id(q)]):
            b_star = fmt_number(p.best_batch) if p.best_batch is not None else "B (no curve)"
            speed_b, speed_best = at_b[id(p)] or 0.0, best[id(p)] or 0.0
            sources.append(p.source)
            rows.append(
                [
                    workload,
                    precision,
                    p.gpu,
                    fmt_number(p.max_batch or 0),
                    Cell(fmt_number(speed_b), speed_b),
                    rank_b[id(p)],
                    b_star,
                    Cell(fmt_number(speed_best), speed_best),
                    rank_best[id(p)],
                    p.unit,
                ]
            )
    notes = [
        "The same cards ranked two ways: at each card's max batch B (the 2020 study's method), and at each "
        "card's best batch b* (like for like). A card without a curve in its file is ranked at B in both."
    ]
    return Table("ranking", "Cards ranked at max batch B and at best batch b*", columns, rows, notes, sources, keep=3)


def with_basis(tables: list[Table], basis: Basis, comparison: Comparison) -> list[Table]:
    """Say in the relative table's header and notes which figure it normalizes, and add the b* table (and, with two
    or more cards, the ranking at B beside that at b*) after the throughput table when any point has a curve.
    Returns the tables (the relative one retitled in place)."""
    out: list[Table] = []
    for table in tables:
        if table.key == "relative":
            table.title = f"{table.title}: {basis.label}"
            table.notes.extend(basis.notes)
        out.append(table)
        if table.key == "throughput":
            out += [t for t in (best_batch_table(comparison), ranking_table(comparison)) if t.rows]
    return out
