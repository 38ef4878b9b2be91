"""The max batch of each scanned workload and precision on every catalog card, from the scans' memory lines.

No torch here. The memory model fitted during a scan (peak reserved bytes = static + per_sample x batch) predicts
the max batch on every catalog card, at the usable memory `memprobe predict --gpu CARD` takes for it
(memprobe/core/cards/overhead.py); on the card the scan ran on, the measured max batch is given beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from memprobe.compare.comparison import MEASURED, PREDICTED, batch_unit, workload_labels
from memprobe.core.cards.cardsize import card_size
from memprobe.core.cards.catalog import Card, Catalog, default_catalog
from memprobe.core.cards.overhead import Overhead, OverheadTable, overhead_for, usable_memory
from memprobe.core.estimates.memory_model import MemoryModel as LinearModel
from memprobe.core.records.results import ScanResult


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
    source: str = ""  # the result file whose line it comes from ("" where the card cannot run the precision)


def predict_max_batch(static_bytes: float, per_sample_bytes: float, usable_bytes: float) -> int:
    """The largest batch b with static + per_sample x b <= usable; 0 when not even batch 1 fits.

    Raises ValueError for a per-sample size that is not positive (no prediction can be made from it).
    """
    return LinearModel(static_bytes, per_sample_bytes, "peak_reserved", 0).max_batch_for(usable_bytes)


def memory_models(
    loaded: Sequence[tuple[Path, ScanResult]], catalog: Catalog | None = None
) -> tuple[list[MemoryModel], list[str]]:
    """The usable memory models in the files, one per workload label, precision and scanned card (the newest scan of
    that card), and notes. Every scanned card's line is kept: `predictions` takes each card's from the scanned card
    nearest it in memory, so no answer depends on which file was given first."""
    catalog = catalog or default_catalog()
    labels, notes = workload_labels([r for _, r in loaded])
    models: dict[tuple[str, str, str], tuple[MemoryModel, ScanResult]] = {}
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
                notes.append(
                    f"{where}: no recorded allocator capacity, so the overhead cannot be derived; no predictions."
                )
                continue
            model = MemoryModel(
                workload=label,
                precision=name,
                static_bytes=float(static),
                per_sample_bytes=float(per_sample),
                batch_unit=batch_unit(result, p),
                source=str(path),
                gpu=overhead.gpu,
                measured_max_batch=p.max_batch,
                overhead=overhead,
            )
            key = (label, name, overhead.gpu)
            if key in models:
                # the newest scan of a card stands; on a tie, the later of the files in their fixed order
                older, newer = sorted((models[key], (model, result)), key=lambda m: m[1].created_at)
                notes.append(
                    f"{label} {name} on the {overhead.gpu} is in two files; its line is the newer "
                    f"{Path(newer[0].source).name}'s, not {Path(older[0].source).name}'s."
                )
                models[key] = newer
            else:
                models[key] = (model, result)
    return [m for m, _result in models.values()], notes


def nearest_model(models: Sequence[MemoryModel], card: Card, capacity_bytes: int) -> MemoryModel:
    """The model a card's prediction comes from, among one workload and precision's: the card's own scan where it
    was scanned, else the scan of the card nearest it in usable memory (a straight line extrapolated the least),
    the smaller card on a tie."""
    own = [m for m in models if m.gpu == card.name]
    if own:
        return own[0]

    def distance(m: MemoryModel) -> tuple[float, int, str]:
        theirs = max(m.overhead.capacity_bytes, 1)
        return abs(math.log(max(capacity_bytes, 1) / theirs)), theirs, m.gpu

    return min(models, key=distance)


def card_capacity(card: Card, table: OverheadTable | None = None) -> int:
    """The allocator capacity of a card, as `memprobe predict --gpu CARD` takes it (overhead.usable_memory: measured
    where memprobe scanned the card, else its memory minus the overhead carried over); 0 when nothing is left."""
    try:
        return usable_memory(card.name, card_size(card)[0], card, table=table).capacity_bytes
    except ValueError:
        return 0


def predictions(
    models: Sequence[MemoryModel], cards: Sequence[Card], table: OverheadTable | None = None
) -> list[Prediction]:
    """Every workload and precision on every card, at the card's capacity as predict takes it (card_capacity), from
    the line `nearest_model` picks; on a scanned card its measured max batch."""
    groups: dict[tuple[str, str], list[MemoryModel]] = {}
    for m in models:
        groups.setdefault((m.workload, m.precision), []).append(m)
    out = []
    for (workload, precision), group in groups.items():
        for card in cards:
            if not card.supports(precision):
                out.append(Prediction(card, workload, precision, None, None, PREDICTED))
                continue
            capacity = card_capacity(card, table)
            m = nearest_model(group, card, capacity)
            predicted = predict_max_batch(m.static_bytes, m.per_sample_bytes, capacity)
            if card.name == m.gpu and m.measured_max_batch is not None:
                out.append(
                    Prediction(card, workload, precision, int(m.measured_max_batch), predicted, MEASURED, m.source)
                )
            else:
                out.append(Prediction(card, workload, precision, predicted, predicted, PREDICTED, m.source))
    return out
