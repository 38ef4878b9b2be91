"""Tables built from result files: the scan summary, and the comparison across cards.

No torch: reports are made on any machine. The comparison (`memprobe report`) puts memprobe's measurements,
published figures (memprobe/data/published.csv) and, for charts, predictions side by side, and marks every
cell that memprobe did not measure. It normalizes throughput to a reference card, like the 2020 study.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from tabulate import tabulate

from memprobe.catalog import PRECISIONS, Catalog, default_catalog
from memprobe.compare.published import SOURCES, Figure, default_published
from memprobe.results import PrecisionResult, ScanResult
from memprobe.units import gib

def _proof_text(p: PrecisionResult) -> str:
    proof = p.proof or {}
    if p.max_batch == 0:
        return "1 fails" if proof.get("verified") else "1 fails (search only)"
    if proof.get("fits") is None:
        return "-"
    fails = proof.get("fails")
    text = f"{proof['fits']} fits, {fails} {proof.get('fail_outcome') or 'fails'}" if fails else f"{proof['fits']} fits (cap)"
    return text if proof.get("verified") else text + " (unverified)"


def _agreed_text(p: PrecisionResult) -> str:
    proof = p.proof or {}
    if not proof:
        return "-"
    if proof.get("agreed"):
        return "yes"
    # "in_process": files written before search trials near the edge ran in fresh processes
    found = (proof.get("search") or proof.get("in_process") or {}).get("fits")
    return f"no (search {found})"


def newest_finished(results: Sequence[ScanResult]) -> list[tuple[ScanResult, str, PrecisionResult]]:
    """Per (GPU, workload, precision): the newest finished precision, or, if none finished, the newest
    one. A rerun thus replaces an interrupted or earlier row; sorted by workload, then precision order."""
    best: dict[tuple[str, str, str], tuple[ScanResult, str, PrecisionResult]] = {}
    for result in results:
        gpu = result.environment.get("gpu", {}).get("name", "?")
        for name, p in result.precisions.items():
            key = (gpu, str(result.workload.get("name")), name)
            rank = (p.status == "done", result.created)
            if key not in best or rank >= (best[key][2].status == "done", best[key][0].created):
                best[key] = (result, name, p)
    order = {name: i for i, name in enumerate(PRECISIONS)}
    return [best[k] for k in sorted(best, key=lambda k: (k[0], k[1], order.get(k[2], len(order))))]


def scan_rows(results: Iterable[ScanResult], newest_only: bool = False,
              precisions: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One row per workload and precision with the headline numbers of a scan. With `newest_only`,
    one row per GPU, workload and precision across all `results` (see newest_finished);
    `precisions` keeps only those."""
    results = list(results)
    if newest_only:
        entries = newest_finished(results)
    else:
        entries = [(r, name, p) for r in results for name, p in r.precisions.items()]
    if precisions:
        entries = [e for e in entries if e[1] in precisions]
    rows = []
    for result, name, p in entries:
        gpu = result.environment.get("gpu", {}).get("name", "?")
        unit = result.workload.get("unit", "samples")
        t = p.throughput or {}
        util = t.get("utilization") or {}
        gpu_util = (util.get("gpu_util_pct") or {}).get("mean")
        power = (util.get("power_w") or {}).get("mean")
        proof = p.proof or {}
        reused = set(proof.get("reused_from_search", []))
        rechecks = [c for c in proof.get("checks", []) if c["batch"] not in reused]
        fresh = sum(bool(a.get("fresh")) for a in p.attempts) + len(rechecks)
        mfu = t.get("mfu")
        rows.append({
            "gpu": gpu,
            "model": result.workload.get("name"),
            "precision": name,
            "max batch": p.max_batch if p.status == "done" else f"{p.status}: {p.error.splitlines()[0][:60]}" if p.error else p.status,
            "proof (fresh processes)": _proof_text(p),
            "agreed": _agreed_text(p),
            "trials (fresh)": f"{len(p.attempts) + len(rechecks)} ({fresh})",
            "search s": p.search_seconds if p.search_seconds is not None else "-",
            f"throughput": f"{t['units_per_s']:.1f} {unit}/s" if t.get("units_per_s") else (t.get("error", "-")[:40] if t else "-"),
            "step ms (median)": f"{t['step_time']['median_s'] * 1000:.0f}" if t.get("step_time") else "-",
            "MFU %": f"{mfu * 100:.1f}" if mfu is not None else "-",
            "peak GiB": gib(t.get("peak_reserved")) if t else "-",
            "GPU util %": f"{gpu_util:.0f}" if gpu_util is not None else "-",
            "power W": f"{power:.0f}" if power is not None else "-",
        })
    return rows


