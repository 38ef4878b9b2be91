"""`memprobe guide --mode generate`: per generation in the result files and every catalog card, the concurrent
sequences that fit (measured on the scanned card, predicted elsewhere from the scan's memory line, labelled) and the
decode tokens/s where measured.

No torch. The prediction is the guide's own (card_predictions.py: the scan's fitted peak-reserved line at the usable
memory `memprobe predict --gpu CARD` takes); `memprobe plan --mode generate` traces a card without a scan instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from memprobe.compare.card_predictions import memory_models, predictions
from memprobe.compare.comparison import MEASURED, ReportError, workload_labels
from memprobe.core.cards.catalog import Card, Catalog, default_catalog
from memprobe.core.estimates.serving import PREDICTED, ServingPlan, ServingRow, measured_row
from memprobe.core.records.results import ScanResult

NOTES = (
    "measured: B of `memprobe scan --mode generate` on the card it ran on (the most concurrent sequences that "
    "complete the generation, proven in fresh processes) with its decode and prefill tokens/s; predicted: the other "
    "cards, from that scan's fitted peak-reserved line at the card's usable memory (not measured; `memprobe plan "
    "--mode generate --gpu CARD` traces one card instead, with a safe figure)"
)


def generations(
    loaded: Sequence[tuple[Path, ScanResult]], wanted: Callable[[Mapping[str, Any] | None], bool], model: str | None
) -> list[tuple[Path, ScanResult]]:
    """The generate results among `loaded` whose settings are `wanted` and (with `model`) whose workload is that
    model's generation (its name, or its name before the settings: llama-8b for llama-8b+p2048+n64)."""
    from memprobe.core.records.generation import settings_of

    chosen = []
    for path, result in loaded:
        name = str(result.workload.name)
        if result.mode != "generate" or not wanted(settings_of(result.workload.params)):
            continue
        if model is None or model in (name, name.split("+p", 1)[0], name.split("+n", 1)[0]):
            chosen.append((path, result))
    return chosen


def _measured_row(card: Card, label: str, precision: str, found: list[tuple[Path, ScanResult]]) -> ServingRow | None:
    """The newest finished generation of `label` and `precision` among `found` (those scanned on `card`)."""
    for path, result in sorted(found, key=lambda f: f[1].created_at, reverse=True):
        row = measured_row(card, path, result, precision, label)
        if row is not None:
            return row
    return None


def guide_cards(catalog: Catalog, budget: float | None, only: Sequence[str] | None) -> list[Card]:
    """The catalog cards a guide shows: priced at most `budget` USD (when given), among `only` (when given)."""
    shown = [c for c in catalog.cards if budget is None or (c.price and c.price.usd <= budget)]
    return [c for c in shown if only is None or c.name in only]


def serving_guide(
    loaded: Sequence[tuple[Path, ScanResult]],
    budget: float | None = None,
    only: Sequence[str] | None = None,
    catalog: Catalog | None = None,
) -> list[ServingPlan]:
    """One ServingPlan per generation workload in `loaded` (generate results): a row per shown card (guide_cards)
    and precision, measured on the card it was scanned on, predicted on the others. Raises ReportError when
    `loaded` holds no finished generation."""
    catalog = catalog or default_catalog()
    cards = guide_cards(catalog, budget, only)
    labels, _notes = workload_labels([r for _p, r in loaded])
    models, notes = memory_models(loaded, catalog)
    preds = predictions(models, catalog.cards)
    plans: list[ServingPlan] = []
    for label in dict.fromkeys(labels):
        mine = [(p, r) for (p, r), lab in zip(loaded, labels) if lab == label]
        rows = []
        for pred in (p for p in preds if p.workload == label and p.card.name in {c.name for c in cards}):
            on_card = [
                (p, r) for p, r in mine if getattr(catalog.find(r.gpu_name(unknown="")), "name", None) == pred.card.name
            ]
            row = _measured_row(pred.card, label, pred.precision, on_card) if pred.origin == MEASURED else None
            rows.append(
                row or ServingRow(pred.card.name, label, pred.precision, PREDICTED, pred.batch, origin=pred.source)
            )
        if rows:
            plans.append(ServingPlan(label, f"{len({r.card for r in rows})} catalog card(s)", rows, list(NOTES)))
    if not plans:
        said = "; ".join(notes[:3])
        raise ReportError(
            "no finished `scan --mode generate` result with a memory line in these files"
            + (f" ({said})" if said else "")
        )
    return plans
