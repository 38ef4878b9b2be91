"""Cross-card tables from a Comparison: max batch, throughput, mixed-precision gain, utilization.

No torch. Cells keep their origin so rendering can mark published and predicted values.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from memprobe.compare.comparison import MARKS, MEASURED, PUBLISHED, Comparison, Point
from memprobe.compare.published import SOURCES, Figure, default_published
from memprobe.core.text import textwidth
from memprobe.core.text.units import gib


@dataclass(frozen=True)
class Cell:
    """One table cell: the text shown, the number behind it (for csv/json/charts), where it comes from, and the
    result file that measured it ("" for published, predicted or derived figures): the HTML page links it."""

    text: str
    value: float | None = None
    origin: str = MEASURED
    source: str = ""

    def __str__(self) -> str:
        return self.text


@dataclass
class Table:
    """A titled table; rows hold label strings and Cells. notes are printed under it. `sources` (empty, or one
    per row) names the result file each row was read from, for tables whose row is one file's (the HTML page)."""

    key: str
    title: str
    columns: list[str]
    rows: list[list[Any]]
    notes: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    keep: int = 1  # the first columns that name a row: repeated in each part where the table is split to fit


def fmt_number(value: float) -> str:
    """A number for a table: integers bare, small values with 2 decimals, others with 1."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"


def _mark(text: str, origin: str) -> str:
    return text + MARKS.get(origin, f" ({origin})")


def measured_in(p: Point) -> str:
    """The result file a point was measured in ("" for a published point): what a cell of it links to."""
    return p.source if p.origin == MEASURED else ""


def batch_cell(p: Point | None) -> Cell | str:
    """Max batch as shown: exact for memprobe, '>=N' for published batches that were not searched, OOM for 0."""
    if p is None:
        return "-"
    if p.max_batch is None:
        return Cell(_mark(p.status if p.status != "done" else "-", p.origin), None, p.origin)
    if p.max_batch == 0:
        return Cell(_mark("OOM", p.origin), 0.0, p.origin, measured_in(p))
    text = (">=" if p.batch_lower_bound else "") + fmt_number(p.max_batch)
    if p.tokens_per_sample:  # also in tokens, the unit fairseq's --max-tokens (and the 2020 table) count in
        text += f" ({fmt_number(p.max_batch * float(p.tokens_per_sample))} tok)"
    return Cell(_mark(text, p.origin), p.max_batch, p.origin, measured_in(p))


def throughput_cell(p: Point | None) -> Cell | str:
    """Throughput as shown: the number, '0 (OOM)' when batch 1 does not train."""
    if p is None:
        return "-"
    if p.throughput is None:
        return Cell(_mark(p.status if p.status != "done" else "-", p.origin), None, p.origin)
    if p.oom:
        return Cell(_mark("0 (OOM)", p.origin), 0.0, p.origin, measured_in(p))
    return Cell(_mark(fmt_number(p.throughput), p.origin), p.throughput, p.origin, measured_in(p))


def _row_groups(comparison: Comparison) -> list[tuple[str, str, str, list[Point]]]:
    """(workload, gpu, source label, points) per table row. Measured and published never share a row."""
    groups: dict[tuple[str, str, str], list[Point]] = {}
    for w in comparison.workloads():
        for gpu in comparison.gpu_order:
            for p in comparison.points:
                if p.workload == w and p.gpu == gpu:
                    label = "measured" if p.origin == MEASURED else p.source
                    groups.setdefault((w, gpu, label), []).append(p)
    return [(w, g, s, ps) for (w, g, s), ps in groups.items()]


def _by_precision(points: list[Point]) -> dict[str, Point]:
    return {p.precision: p for p in points}


def max_batch_table(comparison: Comparison) -> Table:
    """Max batch per workload x GPU x precision (the 2020 study's first table, exact where memprobe measured)."""
    precisions = comparison.precisions()
    rows: list[list[Any]] = []
    for workload, gpu, source, points in _row_groups(comparison):
        by = _by_precision(points)
        unit = next((p.batch_unit for p in points if p.batch_unit), "")
        rows.append([workload, gpu, source, unit, *(batch_cell(by.get(pr)) for pr in precisions)])
    notes = []
    if any(p.origin == PUBLISHED and p.batch_lower_bound for p in comparison.points):
        notes.append(
            "Published batches are batches that fit (2020: largest power of two; 2023-2025 catalog: "
            "hand-picked per memory size), hence >=; memprobe's are exact maxima (B fits, B+1 does not)."
        )
    if any(p.origin == PUBLISHED and p.batch_unit == "tokens" for p in comparison.points):
        notes.append(
            "transformer-big: the published batch is counted in tokens (fairseq --max-tokens); memprobe's "
            "in sentence pairs, with its size in tokens (batch x max(src, tgt) length) in brackets."
        )
    return Table(
        "max_batch",
        "Max batch per workload, GPU and precision",
        ["workload", "GPU", "source", "batch unit"] + precisions,
        rows,
        notes,
        keep=3,
    )


def throughput_table(comparison: Comparison, basis: str = "") -> Table:
    """Throughput per workload x GPU x precision, with its unit and MFU (measured rows only): at the max batch B, or
    what `basis` says (compare.curves.like_for_like: each card's best batch b* by default), a measured cell taken at B
    where others are not marked (at B)."""
    precisions = comparison.precisions()
    mfu_precisions = [
        pr for pr in precisions if any(p.precision == pr and p.origin == MEASURED for p in comparison.points)
    ]
    columns = ["workload", "GPU", "source", "unit"]
    for pr in precisions:
        columns.append(pr)
        if pr in mfu_precisions:
            columns.append(f"{pr} MFU")
    rows = []
    mixed = any(p.at != "B" for p in comparison.points if p.origin == MEASURED)
    for workload, gpu, source, points in _row_groups(comparison):
        by = _by_precision(points)
        unit = next((p.unit for p in points if p.unit), "")
        row: list[Any] = [workload, gpu, source, unit]
        for pr in precisions:
            p = by.get(pr)
            cell = throughput_cell(p)
            if (
                mixed
                and p is not None
                and p.origin == MEASURED
                and p.at == "B"
                and isinstance(cell, Cell)
                and p.throughput
            ):
                cell = Cell(cell.text + " (at B)", cell.value, cell.origin, cell.source)
            row.append(cell)
            if pr in mfu_precisions:
                p = by.get(pr)
                row.append(
                    Cell(f"{p.mfu * 100:.1f}%", p.mfu, source=measured_in(p))
                    if p is not None and p.mfu is not None
                    else "-"
                )
        rows.append(row)
    notes = []
    reasons = sorted({p.mfu_why for p in comparison.points if p.origin == MEASURED and p.mfu is None and p.mfu_why})
    if reasons:
        notes.append(
            f"MFU '-': {'; '.join(reasons)} (MFU = FLOPs per sample x samples/s / the card's dense peak "
            "for the precision, from memprobe/data/gpus.yaml). Published rows have no MFU."
        )
    if any(p.origin == PUBLISHED and p.precision == "tf32" for p in comparison.points):
        notes.append(
            "tf32 published cells are the 2023-2025 catalog's 'FP32' column on Ampere and newer cards, where "
            "TF32 tensor cores were on; compare them with memprobe tf32 results, not fp32."
        )
    if mixed:
        notes.append("(at B) = at the card's max batch B: its file has no throughput curve, so no best batch b*.")
    if basis and basis != "throughput at each card's max batch":
        notes.append("MFU at the same batch as the throughput beside it.")
    noun = comparison.throughput_noun()
    if any(p.mode == "generate" for p in comparison.points):
        notes.append("Generation: prefill and decode tokens/s apart are in the generation table.")
    title = f"{noun}: {basis}" if basis else f"{noun} at the max batch"
    return Table("throughput", title, columns, rows, notes, keep=3)


def gains_table(comparison: Comparison, basis: str = "") -> Table:
    """Mixed-precision gain per workload and card: fp16 and bf16 over fp32, for max batch and throughput (the
    throughput `basis` says: like_for_like's; at B without one)."""
    columns = [
        "workload",
        "GPU",
        "source",
        "fp16/fp32 batch",
        "fp16/fp32 throughput",
        "bf16/fp32 batch",
        "bf16/fp32 throughput",
    ]
    rows = []

    def ratio(a: float | None, b: float | None, origin: str) -> Cell | str:
        if a is None or b is None:
            return "-"
        if b == 0:
            return Cell(_mark("n/a (fp32 OOM)", origin), None, origin)
        return Cell(_mark(f"{a / b:.2f}x", origin), a / b, origin)

    for workload, gpu, source, points in _row_groups(comparison):
        by = _by_precision(points)
        base = by.get("fp32")
        if base is None or not ({"fp16", "bf16"} & set(by)):
            continue
        row: list[Any] = [workload, gpu, source]
        for pr in ("fp16", "bf16"):
            p = by.get(pr)
            row.append(ratio(p.max_batch if p else None, base.max_batch, base.origin))
            row.append(ratio(p.throughput if p else None, base.throughput, base.origin))
        rows.append(row)
    notes = [
        "Ratios of the same card and source: fp16 = autocast float16 + GradScaler, bf16 = autocast bfloat16, "
        "fp32 = true FP32 (TF32 off). Published rows whose 'FP32' is TF32 have no fp32 baseline and are left out."
        + (f" Throughput: {basis}." if basis else "")
    ]
    if any(r[2] != "measured" for r in rows):
        notes.append("Published batch ratios compare hand-picked batches, not maxima.")
    return Table("gains", "Mixed-precision gain over fp32", columns, rows, notes, keep=3)


def utilization_table(comparison: Comparison) -> Table:
    """Utilization sampled during memprobe's timed steps (measured rows only: nothing published has it)."""
    columns = [
        "GPU",
        "workload",
        "precision",
        "batch",
        "GPU util %",
        "memory util %",
        "power W (mean / max)",
        "memory used GiB",
        "SM clock MHz",
    ]
    rows = []
    sources = []
    for p in comparison.points:
        if p.origin != MEASURED or not p.utilization:
            continue
        sources.append(p.source)
        u = p.utilization

        def mean(key: str, scale: float = 1.0, digits: int = 0, u: Mapping[str, Any] = u) -> str:
            m = (u.get(key) or {}).get("mean")
            return "-" if m is None else f"{m / scale:.{digits}f}"

        power = u.get("power_w") or {}
        power_text = (
            "-" if power.get("mean") is None else f"{power['mean']:.0f} / {power.get('max', power['mean']):.0f}"
        )
        used = (u.get("mem_used_bytes") or {}).get("max")
        rows.append(
            [
                p.gpu,
                p.workload,
                p.precision,
                fmt_number(p.max_batch) if p.max_batch is not None else "-",
                mean("gpu_util_pct"),
                mean("mem_util_pct"),
                power_text,
                gib(used),
                mean("sm_clock_mhz"),
            ]
        )
    notes = [
        "Sampled every 0.1 s from NVML during the timed steps at the max batch; memory util % is the "
        "memory-controller busy time, not capacity."
    ]
    return Table("utilization", "Utilization during the timed steps (measured)", columns, rows, notes, sources, keep=3)


def source_notes(comparison: Comparison, figures: Iterable[Figure] | None = None) -> list[str]:
    """One line per published source used, and per published workload its implementation."""
    used = {(p.source, p.workload) for p in comparison.points if p.origin == PUBLISHED}
    if not used:
        return []
    figures = default_published() if figures is None else figures
    impl: dict[tuple[str, str], str] = {}
    for f in figures:
        impl.setdefault((f.source, f.memprobe_workload), f"{f.implementation} ({f.date})")
    notes = [f"Source {s}: {SOURCES.get(s, s)}." for s in sorted({s for s, _ in used})]
    notes += [f"Published {w} ({s}): {impl.get((s, w), '?')}." for s, w in sorted(used)]
    notes.append("Full rows, units and caveats: memprobe/data/published.csv.")
    return notes


def rows_text(rows: list[dict[str, Any]], fmt: str = "github", empty: str = "(no results)", keep: int = 1) -> str:
    """Rows of dicts as text: json, csv, or a tabulate table (github, plain, ...) fitting textwidth.width() (split by
    columns, each part repeating the first `keep`); `empty` when there are none."""
    if fmt == "json":
        return json.dumps(rows, indent=1)
    if not rows:
        return empty
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue().rstrip("\n")
    headers = list(dict.fromkeys(k for r in rows for k in r))
    return textwidth.table(headers, [[r.get(k, "") for k in headers] for r in rows], fmt, keep)
