"""Charts for `memprobe report --charts DIR`: one question each, at screen size.

- relative_throughput: how fast is each card, relative to the reference, per workload and precision and on
  average? A heatmap, a row per card.
- max_batch: how large a batch does each card's memory hold, per workload? Small multiples
  (max_batch_chart.py).
- throughput_per_1000usd: what does each card deliver per 1000 USD of its price? A heatmap.
- throughput_vs_batch: how does throughput grow with the batch? (curve_chart.py)
- memory_breakdown and memory_vs_batch: where does the memory go at B, and how does it grow with the batch?
  Only for result files with a breakdown (breakdown_chart.py).

No torch, and no display: figures are built with matplotlib's object API (Figure + Agg canvas, no pyplot
state), each written as PNG and SVG. Measured, published and predicted values are told apart, with a legend
on every chart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Collection, Iterator, Sequence

from memprobe.compare.comparison import MEASURED, PRECISION_ORDER, PUBLISHED, Comparison
from memprobe.compare.heatmap import Heat, HeatCell, header
from memprobe.compare.max_batch_chart import batch_panels, cards_by_memory, max_batch_figure
from memprobe.compare.relative import Relative
from memprobe.core.cards.catalog import Catalog, default_catalog


def _fmt(value: float) -> str:
    """A cell's number: three significant digits, thousands without exponent (15,442, not 1.54e+04)."""
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _short(gpu: str) -> str:
    # Long vendor prefixes crowd the row labels; the catalog names are already short.
    for prefix in ("NVIDIA ", "GeForce "):
        gpu = gpu.replace(prefix, "")
    return gpu


def _row_label(gpu: str, origin: str) -> str:
    return _short(gpu) + (" (pub)" if origin == PUBLISHED else "")


def relative_heat(relative: Relative) -> Heat:
    """A row per card (measured and published apart, fastest on average first), a column per normalized
    workload and precision (the reference's throughput under it), and the mean over the columns each card has."""
    columns = []
    for col in relative.columns:
        ref = relative.reference_values[col]
        columns.append(
            (
                col[0],
                header(
                    col[1],
                    f"= {_fmt(ref.throughput or 0.0)} {ref.unit}{' (pub)' if ref.origin == PUBLISHED else ''}",
                    width=14,
                ),
            )
        )
    total = len(relative.columns)
    mean_column = total if total > 1 else None
    mean_header = [("mean", header("over the columns a card has", width=14))] if mean_column is not None else []
    heat = Heat(
        columns + mean_header,
        [(_row_label(r.gpu, r.origin), r.origin) for r in relative.rows],
        colorbar=f"throughput / {_short(relative.reference)} (log scale)",
        cards=[r.gpu for r in relative.rows],
    )
    for i, row in enumerate(relative.rows):
        for j, col in enumerate(relative.columns):
            c = row.cells.get(col)
            if c is not None:
                text = (
                    "OOM"
                    if c.oom
                    else f"{c.value:.2f}" + ("*" if c.vs_published else "") + (" B" if relative.fell_back(c) else "")
                )
                heat.cells[(i, j)] = HeatCell(c.value, text, c.origin, c.oom)
        if mean_column is not None and row.mean is not None:
            text = f"{row.mean:.2f}" + (f" ({row.count}/{total})" if row.count < total else "")
            heat.cells[(i, mean_column)] = HeatCell(row.mean, text, row.origin)
    return heat


def value_heat(comparison: Comparison, catalog: Catalog) -> tuple[Heat, dict[str, str]]:
    """Throughput per 1000 USD of card price: a row per priced card (measured and published apart), a column
    per workload and precision; the color is the share of the column's best. Also: workload -> its unit."""
    values: dict[tuple[str, str], dict[tuple[str, str], tuple[float, str]]] = {}
    units: dict[str, str] = {}
    for p in comparison.points:
        card = catalog.find(p.gpu)
        if not p.throughput or card is None or card.price is None:
            continue
        origin = MEASURED if p.origin == MEASURED else PUBLISHED
        units.setdefault(p.workload, p.unit)
        values.setdefault((p.gpu, origin), {}).setdefault(
            (p.workload, p.precision), (p.throughput / card.price.usd * 1000, p.origin)
        )
    workloads = comparison.workloads()
    order = {p: i for i, p in enumerate(PRECISION_ORDER)}
    columns = sorted(
        {col for cells in values.values() for col in cells},
        key=lambda c: (workloads.index(c[0]) if c[0] in workloads else len(workloads), order.get(c[1], 99), c),
    )
    best = {col: max(v[col][0] for v in values.values() if col in v) for col in columns}
    share = {key: sum(v[0] / best[c] for c, v in cells.items()) / len(cells) for key, cells in values.items()}
    rows = sorted(values, key=lambda key: (-share[key], key))
    heat = Heat(
        columns,
        [(_row_label(gpu, origin), origin) for gpu, origin in rows],
        scale="share",
        colorbar="share of the column's best",
        cards=[gpu for gpu, _origin in rows],
    )
    for i, key in enumerate(rows):
        for j, col in enumerate(columns):
            if col in values[key]:
                value, origin = values[key][col]
                heat.cells[(i, j)] = HeatCell(value / best[col], _fmt(value), origin)
    return heat, units