def scan_table(results: Iterable[ScanResult], fmt: str = "github", newest_only: bool = False,
               precisions: Sequence[str] | None = None) -> str:
    """The scan summary as text: a table (github, plain or another tabulate format), csv or json."""
    rows = scan_rows(results, newest_only, precisions)
    if fmt == "json":
        return json.dumps(rows, indent=1)
    if not rows:
        return "(no results)"
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue().rstrip("\n")
    return tabulate(rows, headers="keys", tablefmt=fmt, disable_numparse=True)


# --- the comparison across cards ---------------------------------------------------------------

MEASURED, PUBLISHED, PREDICTED = "measured", "published", "predicted"
MARKS = {MEASURED: "", PUBLISHED: " (pub)", PREDICTED: " (pred)"}
LEGEND = ("Legend: unmarked = measured by memprobe; (pub) = published figure from elsewhere (sources in the notes); "
          "(pred) = predicted by memprobe from a fitted memory model; >=N = a batch that fit, not a searched maximum; "
          "OOM = batch 1 does not train (counted as 0); (vs pub) = a measured value divided by a published reference.")
PRECISION_ORDER = PRECISIONS  # the order tables list them in
FORMATS = ("github", "plain", "csv", "json")
# The 2020 study normalized to this card; memprobe keeps that reference when it is among the inputs.
DEFAULT_REFERENCE = "Quadro RTX 8000"


class ReportError(ValueError):
    """A report cannot be made as asked (unknown reference GPU, nothing to compare). One line, for the CLI."""


@dataclass
class Point:
    """One card x workload x precision, from one origin (a result file, or one published source).

    gpu is the catalog name when the catalog knows the device ("NVIDIA H100 80GB HBM3" -> "H100 SXM"), else
    the device name. max_batch/throughput are None when unknown; an OOM (max batch 0) has throughput 0.
    """

    gpu: str
    device: str
    workload: str
    precision: str
    origin: str
    source: str
    max_batch: float | None
    batch_unit: str
    batch_lower_bound: bool
    throughput: float | None
    unit: str
    status: str = "done"
    mfu: float | None = None
    mfu_why: str = ""
    utilization: dict[str, Any] = field(default_factory=dict)
    created: str = ""
    tokens_per_sample: float | None = None  # fairseq-style batch in tokens = batch x this (translation)

    @property
    def oom(self) -> bool:
        return self.max_batch == 0


@dataclass
class Comparison:
    """Every point to show, the order cards were given in, and notes that must be printed with the tables."""

    points: list[Point]
    gpu_order: list[str]
    notes: list[str] = field(default_factory=list)
    with_published: bool = False

    def precisions(self) -> list[str]:
        present = {p.precision for p in self.points}
        return [p for p in PRECISION_ORDER if p in present] + sorted(present - set(PRECISION_ORDER))

    def workloads(self) -> list[str]:
        seen: list[str] = []
        for p in self.points:
            if p.workload not in seen:
                seen.append(p.workload)
        return seen

    def find(self, gpu: str, workload: str, precision: str, origin: str) -> Point | None:
        for p in self.points:
            if (p.gpu, p.workload, p.precision, p.origin) == (gpu, workload, precision, origin):
                return p
        return None


def definition_key(workload: dict[str, Any]) -> str:
    """A short hash of everything in a workload definition that changes memory or speed (not the description)."""
    core = {k: workload.get(k) for k in ("name", "family", "version", "unit", "params", "optimizer")}
    return hashlib.sha1(json.dumps(core, sort_keys=True, default=str).encode()).hexdigest()[:6]


