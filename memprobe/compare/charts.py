"""Charts for `memprobe report --charts DIR`: relative throughput, max batch per card, throughput per 1000 USD.

No torch, and no display: figures are built with matplotlib's object API (Figure + Agg canvas, no pyplot
state), each written as PNG and SVG. Measured, published and predicted bars are told apart by color and
hatch, with a legend on every chart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from memprobe.catalog import Catalog, default_catalog
from memprobe.compare.comparison import MEASURED, PREDICTED, PUBLISHED, Comparison
from memprobe.compare.relative import Relative
from memprobe.outputs import prepare_dir, save_figure

STYLE = {
    MEASURED: {"color": "#1f5fa8", "hatch": "", "label": "measured by memprobe"},
    PUBLISHED: {"color": "#f28e2b", "hatch": "//", "label": "published (other implementation)"},
    PREDICTED: {"color": "#9ccf8f", "hatch": "..", "label": "predicted from the memory model"},
}
FORMATS = ("png", "svg")


@dataclass
class Bar:
    """One bar: its label on the x axis, height, origin (for its style) and an optional text above it."""

    label: str
    value: float
    origin: str
    text: str = ""
    order: float = 0.0  # for panels sorted by card memory rather than by value


@dataclass
class Panel:
    """One subplot: a title, a y-axis label with units, and its bars."""

    title: str
    ylabel: str
    bars: list[Bar]
    hline: float | None = None
    hline_label: str = ""


def _fmt(value: float) -> str:
    """A bar label: three significant digits, thousands without exponent (15442, not 1.54e+04)."""
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _short(gpu: str) -> str:
    # Long vendor prefixes make rotated tick labels unreadable; the catalog names are already short.
    for prefix in ("NVIDIA ", "GeForce "):
        gpu = gpu.replace(prefix, "")
    return gpu


def relative_panels(relative: Relative) -> list[Panel]:
    """A panel per normalized (workload, precision) column, bars sorted high to low, and one for the mean."""
    panels = []
    for col in relative.columns:
        ref = relative.reference_values[col]
        bars = [Bar(_short(r.gpu), c.value, c.origin,
                    "OOM" if c.oom else f"{c.value:.2f}" + (" (at B)" if relative.fell_back(c) else ""))
                for r in relative.rows for c in [r.cells.get(col)] if c is not None]
        bars.sort(key=lambda b: -b.value)
        origin = "published" if ref.origin == PUBLISHED else "measured"
        panels.append(Panel(f"{col[0]} {col[1]}\n(reference: {ref.throughput:g} {ref.unit}, {origin})",
                            f"throughput / {_short(relative.reference)} (x)", bars, 1.0,
                            f"{_short(relative.reference)} = 1.0"))
    if len(relative.columns) > 1:
        bars = [Bar(_short(r.gpu), r.mean, r.origin, f"{r.mean:.2f}") for r in relative.rows if r.mean is not None]
        bars.sort(key=lambda b: -b.value)
        panels.append(Panel("mean over the columns each card has\n(cards with different columns are not comparable)",
                            f"mean throughput / {_short(relative.reference)} (x)", bars, 1.0,
                            f"{_short(relative.reference)} = 1.0"))
    return panels


def max_batch_panels(comparison: Comparison, predictions: Sequence, catalog: Catalog) -> list[Panel]:
    """A panel per workload and precision with a memory model: every catalog card's predicted max batch, the
    measured card's measured one, and published batches of the same workload (lower bounds) beside them."""
    panels = []
    keys = list(dict.fromkeys((p.workload, p.precision) for p in predictions))
    if not keys:  # no memory model: show what was measured or published
        keys = list(dict.fromkeys((p.workload, p.precision) for p in comparison.points if p.max_batch is not None))
    for workload, precision in keys:
        bars: list[Bar] = []
        for p in predictions:
            if (p.workload, p.precision) == (workload, precision) and p.batch is not None:
                bars.append(Bar(_short(p.card.name), float(p.batch), p.origin, "OOM" if p.batch == 0 else str(p.batch),
                                order=p.card.memory_bytes))
        shown = {b.label for b in bars if b.origin == MEASURED}
        here = [p for p in comparison.points if (p.workload, p.precision) == (workload, precision) and p.max_batch is not None]
        # memprobe's unit wins; a published batch in another unit (tokens vs sentence pairs) would mislead on one axis
        unit = next((p.batch_unit for p in here if p.origin == MEASURED), here[0].batch_unit if here else "samples")
        for point in here:
            if point.batch_unit != unit:
                continue
            label = _short(point.gpu)
            if point.origin == MEASURED and label in shown:
                continue
            if point.origin == PUBLISHED:
                label += " (pub)"
            text = "OOM" if point.max_batch == 0 else (">=" if point.batch_lower_bound else "") + f"{point.max_batch:g}"
            card = catalog.find(point.gpu)
            bars.append(Bar(label, float(point.max_batch), point.origin, text,
                            order=card.memory_bytes if card else float("inf")))
        if not bars:
            continue
        bars.sort(key=lambda b: (b.order, b.label, b.origin))
        panels.append(Panel(f"{workload} {precision}", f"max batch ({unit} per step)", bars))
    return panels


