"""`memprobe guide`: which cards train these workloads, at what batch, and what a dollar and a watt buy.

No torch here. For every workload and precision in the result files, the memory model fitted during the scan
(peak reserved bytes = static + per_sample x batch) predicts the max batch on every catalog card, at the usable
memory `memprobe predict --gpu CARD` takes for it (memprobe/core/overhead.py: measured where memprobe scanned the card,
carried over elsewhere; the same data wherever it runs). Throughput per 1000 USD and
per watt is given only where throughput was measured or published; verdicts per card follow one stated rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from memprobe.compare.comparison import (
    MEASURED,
    PREDICTED,
    Comparison,
    ReportError,
    batch_unit,
    build_comparison,
    workload_labels,
)
from memprobe.compare.curves import LABELS, at_batch_text, knee_text, like_for_like
from memprobe.compare.report import render
from memprobe.compare.tables import Cell, Table, fmt_number
from memprobe.core.cardsize import card_size
from memprobe.core.catalog import Card, Catalog, default_catalog
from memprobe.core.memory_model import MemoryModel as LinearModel
from memprobe.core.overhead import Overhead, OverheadTable, default_overhead_table, overhead_for, usable_memory
from memprobe.core.results import ScanResult
from memprobe.core.units import gib

# A batch is "roomy" on a card when it is at least this fraction of the largest batch any catalog card reaches for
# that workload (1/8: three halvings below the biggest card). Relative, so that a workload that trains at batch 1-2
# even on 80 GB cards (Pix2PixHD) and one that reaches hundreds (ResNet-50) are judged alike.
ROOMY_FRACTION = 1 / 8
VERDICT_ALL = "trains all the large models"
VERDICT_MOST = "trains most, with small batches"
VERDICT_NO = "not a good fit"
VERDICT_RULE = (
    "Verdict rule: for each workload, take the card's largest batch over the precisions it supports (measured on the "
    "card the file comes from, predicted elsewhere). The workload trains when that batch >= 1, and trains roomily when "
    "it is >= 1/8 of the largest batch any catalog card reaches for it (at least 1). "
    f"'{VERDICT_ALL}': every workload trains roomily; '{VERDICT_MOST}': at least half of the workloads train; "
    f"'{VERDICT_NO}': fewer than half train."
)


@dataclass(frozen=True)
class MemoryModel:
    """peak reserved bytes = static_bytes + per_sample_bytes x batch, fitted in one scan, with its provenance."""

    workload: str
    precision: str
    static_bytes: float
    per_sample_bytes: float
    batch_unit: str
    source: str
    gpu: str
    measured_max_batch: int | None
    overhead: Overhead


@dataclass(frozen=True)
class Prediction:
    """The max batch of one workload and precision on one catalog card.

    batch None: the card cannot run this precision. origin is MEASURED on the card the model was fitted on
    (batch is the measured answer there, predicted_batch the model's), PREDICTED elsewhere.
    """

    card: Card
    workload: str
    precision: str
    batch: int | None
    predicted_batch: int | None
    origin: str


@dataclass
class Verdict:
    """A card's verdict, and the best batch per workload it rests on: workload -> (batch, precision, origin)."""

    card: Card
    verdict: str
    trains: int
    roomy: int
    total: int
    best: dict[str, tuple[int, str, str]] = field(default_factory=dict)


def predict_max_batch(static_bytes: float, per_sample_bytes: float, usable_bytes: float) -> int:
    """The largest batch b with static + per_sample x b <= usable; 0 when not even batch 1 fits.

    Raises ValueError for a per-sample size that is not positive (no prediction can be made from it).
    """
    return LinearModel(static_bytes, per_sample_bytes, "peak_reserved", 0).max_batch_for(usable_bytes)


def memory_models(loaded: Sequence[tuple[Path, ScanResult]], catalog: Catalog | None = None) -> tuple[list[MemoryModel], list[str]]:
    """The usable memory models in the files, one per workload label and precision (the first given), and notes."""
    catalog = catalog or default_catalog()
    labels, notes = workload_labels([r for _, r in loaded])
    models: dict[tuple[str, str], MemoryModel] = {}
    for (path, result), label in zip(loaded, labels):
        for name, p in result.precisions.items():
            fit = p.memory_model.get("peak_reserved")
            static, per_sample = (fit.static_bytes, fit.per_sample_bytes) if fit else (None, None)
            where = f"{label} {name} ({Path(path).name})"
            if p.status != "done" or static is None or not per_sample or per_sample <= 0:
                notes.append(f"{where}: no usable memory model (status {p.status}); no predictions for it.")
                continue
            overhead = overhead_for(result, p, catalog)
            if overhead is None:
                notes.append(f"{where}: no recorded allocator capacity, so the overhead cannot be derived; no predictions.")
                continue
            if (label, name) in models:
                notes.append(f"{where}: another memory model for {label} {name} was given first "
                             f"({Path(models[(label, name)].source).name}); predictions use that one.")
                continue
            models[(label, name)] = MemoryModel(
                workload=label, precision=name, static_bytes=float(static), per_sample_bytes=float(per_sample),
                batch_unit=batch_unit(result, p), source=str(path), gpu=overhead.gpu,
                measured_max_batch=p.max_batch, overhead=overhead)
    return list(models.values()), notes


def card_capacity(card: Card, table: OverheadTable | None = None) -> int:
    """The allocator capacity of a card, as `memprobe predict --gpu CARD` takes it (overhead.usable_memory: measured
    where memprobe scanned the card, else its memory minus the overhead carried over); 0 when nothing is left."""
    try:
        return usable_memory(card.name, card_size(card)[0], card, table=table).capacity_bytes
    except ValueError:
        return 0


def predictions(models: Sequence[MemoryModel], cards: Sequence[Card], table: OverheadTable | None = None) -> list[Prediction]:
    """Every model on every card, at the card's capacity as predict takes it (card_capacity)."""
    out = []
    for m in models:
        for card in cards:
            if not card.supports(m.precision):
                out.append(Prediction(card, m.workload, m.precision, None, None, PREDICTED))
                continue
            predicted = predict_max_batch(m.static_bytes, m.per_sample_bytes, card_capacity(card, table))
            if card.name == m.gpu and m.measured_max_batch is not None:
                out.append(Prediction(card, m.workload, m.precision, int(m.measured_max_batch), predicted, MEASURED))
            else:
                out.append(Prediction(card, m.workload, m.precision, predicted, predicted, PREDICTED))
    return out


def verdicts(preds: Sequence[Prediction], cards: Sequence[Card]) -> list[Verdict]:
    """One verdict per card by VERDICT_RULE. `preds` must cover the whole catalog (the roomy threshold uses it)."""
    workloads = list(dict.fromkeys(p.workload for p in preds))
    best: dict[tuple[str, str], tuple[int, str, str]] = {}
    for p in preds:
        if p.batch is None:
            continue
        key = (p.card.name, p.workload)
        if key not in best or p.batch > best[key][0]:
            best[key] = (p.batch, p.precision, p.origin)
    largest = {w: max((b[0] for (c, ww), b in best.items() if ww == w), default=0) for w in workloads}
    threshold = {w: max(1, math.ceil(largest[w] * ROOMY_FRACTION)) for w in workloads}
    out = []
    for card in cards:
        mine = {w: best[(card.name, w)] for w in workloads if (card.name, w) in best}
        trains = sum(1 for w, b in mine.items() if b[0] >= 1)
        roomy = sum(1 for w, b in mine.items() if b[0] >= threshold[w])
        total = len(workloads)
        if total and roomy == total:
            verdict = VERDICT_ALL
        elif total and trains * 2 >= total and trains > 0:
            verdict = VERDICT_MOST
        else:
            verdict = VERDICT_NO
        out.append(Verdict(card, verdict, trains, roomy, total, mine))
    return out


def roomy_thresholds(preds: Sequence[Prediction]) -> dict[str, int]:
    """Per workload, the batch from which a card counts as roomy (printed with the rule)."""
    best: dict[str, int] = {}
    for p in preds:
        if p.batch is not None:
            best[p.workload] = max(best.get(p.workload, 0), p.batch)
    return {w: max(1, math.ceil(b * ROOMY_FRACTION)) for w, b in best.items()}


# --- tables ---------------------------------------------------------------------------------------

def _price_text(card: Card) -> str:
    price = card.price
    return "-" if price is None else f"{price.usd:,.0f} ({price.date}, {price.source})"


def catalog_table(cards: Sequence[Card]) -> Table:
    """The catalog rows shown (datasheet values and sourced prices; nothing here is measured)."""
    columns = ["card", "arch", "memory GiB", "peak TFLOP/s fp32/tf32/fp16/bf16", "bandwidth GB/s", "TDP W",
               "price USD (date, source)", "spec source"]
    rows = []
    for c in cards:
        peaks = "/".join(fmt_number(v) if v is not None else "-" for v in c.peak_tflops.values())
        rows.append([c.name, c.architecture, fmt_number(c.memory_bytes / 2**30), peaks,
                     fmt_number(c.bandwidth_gb_s) if c.bandwidth_gb_s else "-",
                     fmt_number(c.tdp_w) if c.tdp_w else "-", _price_text(c), c.spec_source])
    notes = ["Datasheet figures and published prices from memprobe/data/gpus.yaml (sources listed there); "
             "'-' = not sourced, left empty rather than guessed. Peaks are dense (no sparsity); fp16/bf16 with FP32 "
             "accumulate."]
    return Table("catalog", "GPU catalog (datasheets and published prices, not measured)", columns, rows, notes)


def usable_note(table: OverheadTable | None = None) -> str:
    """One sentence: the usable memory per card, and where it comes from (memprobe/data/overhead.yaml)."""
    table = table or default_overhead_table()
    scanned = ", ".join(f"the {c.card} {gib(c.capacity_bytes, 2)} GiB" for c in table.cards.values())
    carried = table.carried()
    rest = (f"on the others, the card's memory (driver-reported total where the catalog has it, else datasheet) "
            f"minus {gib(carried.overhead_bytes, 2)} GiB measured on the {carried.card}, carried over" if carried
            else "on the others, the whole memory (no scanned card to measure the overhead on)")
    return (f"Usable memory per card, as `memprobe predict --gpu CARD` takes it (memprobe/data/overhead.yaml): "
            f"measured where memprobe scanned the card ({scanned or 'none'}); {rest}.")


def prediction_table(preds: Sequence[Prediction], cards: Sequence[Card], models: Sequence[MemoryModel],
                     table: OverheadTable | None = None) -> Table:
    """Predicted max batch per card (rows) and workload/precision (columns), and how many workloads train."""
    cols = [(m.workload, m.precision) for m in models]
    by = {(p.card.name, p.workload, p.precision): p for p in preds}
    workloads = list(dict.fromkeys(m.workload for m in models))
    columns = ["card", "memory GiB", "usable GiB"] + [f"{w} {p}" for w, p in cols] + ["trains (workloads)"]
    rows = []
    for card in cards:
        row: list[Any] = [card.name, fmt_number(card.memory_bytes / 2**30), gib(card_capacity(card, table), 2)]
        for w, pr in cols:
            p = by.get((card.name, w, pr))
            if p is None or p.batch is None:
                row.append(f"n/a (no {pr})")
            elif p.batch == 0:
                row.append(Cell("OOM" + (" (pred)" if p.origin == PREDICTED else ""), 0.0, p.origin))
            else:
                row.append(Cell(str(p.batch) + (" (pred)" if p.origin == PREDICTED else ""), float(p.batch), p.origin))
        batches = [(w, by[(card.name, w, pr)].batch) for w, pr in cols if (card.name, w, pr) in by]
        trains = len({w for w, b in batches if b})
        row.append(f"{trains}/{len(workloads)}")
        rows.append(row)
    notes = ["(pred) = the scan's straight line (below) at the card's usable memory, the one `memprobe predict --gpu "
             "CARD` takes (column 'usable GiB'). `memprobe predict -m WORKLOAD -p PRECISION --gpu CARD` replays the "
             "trial through a model of the caching allocator instead of a line, so for the same card its answer can "
             "differ by a few percent: the line runs through the peaks of the search's trials, not through the edge.",
             usable_note(table)]
    for m in models:
        notes.append(f"{m.workload} {m.precision}: peak reserved = {gib(m.static_bytes, 2)} GiB + "
                     f"{gib(m.per_sample_bytes, 3)} GiB x batch ({m.batch_unit}), fitted in {Path(m.source).name}.")
    checks = [f"{m.workload} {m.precision} predicted {p.predicted_batch}, measured {p.batch}"
              for m in models for p in preds
              if p.origin == MEASURED and p.workload == m.workload and p.precision == m.precision]
    if checks:
        notes.append("Check on the measured card(s): " + "; ".join(checks) + ". The line is fitted to the peaks of "
                     "the search's trials, not to the edge, so it can miss the true maximum by a few percent either "
                     "way.")
    notes.append("Other cards run other kernels and library workspaces (cuDNN, cuBLAS), so their true maxima can "
                 "differ by a few samples; 'n/a' = the card has no such precision (tf32/bf16 need Ampere or newer).")
    return Table("predicted", "Max batch on every catalog card (predicted from the scan's fitted memory line)", columns,
                 rows, notes)


def value_table(comparison: Comparison | None, cards: Sequence[Card], workloads: Sequence[str] | None) -> Table:
    """Throughput per 1000 USD and per watt, where throughput is measured (on the file's card) or published."""
    allowed = {c.name: c for c in cards}
    columns = ["workload", "precision", "card", "throughput", "unit", "at batch", "knee (fall)", "price USD",
               "per 1000 USD", "TDP W", "per W (TDP)", "per W (measured power)"]
    rows = []
    points = [] if comparison is None else [
        p for p in comparison.points
        if p.throughput and p.gpu in allowed and (workloads is None or p.workload in workloads)]
    points.sort(key=lambda p: (p.workload, p.precision, -(p.throughput or 0)))
    for p in points:
        card = allowed[p.gpu]
        throughput = p.throughput or 0.0  # points holds only those with a throughput
        mark = "" if p.origin == MEASURED else " (pub)"
        price = card.price.usd if card.price else None
        per_usd = Cell(f"{throughput / price * 1000:.2f}{mark}", throughput / price * 1000, p.origin) if price else "-"
        per_w = Cell(f"{throughput / card.tdp_w:.3f}{mark}", throughput / card.tdp_w, p.origin) if card.tdp_w else "-"
        power = ((p.utilization or {}).get("power_w") or {}).get("mean")
        per_power = Cell(f"{throughput / power:.3f}", throughput / power, MEASURED) if power else "-"
        rows.append([p.workload, p.precision, card.name, Cell(fmt_number(throughput) + mark, throughput, p.origin),
                     p.unit, at_batch_text(p), knee_text(p.knee_batch, p.knee_after_batch, p.knee_drop),
                     f"{price:,.0f}" if price else "-", per_usd,
                     fmt_number(card.tdp_w) if card.tdp_w else "-", per_w, per_power])
    notes = ["Prices and TDP are the catalog's (gpus.yaml: datasheet TDP, published prices with their dates); "
             "throughput is memprobe's on the card a file was measured on, or published (pub). Card-only prices: "
             "a host, power and cooling are not included."]
    return Table("value", "Throughput per 1000 USD and per watt (measured: at the best batch b* where the scan timed "
                 "a curve, else at max batch B)", columns, rows, notes)


def verdict_table(verdicts_: Sequence[Verdict]) -> Table:
    """One line per card: the verdict and the best batch per workload it rests on."""
    rows = []
    for v in verdicts_:
        basis = "; ".join(f"{w} {b} ({pr}{', pred' if origin == PREDICTED else ''})" for w, (b, pr, origin) in v.best.items())
        rows.append([v.card.name, fmt_number(v.card.memory_bytes / 2**30), _price_text(v.card), v.verdict,
                     f"{v.trains}/{v.total} train, {v.roomy}/{v.total} roomy", basis or "-"])
    return Table("verdicts", "Verdicts", ["card", "memory GiB", "price USD", "verdict", "count", "best batch per workload"],
                 rows, [VERDICT_RULE])


def guide_report(loaded: Sequence[tuple[Path, ScanResult]], budget: float | None = None, fmt: str = "github",
                 catalog: Catalog | None = None, only: Sequence[str] | None = None,
                 table: OverheadTable | None = None) -> str:
    """Build and render `memprobe guide`, for the catalog cards named in `only` (all when None). Raises
    ValueError for an unknown format or a negative budget."""
    if budget is not None and budget < 0:
        raise ValueError(f"--budget must be >= 0, got {budget}")
    catalog = catalog or default_catalog()
    all_cards = list(catalog.cards)
    shown = all_cards if budget is None else [c for c in all_cards if c.price and c.price.usd <= budget]
    if only is not None:
        shown = [c for c in shown if c.name in only]
    notes: list[str] = []
    if budget is not None:
        unpriced = sum(1 for c in all_cards if not c.price)
        notes.append(f"--budget {budget:,.0f} USD: {len(shown)} of {len(all_cards)} cards; {unpriced} cards without a "
                     "sourced price are left out.")
    models, model_notes = memory_models(loaded, catalog)
    notes += model_notes
    preds = predictions(models, all_cards, table)
    tables = [catalog_table(shown)]
    names = {c.name for c in shown}
    if models:
        tables.append(prediction_table([p for p in preds if p.card.name in names], shown, models, table))
    try:
        comparison = like_for_like(build_comparison(loaded, with_published=True, catalog=catalog)).comparison
    except ReportError:
        comparison = None
    measured_workloads = list(dict.fromkeys(m.workload for m in models)) or None
    if loaded and measured_workloads is None:
        measured_workloads = list(dict.fromkeys(workload_labels([r for _, r in loaded])[0]))
    tables.append(value_table(comparison, shown, measured_workloads))
    tables[-1].notes.append(f"Measured throughput is the {LABELS['best']}, where the scan timed a curve; at B "
                            "otherwise (older files) and for published figures.")
    if models:
        vs = [v for v in verdicts(preds, all_cards) if v.card.name in names]
        verdicts_shown = verdict_table(vs)
        thresholds = roomy_thresholds(preds)
        verdicts_shown.notes.append("Roomy from: " + ", ".join(f"{w} batch {t}" for w, t in thresholds.items())
                                    + f" (1/8 of the largest over {len(all_cards)} catalog cards, whatever the budget).")
        tables.append(verdicts_shown)
    else:
        notes.append("No memory model in the inputs: give result files (memprobe scan output) for predictions and verdicts.")
    title = f"memprobe guide: {len(loaded)} result file(s), {len(shown)} card(s)"
    legend = ("Legend: unmarked = measured by memprobe; (pred) = predicted from the fitted memory model; "
              "(pub) = published figure from elsewhere; catalog values are datasheet figures.")
    return render(tables, fmt, title, [legend] + notes)