def workload_labels(results: Sequence[ScanResult]) -> tuple[list[str], list[str]]:
    """A display label per result, and notes. Results whose definitions differ under one name get apart labels.

    Same name, same definition -> the name. Same name, different definitions -> name@v<version>, and a
    #<hash> suffix when the versions alone do not tell them apart. Never raises.
    """
    by_name: dict[str, dict[str, dict[str, Any]]] = {}
    for r in results:
        by_name.setdefault(str(r.workload.get("name", "?")), {})[definition_key(r.workload)] = r.workload
    labels_for: dict[tuple[str, str], str] = {}
    notes = []
    for name, defs in by_name.items():
        if len(defs) == 1:
            labels_for[(name, next(iter(defs)))] = name
            continue
        versions = [d.get("version") for d in defs.values()]
        unique_versions = len(set(versions)) == len(versions)
        for key, d in defs.items():
            labels_for[(name, key)] = f"{name}@v{d.get('version')}" + ("" if unique_versions else f"#{key}")
        differing = sorted({k for d in defs.values() for k in (d.get("params") or {})
                            if len({json.dumps((e.get("params") or {}).get(k), default=str) for e in defs.values()}) > 1})
        what = ", ".join(filter(None, ["version" if len(set(versions)) > 1 else "",
                                       f"params {', '.join(differing)}" if differing else ""])) or "optimizer or unit"
        shown = ", ".join(sorted(labels_for[(name, k)] for k in defs))
        notes.append(f"{name}: {len(defs)} different workload definitions in the inputs (they differ in {what}); "
                     f"shown apart as {shown} and never compared with each other.")
    return [labels_for[(str(r.workload.get('name', '?')), definition_key(r.workload))] for r in results], notes


def _mfu(p: PrecisionResult, device: str) -> tuple[float | None, str]:
    """MFU from the file when it has one, or from a recorded FLOPs count and the catalog's peak; else why not."""
    from memprobe.catalog import peak_tflops

    t = p.throughput or {}
    if t.get("mfu") is not None:
        return float(t["mfu"]), ""
    flops = t.get("flops_per_sample") or (p.settings.get("task") or {}).get("flops_per_sample")
    if not flops:
        return None, "the result file records no FLOPs per sample"
    peak = peak_tflops(device, p.precision)
    if not peak:
        return None, f"the catalog has no {p.precision} peak for {device}"
    samples = t.get("samples_per_s") or 0.0
    return float(flops) * samples / (peak * 1e12), ""


def batch_unit(result: ScanResult, p: PrecisionResult) -> str:
    """What one step's batch counts: the workload's unit ("sequences"), or "samples of 128 tokens" when a sample
    holds several units (translation: a sentence pair of tgt_len target tokens)."""
    unit = str(result.workload.get("unit", "samples"))
    per = (p.settings.get("task") or {}).get("units_per_sample")
    return unit if not per or float(per) == 1.0 else f"samples of {float(per):g} {unit}"


def _measured_points(loaded: Sequence[tuple[Path, ScanResult]], labels: list[str], catalog: Catalog) -> list[Point]:
    points = []
    for (path, result), label in zip(loaded, labels):
        device = str(result.environment.get("gpu", {}).get("name", "?"))
        unit = str(result.workload.get("unit", "samples"))
        for name, p in result.precisions.items():
            t = p.throughput or {}
            done = p.status == "done" and p.max_batch is not None
            throughput = None
            if done and p.max_batch == 0:
                throughput = 0.0  # OOM at batch 1 counts as 0, like the 2020 study
            elif done and t.get("units_per_s") and t.get("outcome", "fit") == "fit":
                throughput = float(t["units_per_s"])
            mfu, why = _mfu(p, device) if throughput else (None, "")
            points.append(Point(
                gpu=catalog.canonical(device), device=device, workload=label, precision=name, origin=MEASURED,
                source=str(path), max_batch=float(p.max_batch) if done else None, batch_unit=batch_unit(result, p),
                batch_lower_bound=False, throughput=throughput, unit=f"{t.get('unit') or unit}/s", status=p.status,
                mfu=mfu, mfu_why=why, utilization=t.get("utilization") or {}, created=result.created,
                tokens_per_sample=(p.settings.get("task") or {}).get("tokens_per_sample"),
            ))
    return points