def value_panels(comparison: Comparison, catalog: Catalog) -> list[Panel]:
    """A panel per workload and precision: throughput per 1000 USD of card price, measured or published."""
    panels = []
    keys = list(dict.fromkeys((p.workload, p.precision) for p in comparison.points if p.throughput))
    for workload, precision in keys:
        bars, unit = [], ""
        for p in comparison.points:
            if (p.workload, p.precision) != (workload, precision) or not p.throughput:
                continue
            card = catalog.find(p.gpu)
            if card is None or card.price is None:
                continue
            value = p.throughput / card.price.usd * 1000
            unit = unit or p.unit
            bars.append(Bar(_short(p.gpu) + (" (pub)" if p.origin == PUBLISHED else ""), value, p.origin, _fmt(value)))
        if bars:
            bars.sort(key=lambda b: -b.value)
            panels.append(Panel(f"{workload} {precision}", f"{unit} per 1000 USD", bars))
    return panels


def draw(panels: Sequence[Panel], title: str, footer: str, out_base: Path) -> list[Path]:
    """Draw the panels in a grid and write out_base.png and out_base.svg. Returns the paths written.

    Raises ValueError when there is nothing to draw.
    """
    from matplotlib import rc_context
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if not panels:
        raise ValueError(f"nothing to draw for {out_base.name}")
    most = max(len(p.bars) for p in panels)
    # Few wide panels for many bars, a grid for few: card names must stay readable when rotated.
    ncols = min(len(panels), 3 if most <= 10 else 2 if most <= 22 else 1)
    sub_w = 17 / ncols if ncols > 1 else max(7.0, 0.42 * most + 2.0)
    nrows = math.ceil(len(panels) / ncols)
    longest = max(len(b.label) for p in panels for b in p.bars)
    sub_h = 3.2 + 0.07 * longest  # room for the rotated card names under each panel
    fig = Figure(figsize=(ncols * sub_w, nrows * sub_h + 1.2), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    origins = set()
    has_line = False
    for ax, panel in zip(axes.flat, panels):
        xs = range(len(panel.bars))
        for x, bar in zip(xs, panel.bars):
            style = STYLE[bar.origin]
            origins.add(bar.origin)
            ax.bar(x, bar.value, color=style["color"], hatch=style["hatch"], edgecolor="#333333", linewidth=0.6)
        top = max((b.value for b in panel.bars), default=1.0) or 1.0
        for x, bar in zip(xs, panel.bars):
            if bar.text:
                # a white box keeps the number readable where it crosses the reference line
                ax.text(x, bar.value + top * 0.01, bar.text, ha="center", va="bottom", fontsize=7,
                        rotation=90 if len(panel.bars) > 10 else 0,
                        bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.4, "alpha": 0.8})
        ax.set_ylim(0, top * (1.22 if len(panel.bars) > 10 else 1.12))
        pad = max(0.0, (6 - len(panel.bars)) / 2)  # keep bars narrow when a panel has only a few
        ax.set_xlim(-0.6 - pad, len(panel.bars) - 0.4 + pad)
        if panel.hline is not None:
            ax.axhline(panel.hline, color="#c0392b", linestyle="--", linewidth=1.2)
            has_line = True
        ax.set_xticks(list(xs))
        ax.set_xticklabels([b.label for b in panel.bars], rotation=45, ha="right", rotation_mode="anchor", fontsize=8)
        ax.set_title(panel.title, fontsize=10)
        ax.set_ylabel(panel.ylabel, fontsize=9)
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    handles = [Patch(facecolor=STYLE[o]["color"], hatch=STYLE[o]["hatch"], edgecolor="#333333", label=STYLE[o]["label"])
               for o in (MEASURED, PUBLISHED, PREDICTED) if o in origins]
    if has_line:
        handles.append(Line2D([0], [0], color="#c0392b", linestyle="--", label=panels[0].hline_label or "reference"))
    # The title is the legend's title: one artist at the top, so constrained layout cannot overlap them.
    legend = fig.legend(handles=handles, loc="outside upper center", ncols=len(handles), fontsize=9, frameon=False,
                        title=title, title_fontproperties={"size": 13, "weight": "bold"})
    legend.get_title().set_multialignment("center")
    fig.supxlabel(footer, fontsize=7.5, color="#444444", wrap=True)
    prepare_dir(out_base.parent)
    # Lay out once, then freeze: otherwise constrained layout runs again for every file format (it dominates).
    fig.draw_without_rendering()
    fig.set_layout_engine("none")
    written = []
    # SVG text stays text (searchable, small); a fixed hash salt and no dates keep re-runs byte-identical.
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "memprobe"}):
        for ext in FORMATS:
            path = out_base.with_suffix(f".{ext}")
            metadata = {"Date": None} if ext == "svg" else {"Software": None}
            save_figure(fig, path, dpi=110, metadata=metadata)  # atomic: Ctrl-C leaves no half a file
            written.append(path)
    return written


