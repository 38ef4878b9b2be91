"""Gather measured, published and predicted points per card x workload x precision for comparison.

No torch. Every point says where it came from (measured by memprobe, published elsewhere, predicted), so
the tables can mark every cell that memprobe did not measure.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from memprobe.compare.published import Figure, default_published
from memprobe.core.cards.catalog import PRECISIONS, Catalog, default_catalog
from memprobe.core.cards.memcap import is_emulated
from memprobe.core.records.environment import WorkloadRecord
from memprobe.core.records.records import Timed
from memprobe.core.records.results import PrecisionResult, ScanResult
from memprobe.core.workload.variants import axis_name

MEASURED, PUBLISHED, PREDICTED = "measured", "published", "predicted"
EMULATED = "emulated"  # measured on a larger card capped to a smaller one's memory (scan --memory-cap)


MARKS = {MEASURED: "", PUBLISHED: " (pub)", PREDICTED: " (pred)"}


LEGEND = (
    "Legend: unmarked = measured by memprobe; (pub) = published figure from elsewhere (sources in the notes); "
    "(pred) = predicted by memprobe from a fitted memory model; >=N = a batch that fit, not a searched maximum; "
    "OOM = batch 1 does not train (counted as 0); (vs pub) = a measured value divided by a published reference."
)


PRECISION_ORDER = PRECISIONS  # the order tables list them in


FORMATS = ("github", "plain", "csv", "json")


# The 2020 study normalized to this card; memprobe keeps that reference when it is among the inputs.
DEFAULT_REFERENCE = "Quadro RTX 8000"


class ReportError(ValueError):
    """A report cannot be made as asked (unknown reference GPU, nothing to compare). One line, for the CLI."""


THROUGHPUT_NOUNS = {
    "train": "Training throughput",
    "infer": "Inference throughput",
    # A generation's speed is two figures, the prefill's and the decode's tokens/s (the generation table has both);
    # the one throughput of a point is the new tokens over the whole generation's time.
    "generate": "Generation throughput (new tokens/s over whole generations: prefill + decode)",
}


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
    utilization: Mapping[str, Any] = field(default_factory=dict)
    created: datetime | None = None  # when its scan was made (ScanResult.created_at); None for published figures
    tokens_per_sample: float | None = None  # fairseq-style batch in tokens = batch x this (translation)
    best_batch: float | None = None  # b*, from the scan's throughput curve (None: no curve)
    best_throughput: float | None = None  # throughput at b*, in `unit`
    curve: list[tuple[float, float]] = field(default_factory=list)  # (batch, throughput in `unit`) that fit
    curve_skipped: int = 0  # curve points the scan's time budget left untimed (b* is the best of those timed)
    knee_batch: float | None = None  # the last batch before throughput falls by > 10% (core/estimates/knee.py)
    knee_after_batch: float | None = None  # the first batch timed after that fall
    knee_drop: float | None = None  # throughput at knee_after_batch over that at knee_batch, minus 1
    at: str = "B"  # where `throughput` was taken: "B", "b*" or "common N" (compare.curves.like_for_like)
    mode: str = "train"  # the scan's mode (train, infer, generate); published figures are training's

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

    def throughput_noun(self) -> str:
        """What the throughput figures are, by the modes of the points: "Training throughput", "Inference
        throughput", "Generation throughput (new tokens/s over whole generations: prefill + decode)", or
        "Throughput" where modes are mixed."""
        modes = {p.mode for p in self.points} or {"train"}
        if len(modes) > 1:
            return "Throughput"
        return THROUGHPUT_NOUNS.get(modes.pop(), "Throughput")

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


def file_kind(result: ScanResult) -> str:
    """What a result file holds: measured on a real card, emulated (scan --memory-cap) or predicted (memprobe
    predict); the page and the workload views label every figure with it."""
    gpu = result.environment.gpu
    if gpu is not None and gpu.predicted:
        return PREDICTED
    return EMULATED if is_emulated(result.gpu_name()) else MEASURED


def definition_key(workload: WorkloadRecord) -> str:
    """A short hash of everything in a workload definition that changes memory or speed (not the description)."""
    w = workload
    core = {
        "name": w.name,
        "family": w.family,
        "version": w.version,
        "unit": w.unit,
        "params": w.params,
        "optimizer": w.optimizer,
    }
    return hashlib.sha1(json.dumps(core, sort_keys=True, default=str).encode()).hexdigest()[:6]


def workload_labels(results: Sequence[ScanResult]) -> tuple[list[str], list[str]]:
    """A display label per result, and notes. Results whose definitions differ under one name get apart labels.

    Same name, same definition -> the name. Same name, different definitions -> name@v<version>, and a
    #<hash> suffix when the versions alone do not tell them apart. Never raises.
    """
    by_name: dict[str, dict[str, WorkloadRecord]] = {}
    for r in results:
        by_name.setdefault(str(r.workload.name), {})[definition_key(r.workload)] = r.workload
    labels_for: dict[tuple[str, str], str] = {}
    notes = []
    for name, defs in by_name.items():
        if len(defs) == 1:
            labels_for[(name, next(iter(defs)))] = name
            continue
        versions = [d.version for d in defs.values()]
        unique_versions = len(set(versions)) == len(versions)
        for key, d in defs.items():
            labels_for[(name, key)] = f"{name}@v{d.version}" + ("" if unique_versions else f"#{key}")
        differing = sorted(
            {
                k
                for d in defs.values()
                for k in (d.params or {})
                if len({json.dumps((e.params or {}).get(k), default=str) for e in defs.values()}) > 1
            }
        )
        what = (
            ", ".join(
                filter(
                    None,
                    [
                        "version" if len(set(versions)) > 1 else "",
                        f"params {', '.join(differing)}" if differing else "",
                    ],
                )
            )
            or "optimizer or unit"
        )
        shown = ", ".join(sorted(labels_for[(name, k)] for k in defs))
        notes.append(
            f"{name}: {len(defs)} different workload definitions in the inputs (they differ in {what}); "
            f"shown apart as {shown} and never compared with each other."
        )
    # An inference scan answers another question (forward passes only): never in a row with training.
    return [
        labels_for[(str(r.workload.name), definition_key(r.workload))] + (" (inference)" if r.mode == "infer" else "")
        for r in results
    ], notes


def _mfu(p: PrecisionResult, device: str) -> tuple[float | None, str]:
    """MFU from the file when it has one, or from a recorded FLOPs count and the catalog's peak; else why not."""
    from memprobe.core.cards.catalog import peak_tflops

    t = p.throughput or Timed()
    if t.mfu is not None:
        return float(t.mfu), ""
    task = p.settings.task
    flops = t.flops_per_sample or (task.flops_per_sample if task is not None else None)
    if not flops:
        return None, "the result file records no FLOPs per sample"
    peak = peak_tflops(device, p.precision)
    if not peak:
        return None, f"the catalog has no {p.precision} peak for {device}"
    samples = t.samples_per_s or 0.0
    return float(flops) * samples / (peak * 1e12), ""