def _published_points(figures: Iterable[Figure], catalog: Catalog) -> list[Point]:
    grouped: dict[tuple[str, str, str, str], dict[str, Figure]] = {}
    for f in figures:
        if f.memprobe_workload:
            grouped.setdefault((f.source, f.gpu, f.memprobe_workload, f.precision), {})[f.metric] = f
    points = []
    for (source, gpu, workload, precision), by_metric in grouped.items():
        batch, speed = by_metric.get("max_batch"), by_metric.get("throughput")
        max_batch = batch.value if batch else None
        throughput = speed.value if speed else None
        if max_batch == 0:
            throughput = 0.0
        if max_batch is None and throughput is None:
            continue  # '-' in both tables: the source has no figure for this card
        points.append(Point(
            gpu=catalog.canonical(gpu), device=gpu, workload=workload, precision=precision, origin=PUBLISHED,
            source=source, max_batch=max_batch, batch_unit=batch.unit if batch else "",
            batch_lower_bound=bool(batch and batch.is_lower_bound), throughput=throughput,
            unit=speed.unit if speed else "", mfu_why="published figure",
        ))
    return points


def build_comparison(loaded: Sequence[tuple[Path, ScanResult]], with_published: bool = False,
                     precisions: Sequence[str] | None = None, catalog: Catalog | None = None,
                     figures: Iterable[Figure] | None = None) -> Comparison:
    """Collect the points to compare: measured (from `loaded`, pairs of path and result) and, if asked, published.

    Workloads whose definitions differ are labelled apart; a card measured twice for one workload and
    precision keeps the newest result (noted). `precisions` filters. Raises ReportError when nothing is left.
    """
    catalog = catalog or default_catalog()
    labels, notes = workload_labels([r for _, r in loaded])
    measured = _measured_points(loaded, labels, catalog)
    newest: dict[tuple[str, str, str], Point] = {}
    for p in measured:
        key = (p.gpu, p.workload, p.precision)
        if key in newest:
            keep, drop = sorted((newest[key], p), key=lambda q: q.created, reverse=True)
            notes.append(f"{p.gpu} {p.workload} {p.precision} is in two files; using the newer {Path(keep.source).name}, "
                         f"not {Path(drop.source).name}.")
            newest[key] = keep
        else:
            newest[key] = p
    points = [p for p in measured if newest.get((p.gpu, p.workload, p.precision)) is p]
    if with_published:
        published = _published_points(default_published() if figures is None else figures, catalog)
        points += published
        names = sorted({p.workload for p in published})
        for label in dict.fromkeys(p.workload for p in measured):
            if not any(q.workload == label for q in published):
                notes.append(f"{label}: no published figures for this workload (published ones exist for "
                             f"{', '.join(names)}); its cells are memprobe's alone.")
    if precisions:
        points = [p for p in points if p.precision in precisions]
    if not points:
        raise ReportError("nothing to report: no result (or published figure) matches the inputs"
                          + (f" and --precision {','.join(precisions)}" if precisions else ""))
    order: list[str] = []
    for p in points:  # measured cards first, in the order given; then published ones
        if p.gpu not in order:
            order.append(p.gpu)
    return Comparison(points=points, gpu_order=order, notes=notes, with_published=with_published)


# --- cells and tables ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Cell:
    """One table cell: the text shown, the number behind it (for csv/json/charts) and where it comes from."""

    text: str
    value: float | None = None
    origin: str = MEASURED

    def __str__(self) -> str:
        return self.text


@dataclass
class Table:
    """A titled table; rows hold label strings and Cells. notes are printed under it."""

    key: str
    title: str
    columns: list[str]
    rows: list[list[Any]]
    notes: list[str] = field(default_factory=list)