def write_charts(
    comparison: Comparison,
    relative: Relative,
    loaded: Sequence,
    out_dir: str | Path,
    catalog: Catalog | None = None,
    predicted: list | None = None,
) -> list[Path]:
    """Write every chart that has data into out_dir (PNG and SVG each). Returns the files written.

    `loaded` are the (path, result) pairs behind the comparison: their memory models give the predicted points,
    their breakdowns the breakdown charts; `predicted` are predicted breakdowns (core.breakdown.read_predicted)
    set beside the measured ones at the same batch. Raises OutputError where a file cannot be written.
    """
    from memprobe.compare.chart_layout import save

    out_dir = Path(out_dir)
    written: list[Path] = []
    for name, fig in chart_figures(comparison, relative, loaded, catalog, predicted):
        written += save(fig, out_dir / name)
    return written


def chart_figures(
    comparison: Comparison,
    relative: Relative,
    loaded: Sequence,
    catalog: Catalog | None = None,
    predicted: list | None = None,
    names: Collection[str] | None = None,
) -> Iterator[tuple[str, Any]]:
    """(name, matplotlib Figure) of every chart that has data, in the order write_charts writes them; with
    `names`, only those charts are drawn (see write_charts for the arguments)."""
    from memprobe.compare.breakdown_chart import breakdown_figures
    from memprobe.compare.card_predictions import memory_models, predictions
    from memprobe.compare.curve_chart import CHART_NAME, curve_figure, curve_series
    from memprobe.compare.heatmap import heat_figure

    def wanted(name: str) -> bool:
        return names is None or name in names

    catalog = catalog or default_catalog()
    published = " Published values come from other implementations (see the report's notes)."
    heat = relative_heat(relative)
    if heat.cells and wanted("relative_throughput"):
        footer = (
            f"{relative.basis[0].upper()}{relative.basis[1:]}, divided by the reference's, per workload and "
            "precision; OOM = 0; * a measured value over a published reference; B: at the card's max batch (its "
            "file has no throughput curve); (n/N): a mean over n of the N columns."
        )
        yield (
            "relative_throughput",
            heat_figure(
                heat,
                f"{comparison.throughput_noun()} relative to {_short(relative.reference)} (= 1.0), {relative.basis}",
                footer + (published if any(o == PUBLISHED for _, o in heat.rows) else ""),
            ),
        )
    if wanted("max_batch"):
        models, _ = memory_models(loaded, catalog)
        preds = [
            p
            for p in predictions(models, catalog.cards)
            if comparison.precisions() and p.precision in comparison.precisions()
        ]
        panels = batch_panels(comparison, preds, catalog)
        if panels:
            footer = (
                "Measured: exact maximum (B fits, B+1 does not). Predicted: fitted memory model, overhead carried "
                "over from the measured card. Published: a batch that fit (lower bound). Cards by memory: "
                + cards_by_memory(catalog)
                + "."
            )
            yield "max_batch", max_batch_figure(panels, footer)
    value, units = value_heat(comparison, catalog)
    if value.cells and wanted("throughput_per_1000usd"):
        footer = (
            f"{comparison.throughput_noun()} per 1000 USD of the card's price ("
            + "; ".join(f"{w}: {u}" for w, u in units.items())
            + " per 1000 USD); card prices from "
            "memprobe/data/gpus.yaml (published list prices, 2020 or 2023-2025); host not included."
        )
        yield (
            "throughput_per_1000usd",
            heat_figure(
                value,
                f"{comparison.throughput_noun()} per 1000 USD of card price",
                footer + (published if any(o == PUBLISHED for _, o in value.rows) else ""),
            ),
        )
    series = curve_series(comparison)
    if series and wanted(CHART_NAME):
        yield CHART_NAME, curve_figure(series)
    yield from breakdown_figures(loaded, predicted, names)
