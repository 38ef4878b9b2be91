"""The max batch of each scanned workload and precision on every catalog card, from the scans' memory lines.

No torch here. The memory model fitted during a scan (peak reserved bytes = static + per_sample x batch) predicts
the max batch on every catalog card, at the usable memory `memprobe predict --gpu CARD` takes for it
(memprobe/core/overhead.py); on the card the scan ran on, the measured max batch is given beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from memprobe.compare.comparison import MEASURED, PREDICTED, batch_unit, workload_labels
from memprobe.core.cardsize import card_size
from memprobe.core.catalog import Card, Catalog, default_catalog
from memprobe.core.memory_model import MemoryModel as LinearModel
from memprobe.core.overhead import Overhead, OverheadTable, overhead_for, usable_memory
from memprobe.core.results import ScanResult


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


def predict_max_batch(static_bytes: float, per_sample_bytes: float, usable_bytes: float) -> int:
    """The largest batch b with static + per_sample x b <= usable; 0 when not even batch 1 fits.

    Raises ValueError for a per-sample size that is not positive (no prediction can be made from it).
    """
    return LinearModel(static_bytes, per_sample_bytes, "peak_reserved", 0).max_batch_for(usable_bytes)


def memory_models(
    loaded: Sequence[tuple[Path, ScanResult]], catalog: Catalog | None = None
) -> tuple[list[MemoryModel], list[str]]:
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
                notes.append(
                    f"{where}: no recorded allocator capacity, so the overhead cannot be derived; no predictions."
                )
                continue
            if (label, name) in models:
                notes.append(
                    f"{where}: another memory model for {label} {name} was given first "
                    f"({Path(models[(label, name)].source).name}); predictions use that one."
                )
                continue
            models[(label, name)] = MemoryModel(
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
    return list(models.values()), notes


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