def fmt_number(value: float) -> str:
    """A number for a table: integers bare, small values with 2 decimals, others with 1."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"


def _mark(text: str, origin: str) -> str:
    return text + MARKS.get(origin, f" ({origin})")


def batch_cell(p: Point | None) -> Cell | str:
    """Max batch as shown: exact for memprobe, '>=N' for published batches that were not searched, OOM for 0."""
    if p is None:
        return "-"
    if p.max_batch is None:
        return Cell(_mark(p.status if p.status != "done" else "-", p.origin), None, p.origin)
    if p.max_batch == 0:
        return Cell(_mark("OOM", p.origin), 0.0, p.origin)
    text = (">=" if p.batch_lower_bound else "") + fmt_number(p.max_batch)
    if p.tokens_per_sample:  # also in tokens, the unit fairseq's --max-tokens (and the 2020 table) count in
        text += f" ({fmt_number(p.max_batch * float(p.tokens_per_sample))} tok)"
    return Cell(_mark(text, p.origin), p.max_batch, p.origin)


def throughput_cell(p: Point | None) -> Cell | str:
    """Throughput as shown: the number, '0 (OOM)' when batch 1 does not train."""
    if p is None:
        return "-"
    if p.throughput is None:
        return Cell(_mark(p.status if p.status != "done" else "-", p.origin), None, p.origin)
    if p.oom:
        return Cell(_mark("0 (OOM)", p.origin), 0.0, p.origin)
    return Cell(_mark(fmt_number(p.throughput), p.origin), p.throughput, p.origin)


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
    rows = []
    for workload, gpu, source, points in _row_groups(comparison):
        by = _by_precision(points)
        unit = next((p.batch_unit for p in points if p.batch_unit), "")
        rows.append([workload, gpu, source, unit] + [batch_cell(by.get(pr)) for pr in precisions])
    notes = []
    if any(p.origin == PUBLISHED and p.batch_lower_bound for p in comparison.points):
        notes.append("Published batches are batches that fit (2020: largest power of two; 2023-2025 catalog: "
                     "hand-picked per memory size), hence >=; memprobe's are exact maxima (B fits, B+1 does not).")
    if any(p.origin == PUBLISHED and p.batch_unit == "tokens" for p in comparison.points):
        notes.append("transformer-big: the published batch is counted in tokens (fairseq --max-tokens); memprobe's "
                     "in sentence pairs, with its size in tokens (batch x max(src, tgt) length) in brackets.")
    return Table("max_batch", "Max batch per workload, GPU and precision", ["workload", "GPU", "source", "batch unit"]
                 + precisions, rows, notes)


def throughput_table(comparison: Comparison) -> Table:
    """Throughput at the max batch per workload x GPU x precision, with its unit and MFU (measured rows only)."""
    precisions = comparison.precisions()
    mfu_precisions = [pr for pr in precisions if any(p.precision == pr and p.origin == MEASURED for p in comparison.points)]
    columns = ["workload", "GPU", "source", "unit"]
    for pr in precisions:
        columns.append(pr)
        if pr in mfu_precisions:
            columns.append(f"{pr} MFU")
    rows = []
    for workload, gpu, source, points in _row_groups(comparison):
        by = _by_precision(points)
        unit = next((p.unit for p in points if p.unit), "")
        row: list[Any] = [workload, gpu, source, unit]
        for pr in precisions:
            row.append(throughput_cell(by.get(pr)))
            if pr in mfu_precisions:
                p = by.get(pr)
                row.append(Cell(f"{p.mfu * 100:.1f}%", p.mfu) if p is not None and p.mfu is not None else "-")
        rows.append(row)
    notes = []
    reasons = sorted({p.mfu_why for p in comparison.points if p.origin == MEASURED and p.mfu is None and p.mfu_why})
    if reasons:
        notes.append(f"MFU '-': {'; '.join(reasons)} (MFU = FLOPs per sample x samples/s / the card's dense peak "
                     "for the precision, from memprobe/data/gpus.yaml). Published rows have no MFU.")
    if any(p.origin == PUBLISHED and p.precision == "tf32" for p in comparison.points):
        notes.append("tf32 published cells are the 2023-2025 catalog's 'FP32' column on Ampere and newer cards, where "
                     "TF32 tensor cores were on; compare them with memprobe tf32 results, not fp32.")
    return Table("throughput", "Training throughput at the max batch", columns, rows, notes)


# --- normalization to a reference card ---------------------------------------------------------

@dataclass
class RelativeCell:
    """Throughput over the reference's, for one card and one workload column."""

    value: float
    origin: str
    oom: bool = False
    vs_published: bool = False


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
    raise ReportError(f"reference GPU '{requested}' is not among the results"
                      + (f" (ambiguous: {', '.join(partial)})" if partial else "")
                      + f"; GPUs: {', '.join(gpus)}")