def batch_unit(result: ScanResult, p: PrecisionResult) -> str:
    """What one step's batch counts: the workload's unit ("sequences"), or "samples of 128 tokens" when a sample
    holds several units (translation: a sentence pair of tgt_len target tokens); for a sequence-length search,
    "seq len at batch 1" (n is then a length)."""
    params = result.workload.params or {}
    if axis_name(params) != "batch":  # a sequence-length search: n is a length, at a fixed batch
        return f"{axis_name(params)} at batch {params.get('batch', 1)}"
    if result.mode == "generate":  # n counts concurrent sequences, each making N new tokens
        return "concurrent sequences"
    unit = str(result.workload.unit or "samples")
    per = p.settings.task.units_per_sample if p.settings.task is not None else None
    return unit if not per or float(per) == 1.0 else f"samples of {float(per):g} {unit}"


def _measured_points(loaded: Sequence[tuple[Path, ScanResult]], labels: list[str], catalog: Catalog) -> list[Point]:
    points = []
    for (path, result), label in zip(loaded, labels):
        device = result.gpu_name()
        unit = str(result.workload.unit or "samples")
        for name, p in result.precisions.items():
            t = p.throughput or Timed()
            done = p.status == "done" and p.max_batch is not None
            throughput = None
            if done and p.max_batch == 0:
                throughput = 0.0  # OOM at batch 1 counts as 0, like the 2020 study
            elif done and t.units_per_s and t.fits:
                throughput = float(t.units_per_s)
            mfu, why = _mfu(p, device) if throughput else (None, "")
            points.append(
                Point(
                    gpu=catalog.canonical(device),
                    device=device,
                    workload=label,
                    precision=name,
                    origin=MEASURED,
                    source=str(path),
                    max_batch=float(p.max_batch) if done and p.max_batch is not None else None,
                    batch_unit=batch_unit(result, p),
                    batch_lower_bound=False,
                    throughput=throughput,
                    unit=("new " if result.mode == "generate" else "") + f"{t.unit or unit}/s",
                    status=p.status,
                    mode=result.mode,
                    mfu=mfu,
                    mfu_why=why,
                    utilization=t.utilization or {},
                    created=result.created_at,
                    tokens_per_sample=p.settings.task.tokens_per_sample if p.settings.task is not None else None,
                    best_batch=p.best_batch if done else None,
                    best_throughput=p.best_units_per_s if done else None,
                    curve=[(c.batch, c.units_per_s) for c in p.curve if done and c.fits and c.units_per_s],
                    curve_skipped=len(p.curve_skipped) if done else 0,
                    knee_batch=p.knee_batch if done else None,
                    knee_after_batch=p.knee_after_batch if done else None,
                    knee_drop=p.knee_drop if done else None,
                )
            )
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
        points.append(
            Point(
                gpu=catalog.canonical(gpu),
                device=gpu,
                workload=workload,
                precision=precision,
                origin=PUBLISHED,
                source=source,
                max_batch=max_batch,
                batch_unit=batch.unit if batch else "",
                batch_lower_bound=bool(batch and batch.is_lower_bound),
                throughput=throughput,
                unit=speed.unit if speed else "",
                mfu_why="published figure",
                at="published",
            )
        )
    return points


def build_comparison(
    loaded: Sequence[tuple[Path, ScanResult]],
    with_published: bool = False,
    precisions: Sequence[str] | None = None,
    catalog: Catalog | None = None,
    figures: Iterable[Figure] | None = None,
) -> Comparison:
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
            keep, drop = sorted(
                (newest[key], p), key=lambda q: q.created or datetime.min.replace(tzinfo=timezone.utc), reverse=True
            )
            notes.append(
                f"{p.gpu} {p.workload} {p.precision} is in two files; using the newer {Path(keep.source).name}, "
                f"not {Path(drop.source).name}."
            )
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
                notes.append(
                    f"{label}: no published figures for this workload (published ones exist for "
                    f"{', '.join(names)}); its cells are memprobe's alone."
                )
    if precisions:
        points = [p for p in points if p.precision in precisions]
    if not points:
        raise ReportError(
            "nothing to report: no result (or published figure) matches the inputs"
            + (f" and --precision {','.join(precisions)}" if precisions else "")
        )
    order: list[str] = []
    for p in points:  # measured cards first, in the order given; then published ones
        if p.gpu not in order:
            order.append(p.gpu)
    return Comparison(points=points, gpu_order=order, notes=notes, with_published=with_published)
