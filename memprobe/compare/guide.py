"""`memprobe guide`: which cards train these workloads, at what batch, and what a dollar and a watt buy.

No torch here. For every workload and precision in the result files, the memory model fitted during the scan
(peak reserved bytes = static + per_sample x batch) predicts the max batch on every catalog card, at the usable
memory `memprobe predict --gpu CARD` takes for it (memprobe/core/cards/overhead.py: measured where memprobe scanned the card,
carried over elsewhere; the same data wherever it runs). Throughput per 1000 USD and
per watt is given only where throughput was measured or published; verdicts per card follow one stated rule.
Multi-GPU result files add how the scanned card scales: per-GPU max batch and efficiency on N GPUs, beside the
published multi-GPU figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from memprobe.compare.card_predictions import memory_models, predictions
from memprobe.compare.comparison import ReportError, build_comparison, workload_labels
from memprobe.compare.curves import LABELS, like_for_like
from memprobe.compare.guide_tables import catalog_table, prediction_table, value_table, verdict_table
from memprobe.compare.published_scaling import published_scaling, published_scaling_rows
from memprobe.compare.report import render
from memprobe.compare.scaling import scaling_rows_table
from memprobe.compare.tables import Table
from memprobe.compare.verdicts import roomy_thresholds, verdicts
from memprobe.core.cards.catalog import Catalog, default_catalog
from memprobe.core.cards.overhead import OverheadTable
from memprobe.core.records.results import ScanResult


def guide_report(
    loaded: Sequence[tuple[Path, ScanResult]],
    budget: float | None = None,
    fmt: str = "github",
    catalog: Catalog | None = None,
    only: Sequence[str] | None = None,
    table: OverheadTable | None = None,
    multi: Sequence[ScanResult] = (),
) -> str:
    """Build and render `memprobe guide`, for the catalog cards named in `only` (all when None); multi-GPU results
    (`multi`, scan --gpus N) add the scaling table of the scanned cards and the published multi-GPU figures of the
    same workloads. Raises ValueError for an unknown format or a negative budget."""
    title, notes, tables = guide_tables(loaded, budget, catalog, only, table, multi)
    return render(tables, fmt, title, notes)


def guide_tables(
    loaded: Sequence[tuple[Path, ScanResult]],
    budget: float | None = None,
    catalog: Catalog | None = None,
    only: Sequence[str] | None = None,
    table: OverheadTable | None = None,
    multi: Sequence[ScanResult] = (),
) -> tuple[str, list[str], list[Table]]:
    """`memprobe guide` as its title, its notes (the legend first) and its tables, for the catalog cards named in
    `only` (all when None), with the scaling tables of `multi`. Raises ValueError for a negative budget."""
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
        notes.append(
            f"--budget {budget:,.0f} USD: {len(shown)} of {len(all_cards)} cards; {unpriced} cards without a "
            "sourced price are left out."
        )
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
    tables[-1].notes.append(
        f"Measured throughput is the {LABELS['best']}, where the scan timed a curve; at B "
        "otherwise (older files) and for published figures."
    )
    if models:
        vs = [v for v in verdicts(preds, all_cards) if v.card.name in names]
        verdicts_shown = verdict_table(vs)
        thresholds = roomy_thresholds(preds)
        verdicts_shown.notes.append(
            "Roomy from: "
            + ", ".join(f"{w} batch {t}" for w, t in thresholds.items())
            + f" (1/8 of the largest over {len(all_cards)} catalog cards, whatever the budget)."
        )
        tables.append(verdicts_shown)
    else:
        notes.append(
            "No memory model in the inputs: give result files (memprobe scan output) for predictions and verdicts."
        )
    if multi:
        tables.append(scaling_rows_table(multi, [r for _p, r in loaded]))
        workloads = sorted({str(r.workload.name) for r in multi})
        if published_scaling_rows(workloads):
            tables.append(published_scaling(workloads))
    title = f"memprobe guide: {len(loaded) + len(multi)} result file(s), {len(shown)} card(s)"
    legend = (
        "Legend: unmarked = measured by memprobe; (pred) = predicted from the fitted memory model; "
        "(pub) = published figure from elsewhere; catalog values are datasheet figures."
    )
    return title, [legend] + notes, tables