def relative_throughput(comparison: Comparison, reference: str | None = None, catalog: Catalog | None = None) -> Relative:
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
    candidates.sort(key=lambda c: (comparison.workloads().index(c[0]), order.get(c[1], 99)))
    columns, ref_values, skipped = [], {}, []
    for col in candidates:
        ref_point = comparison.find(ref, col[0], col[1], MEASURED) or comparison.find(ref, col[0], col[1], PUBLISHED)
        if ref_point is None or not ref_point.throughput:
            skipped.append(f"{col[0]} {col[1]}" + (" (reference OOM)" if ref_point is not None and ref_point.oom else ""))
            continue
        columns.append(col)
        ref_values[col] = ref_point
    if skipped:
        notes.append(f"Not normalized (the reference {ref} has no throughput there): {', '.join(skipped)}; "
                     "--reference picks a card that has them.")
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
        row.cells[col] = RelativeCell(p.throughput / ref_point.throughput, p.origin, p.oom,
                                      vs_published=p.origin == MEASURED and ref_point.origin == PUBLISHED)
    for row in rows.values():
        row.count = len(row.cells)
        row.mean = sum(c.value for c in row.cells.values()) / row.count if row.count else None
    ordered = sorted(rows.values(), key=lambda r: (-(r.mean if r.mean is not None else -1), r.gpu, r.origin))
    published_refs = [f"{w} {pr} {fmt_number(p.throughput)} {p.unit} ({p.source})"
                      for (w, pr), p in ref_values.items() if p.origin == PUBLISHED]
    if published_refs:
        notes.append(f"The reference's values are published for: {'; '.join(published_refs)}. A measured cell divided "
                     "by one of them compares two implementations and is marked (vs pub).")
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
            text = _mark(text, c.origin) + (" (vs pub)" if c.vs_published else "")
            cells.append(Cell(text, c.value, c.origin))
        if row.mean is None:
            cells.append("-")
        else:
            text = f"{row.mean:.2f}" + (f" ({row.count}/{total})" if row.count < total else "")
            cells.append(Cell(_mark(text, row.origin), row.mean, row.origin))
        rows.append(cells)
    notes = [f"Reference: {relative.reference} = 1.00 in every column it has. OOM counts as 0. The mean is the "
             "arithmetic mean over the columns a row has ((n/N) when it lacks some); means over different "
             "columns are not comparable."] + relative.notes
    return Table("relative", f"Throughput relative to {relative.reference}", columns, rows, notes)


def gains_table(comparison: Comparison) -> Table:
    """Mixed-precision gain per workload and card: fp16 and bf16 over fp32, for max batch and throughput."""
    columns = ["workload", "GPU", "source", "fp16/fp32 batch", "fp16/fp32 throughput", "bf16/fp32 batch",
               "bf16/fp32 throughput"]
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
    notes = ["Ratios of the same card and source: fp16 = autocast float16 + GradScaler, bf16 = autocast bfloat16, "
             "fp32 = true FP32 (TF32 off). Published rows whose 'FP32' is TF32 have no fp32 baseline and are left out."]
    if any(r[2] != "measured" for r in rows):
        notes.append("Published batch ratios compare hand-picked batches, not maxima.")
    return Table("gains", "Mixed-precision gain over fp32", columns, rows, notes)