def write_charts(comparison: Comparison, relative: Relative, loaded: Sequence, out_dir: str | Path,
                 catalog: Catalog | None = None) -> list[Path]:
    """Write every chart that has data into out_dir (PNG and SVG each). Returns the files written.

    `loaded` are the (path, result) pairs behind the comparison: their memory models give the predicted bars.
    """
    from memprobe.compare.guide import memory_models, predictions

    catalog = catalog or default_catalog()
    out_dir = Path(out_dir)
    models, _ = memory_models(loaded, catalog)
    preds = [p for p in predictions(models, catalog.cards) if comparison.precisions() and p.precision in comparison.precisions()]
    note = " Published bars come from other implementations (see the report's notes)."
    jobs = [
        ("relative_throughput", relative_panels(relative),
         f"Training throughput relative to {_short(relative.reference)} (= 1.0)\n{relative.basis}",
         f"{relative.basis[0].upper()}{relative.basis[1:]}, divided by the reference's, per workload and precision; "
         "OOM = 0; (at B) = at the card's max batch, its file has no throughput curve."),
        ("max_batch", max_batch_panels(comparison, preds, catalog), "Max training batch per card",
         "Measured: exact maximum (B fits, B+1 does not). Predicted: fitted memory model, overhead carried over from "
         "the measured card. Published: a batch that fit (lower bound)."),
        ("throughput_per_1000usd", value_panels(comparison, catalog), "Training throughput per 1000 USD of card price",
         "Card price from memprobe/data/gpus.yaml (published list prices, 2020 or 2023-2025); host not included."),
    ]
    written: list[Path] = []
    for name, panels, title, footer in jobs:
        if panels:
            if any(b.origin == PUBLISHED for p in panels for b in p.bars):
                footer += note
            written += draw(panels, title, footer, out_dir / name)
    from memprobe.compare.curve_chart import write_curve_chart

    return written + write_curve_chart(comparison, out_dir)
