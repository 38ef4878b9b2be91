"""The max-batch chart: how large a batch each card's memory holds, a small panel per workload.

No torch. x is the card's memory (log scale), y the max batch; each precision has its color. The memory
model's predictions for every catalog card are a line with dots, the measured batch a large star, a
published batch (a batch that fit: a lower bound) an open triangle. The footer says which cards have
which memory, so a card is found by its memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from memprobe.compare.chart_layout import (
    PRECISION_COLORS,
    PRECISION_LINESTYLES,
    figure_size,
    grid_shape,
    save,
)
from memprobe.compare.comparison import MEASURED, PRECISION_ORDER, PREDICTED, PUBLISHED, Comparison
from memprobe.compare.legend import marker_handle, title_legend
from memprobe.core.cards.catalog import Catalog

GIB = 1 << 30


@dataclass
class BatchPoint:
    """One max batch on one card: its memory, the batch, where it comes from, and the card's name."""

    memory_gib: float
    batch: float
    origin: str
    precision: str
    card: str
    lower_bound: bool = False


@dataclass
class BatchPanel:
    """One workload: its batch unit and every point of every precision."""

    workload: str
    unit: str
    points: list[BatchPoint] = field(default_factory=list)

    def precisions(self) -> list[str]:
        present = {p.precision for p in self.points}
        return [p for p in PRECISION_ORDER if p in present] + sorted(present - set(PRECISION_ORDER))


def batch_panels(comparison: Comparison, predictions: Sequence, catalog: Catalog) -> list[BatchPanel]:
    """A panel per workload: every catalog card's predicted max batch (from the memory models), the measured
    ones, and published batches in the same unit (lower bounds). Cards the catalog does not know are left out
    (their memory is unknown)."""
    known = [p for p in comparison.points if p.max_batch is not None]
    units: dict[str, str] = {}
    for p in sorted(known, key=lambda p: p.origin != MEASURED):  # memprobe's unit wins
        units.setdefault(p.workload, p.batch_unit)
    panels: dict[str, BatchPanel] = {}
    for p in predictions:
        if p.batch is not None and p.origin == PREDICTED:
            panel = panels.setdefault(p.workload, BatchPanel(p.workload, units.get(p.workload, "samples")))
            panel.points.append(
                BatchPoint(p.card.memory_bytes / GIB, float(p.batch), PREDICTED, p.precision, p.card.name)
            )
    for point in known:
        card = catalog.find(point.gpu)
        # a published batch in another unit (tokens vs sentence pairs) would mislead on one axis
        if card is None or point.max_batch is None or point.batch_unit != units[point.workload]:
            continue
        panel = panels.setdefault(point.workload, BatchPanel(point.workload, units[point.workload]))
        panel.points.append(
            BatchPoint(
                card.memory_bytes / GIB,
                float(point.max_batch),
                MEASURED if point.origin == MEASURED else PUBLISHED,
                point.precision,
                card.name,
                point.batch_lower_bound,
            )
        )
    order = comparison.workloads()
    return sorted(panels.values(), key=lambda p: order.index(p.workload) if p.workload in order else len(order))


def cards_by_memory(catalog: Catalog) -> str:
    """'6 GiB: RTX 2060; 8 GiB: RTX 2070, RTX 2080; ...' for the footer."""
    groups: dict[float, list[str]] = {}
    for card in catalog.cards:
        groups.setdefault(round(card.memory_bytes / GIB, 1), []).append(card.name.replace("GeForce ", ""))
    return "; ".join(f"{m:g} GiB: {', '.join(names)}" for m, names in sorted(groups.items()))


def draw_max_batch(panels: Sequence[BatchPanel], footer: str, out_base: Path) -> list[Path]:
    """Draw the panels in a grid and write out_base.png and .svg. Raises ValueError when there are none."""
    if not panels:
        raise ValueError(f"nothing to draw for {out_base.name}")
    return save(max_batch_figure(panels, footer), out_base)


def max_batch_figure(panels: Sequence[BatchPanel], footer: str):
    """The panels in a grid, as a matplotlib Figure (not laid out yet). Raises ValueError when there are none."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    if not panels:
        raise ValueError("a max-batch chart needs panels")
    rows, columns = grid_shape(len(panels))
    fig = Figure(figsize=figure_size(rows, columns), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False)
    shown: dict[str, bool] = {}
    precisions: list[str] = []
    for ax, panel in zip(axes.flat, panels):
        _batch_panel(ax, panel, shown, precisions)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    handles = [
        Line2D(
            [0],
            [0],
            color=PRECISION_COLORS.get(p, "#777777"),
            linestyle=PRECISION_LINESTYLES.get(p, "-"),
            linewidth=2,
            label=p,
        )
        for p in precisions
    ]
    kinds = {
        PREDICTED: Line2D([0], [0], color="#555555", marker="o", markersize=3, label="predicted (memory model)"),
        MEASURED: marker_handle("*", "measured by memprobe", 11),
        PUBLISHED: marker_handle("^", "published (other implementation): a batch that fit", 8, face="none"),
    }
    handles += [kinds[k] for k in (MEASURED, PREDICTED, PUBLISHED) if shown.get(k)]
    title_legend(fig, handles, "Max training batch by card memory", len(handles))
    fig.supxlabel("card memory (GiB, log scale). " + footer, fontsize=7.5, color="#444444", wrap=True)
    return fig


def _batch_panel(ax, panel: BatchPanel, shown: dict[str, bool], precisions: list[str]) -> None:
    """One panel of max_batch_figure: a line of predicted dots per precision, measured stars, published triangles;
    the origins drawn are added to `shown`, the precisions to `precisions`."""
    ticks = sorted({round(p.memory_gib, 1) for p in panel.points})
    for precision in panel.precisions():
        if precision not in precisions:
            precisions.append(precision)
        color = PRECISION_COLORS.get(precision, "#777777")
        mine = [p for p in panel.points if p.precision == precision]
        line = sorted((p.memory_gib, p.batch) for p in mine if p.origin == PREDICTED)
        if line:  # precisions with equal batches overlap: their line styles tell them apart
            ax.plot(
                *zip(*line),
                PRECISION_LINESTYLES.get(precision, "-"),
                marker="o",
                color=color,
                markersize=3,
                linewidth=1.6,
            )
            shown[PREDICTED] = True
        for p in mine:
            if p.origin == MEASURED:
                ax.plot(
                    p.memory_gib,
                    p.batch,
                    "*",
                    color=color,
                    markersize=13,
                    markeredgecolor="black",
                    markeredgewidth=0.7,
                    zorder=5,
                )
            elif p.origin == PUBLISHED:
                ax.plot(
                    p.memory_gib,
                    p.batch,
                    "^",
                    markerfacecolor="none",
                    markeredgecolor=color,
                    markersize=8,
                    markeredgewidth=1.4,
                    zorder=4,
                )
            shown[p.origin] = True
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks], fontsize=7.5, rotation=90 if len(ticks) > 9 else 0)
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.set_title(panel.workload, fontsize=10)
    ax.set_ylabel(f"max batch ({panel.unit} per step)", fontsize=8.5)
    ax.tick_params(axis="y", labelsize=8)
    ax.grid(alpha=0.3)