def utilization_table(comparison: Comparison) -> Table:
    """Utilization sampled during memprobe's timed steps (measured rows only: nothing published has it)."""
    columns = ["GPU", "workload", "precision", "batch", "GPU util %", "memory util %", "power W (mean / max)",
               "memory used GiB", "SM clock MHz"]
    rows = []
    for p in comparison.points:
        if p.origin != MEASURED or not p.utilization:
            continue
        u = p.utilization

        def mean(key: str, scale: float = 1.0, digits: int = 0) -> str:
            m = (u.get(key) or {}).get("mean")
            return "-" if m is None else f"{m / scale:.{digits}f}"

        power = u.get("power_w") or {}
        power_text = "-" if power.get("mean") is None else f"{power['mean']:.0f} / {power.get('max', power['mean']):.0f}"
        used = (u.get("mem_used_bytes") or {}).get("max")
        rows.append([p.gpu, p.workload, p.precision, fmt_number(p.max_batch) if p.max_batch is not None else "-",
                     mean("gpu_util_pct"), mean("mem_util_pct"), power_text, gib(used), mean("sm_clock_mhz")])
    notes = ["Sampled every 0.1 s from NVML during the timed steps at the max batch; memory util % is the "
             "memory-controller busy time, not capacity."]
    return Table("utilization", "Utilization during the timed steps (measured)", columns, rows, notes)


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


def report_tables(comparison: Comparison, relative: Relative) -> list[Table]:
    """All the comparison tables, in the order `memprobe report` prints them."""
    tables = [max_batch_table(comparison), throughput_table(comparison), relative_table(relative), gains_table(comparison)]
    util = utilization_table(comparison)
    if util.rows:
        tables.append(util)
    return tables


# --- rendering ----------------------------------------------------------------------------------

def _cell_json(cell: Any) -> Any:
    if isinstance(cell, Cell):
        return {"text": cell.text, "value": cell.value, "origin": cell.origin}
    return cell


def render(tables: Sequence[Table], fmt: str = "github", title: str = "", notes: Sequence[str] = ()) -> str:
    """Tables as text in one of FORMATS: github (markdown), plain, csv (one block per table), json.

    Raises ValueError for an unknown format.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format '{fmt}' (choose from {', '.join(FORMATS)})")
    if fmt == "json":
        return json.dumps({
            "title": title,
            "notes": list(notes),
            "tables": [{"key": t.key, "title": t.title, "columns": t.columns, "notes": t.notes,
                        "rows": [dict(zip(t.columns, map(_cell_json, row))) for row in t.rows]} for t in tables],
        }, indent=1)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        for line in ([title] if title else []) + list(notes):
            out.write(f"# {line}\n")
        for t in tables:
            out.write(f"\n# {t.title}\n")
            writer.writerow(t.columns)
            writer.writerows([[str(c) for c in row] for row in t.rows])
            for n in t.notes:
                out.write(f"# {n}\n")
        return out.getvalue()
    bullet = "- " if fmt == "github" else "  "
    parts = []
    if title:
        parts.append(f"## {title}" if fmt == "github" else f"{title}\n{'=' * len(title)}")
    if notes:
        parts.append("\n".join(bullet + n for n in notes))
    for t in tables:
        heading = f"### {t.title}" if fmt == "github" else f"{t.title}\n{'-' * len(t.title)}"
        body = (tabulate([[str(c) for c in row] for row in t.rows], headers=t.columns, tablefmt=fmt,
                         disable_numparse=True) if t.rows else "(no rows)")
        tail = "\n".join(bullet + n for n in t.notes)
        parts.append("\n\n".join(x for x in (heading, body, tail) if x))
    return "\n\n".join(parts) + "\n"


def comparison_report(loaded: Sequence[tuple[Path, ScanResult]], reference: str | None = None,
                      precisions: Sequence[str] | None = None, fmt: str = "github", with_published: bool = False,
                      ) -> tuple[str, Comparison, Relative]:
    """Build and render `memprobe report`: returns the text and the data behind it (for charts).

    Raises ReportError (nothing to report, unknown reference) and ValueError (unknown format).
    """
    comparison = build_comparison(loaded, with_published=with_published, precisions=precisions)
    relative = relative_throughput(comparison, reference)
    notes = [LEGEND] + comparison.notes + source_notes(comparison)
    title = f"memprobe report: {len(loaded)} result file(s)" + (" + published figures" if with_published else "")
    return render(report_tables(comparison, relative), fmt, title, notes), comparison, relative
