"""Charts of the memory breakdown at B: where the memory goes, and memory against batch.

No torch; drawn from result records only. `memory_breakdown`: a stacked bar per workload and precision at B, a
panel per card, one segment per category (core.breakdown.CATEGORIES) labelled in GiB; a predicted bar
(hatched, emulated) beside the measured one where a predicted breakdown at the same batch is given.
`memory_vs_batch`: a panel per workload, precision and card: the static part, the per-sample line, the
allocator capacity, B and b*, and the measured peak at B. Nothing is drawn for files without a breakdown.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Iterator, Sequence

from memprobe.compare.breakdown import predicted_rows
from memprobe.compare.chart_layout import (
    DPI,
    MAX_WIDTH_PX,
    PRECISION_COLORS,
    figure_size,
    grid_shape,
    save,
)
from memprobe.compare.comparison import PRECISION_ORDER
from memprobe.compare.legend import marker_handle, title_legend
from memprobe.core.records.breakdown import CATEGORIES, LABELS, Breakdown

GIB = 1024**3
BARS_NAME = "memory_breakdown"
LINES_NAME = "memory_vs_batch"
# One color per category, light enough for black labels; the unattributed rest is grey.
CATEGORY_COLORS = {
    "parameters": "#8db3e2",
    "parameter_copies": "#c6dbef",
    "buffers": "#dadaeb",
    "gradients": "#fdae6b",
    "optimizer_state": "#fdd0a2",
    "activations": "#a1d99b",
    "temporaries": "#c7e9c0",
    "inputs": "#bcbddc",
    "allocator_slack": "#fde0ef",
    "unattributed": "#bdbdbd",
}
LABEL_SHARE = 0.035  # a segment gets its GiB written on it when at least this share of the panel's height


@dataclass
class Entry:
    """One measured breakdown: the workload, precision and card it is for, the scan's record, the prediction
    at the same batch (None where none was given)."""

    workload: str
    precision: str
    gpu: str
    result: Any  # core.results.PrecisionResult
    predicted: Breakdown | None = None

    @property
    def measured(self) -> Breakdown:
        return self.result.breakdown


def entries(loaded: Sequence, predicted: list[dict[str, Any]] | None = None) -> list[Entry]:
    """The measured breakdowns in (path, result) pairs, the first given per workload, precision and card, in the
    order the workloads come and the precisions' order; each with the predicted record at its batch, if given."""
    from memprobe.compare.charts import _short

    found: dict[tuple[str, str, str], Entry] = {}
    for _path, result in loaded:
        name = str(result.workload.name)
        gpu = _short(result.gpu_name())
        for precision, p in result.precisions.items():
            if p.breakdown is None or (name, precision, gpu) in found:
                continue
            same = [
                r["breakdown"]
                for r in predicted_rows(predicted, name, precision)
                if r["breakdown"].batch == p.breakdown.batch
            ]
            found[(name, precision, gpu)] = Entry(name, precision, gpu, p, same[0] if same else None)
    workloads = list(dict.fromkeys(key[0] for key in found))
    order = {p: i for i, p in enumerate(PRECISION_ORDER)}
    return sorted(found.values(), key=lambda e: (workloads.index(e.workload), order.get(e.precision, 99), e.precision))


def per_sample_line(entry: Entry) -> tuple[float, float, str] | None:
    """(static bytes, bytes per sample, where from) of the memory line at the card: the scan's fitted model of the
    peak reserved, else the line through the breakdown's peak with its per-sample bytes; None without either."""
    fit = entry.result.memory_model.get("peak_reserved")
    static, slope = (fit.static_bytes, fit.per_sample_bytes) if fit is not None else (None, None)
    if static is not None and slope and slope > 0:
        return float(static), float(slope), "fitted to the scan's trials"
    record = entry.measured
    if record.per_sample_bytes and record.per_sample_bytes > 0:
        return (
            float(record.peak_reserved - record.per_sample_bytes * record.batch),
            float(record.per_sample_bytes),
            "through the breakdown's peak",
        )
    return None


def write_breakdown_charts(
    loaded: Sequence, out_dir: str | Path, predicted: list[dict[str, Any]] | None = None
) -> list[Path]:
    """Write memory_breakdown and memory_vs_batch (PNG and SVG each) into out_dir when the results have
    breakdowns; returns the paths written ([] without a breakdown). Raises OutputError where a file cannot be
    written."""
    written: list[Path] = []
    for name, fig in breakdown_figures(loaded, predicted):
        written += save(fig, Path(out_dir) / name)
    return written


def breakdown_figures(
    loaded: Sequence, predicted: list[dict[str, Any]] | None = None, names: Collection[str] | None = None
) -> Iterator[tuple[str, Any]]:
    """(name, matplotlib Figure) of memory_breakdown, then memory_vs_batch, each where the results have what it
    draws (with `names`, only those named): what `report --charts` writes and `report --breakdown` shows. Each is
    drawn only once the one before it has been taken, so a caller can finish one before the next is drawn."""
    found = entries(loaded, predicted)
    if found and (names is None or BARS_NAME in names):
        yield BARS_NAME, bars_figure(found)
    lined = [e for e in found if per_sample_line(e) is not None]
    if lined and (names is None or LINES_NAME in names):
        yield LINES_NAME, lines_figure(lined)


def _gib_text(value: float) -> str:
    """GiB as written on a bar: one decimal from 10 GiB, two below (a toy's megabytes read as 0.00)."""
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _stack(ax, x: float, width: float, record: Breakdown, hatch: str, limit: float) -> None:
    """One stacked bar: positive categories upward from 0, negative ones (a tracker that counted more than the
    allocator) downward; each segment's GiB written on it when tall enough, the peak reserved above."""
    up = down = 0.0
    for name in CATEGORIES:
        value = record.categories.get(name, 0) / GIB
        if value == 0:
            continue
        bottom = up if value > 0 else down
        ax.bar(
            x, value, width, bottom=bottom, color=CATEGORY_COLORS[name], edgecolor="#555555", linewidth=0.4, hatch=hatch
        )
        if abs(value) >= LABEL_SHARE * limit:  # on a hatched bar the number sits on a white patch, to be read
            ax.text(
                x,
                bottom + value / 2,
                _gib_text(value),
                ha="center",
                va="center",
                fontsize=7.5,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.6} if hatch else None,
            )
        up, down = (up + value, down) if value > 0 else (up, down + value)
    ax.text(x, up, _gib_text(record.peak_reserved / GIB), ha="center", va="bottom", fontsize=7.5, fontweight="bold")


def bars_figure(found: Sequence[Entry]):
    """A panel per card (one row each), a stacked bar per workload and precision, as a matplotlib Figure (not
    laid out yet). Raises ValueError without entries."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if not found:
        raise ValueError("a breakdown chart needs at least one breakdown")
    gpus = list(dict.fromkeys(e.gpu for e in found))
    widest = max(sum(1 + (e.predicted is not None) for e in found if e.gpu == g) for g in gpus)
    fig = Figure(
        figsize=figure_size(
            len(gpus),
            1,
            panel_width=min(MAX_WIDTH_PX / DPI, max(10.0, 2.5 + 0.55 * widest)),
            panel_height=3.6,
            extra_height=1.8,
        ),
        layout="constrained",
    )
    axes = fig.subplots(len(gpus), 1, squeeze=False)[:, 0]
    for ax, gpu in zip(axes, gpus):
        _bars_panel(ax, gpu, [e for e in found if e.gpu == gpu])
    shown = [
        n
        for n in CATEGORIES
        if any(r.categories.get(n, 0) for e in found for r in (e.measured, e.predicted) if r is not None)
    ]
    handles: list[Any] = [Patch(facecolor=CATEGORY_COLORS[n], edgecolor="#333333", label=LABELS[n]) for n in shown]
    handles.append(Patch(facecolor="white", edgecolor="#333333", label="measured (MemTracker at B)"))
    if any(e.predicted is not None for e in found):
        handles.append(
            Patch(facecolor="white", edgecolor="#333333", hatch="///", label="predicted (emulated, same batch)")
        )
    if any(e.result.capacity_bytes for e in found):
        handles.append(Line2D([0], [0], color="black", linestyle="--", label="allocator capacity"))
    title_legend(fig, handles, "Where the memory goes at the peak of the max batch B", min(len(handles), 3))
    fig.supxlabel(
        "GiB per category written on each segment, the peak reserved (their sum) above the bar; a "
        "negative unattributed part (the tracker counted more than the allocator) is drawn below zero. "
        "Memory outside PyTorch (CUDA context, driver) is not in the bars.",
        fontsize=7.5,
        color="#444444",
        wrap=True,
    )
    return fig


def _bars_panel(ax, gpu: str, mine: Sequence[Entry]) -> None:
    """One panel of bars_figure: the card's stacked bars, each with its capacity, named by precision and workload."""
    records = [r for e in mine for r in (e.measured, e.predicted) if r is not None]
    top = max(max(r.peak_reserved, sum(max(v, 0) for v in r.categories.values())) for r in records) / GIB
    bottom = min(sum(min(v, 0) for v in r.categories.values()) for r in records) / GIB
    for x, e in enumerate(mine):
        width = 0.38 if e.predicted is not None else 0.6
        left = x - 0.2 if e.predicted is not None else x
        _stack(ax, left, width, e.measured, "", top - bottom)
        if e.predicted is not None:
            _stack(ax, x + 0.2, width, e.predicted, "///", top - bottom)
        if e.result.capacity_bytes:
            ax.hlines(e.result.capacity_bytes / GIB, x - 0.45, x + 0.45, colors="black", linestyles="--", linewidth=1.2)
            top = max(top, e.result.capacity_bytes / GIB)
    ax.set_xticks(range(len(mine)))
    ax.set_xticklabels([f"{e.precision}\nB={e.measured.batch}" for e in mine], fontsize=7.5)
    for workload in dict.fromkeys(e.workload for e in mine):  # the workload's name under its precisions
        xs = [x for x, e in enumerate(mine) if e.workload == workload]
        ax.annotate(
            "\n".join(textwrap.wrap(workload, 14 * len(xs))),
            ((xs[0] + xs[-1]) / 2, 0),
            xycoords=("data", "axes fraction"),
            xytext=(0, -30),
            textcoords="offset points",
            ha="center",
            va="top",
            fontsize=8.5,
            fontweight="bold",
        )
    ax.set_xlim(-0.6, len(mine) - 0.4)
    ax.set_ylim(min(0.0, bottom * 1.1), top * 1.1)
    ax.set_ylabel("GiB at the peak of a step at B", fontsize=8.5)
    ax.set_title(gpu, fontsize=10)
    ax.tick_params(axis="y", labelsize=8)
    ax.grid(axis="y", alpha=0.3)


def lines_figure(found: Sequence[Entry]):
    """A panel per workload, precision and card: memory against batch, as a matplotlib Figure (not laid out
    yet). Raises ValueError when no entry has a per-sample line."""
    from matplotlib.figure import Figure

    lined = [(e, line) for e in found for line in [per_sample_line(e)] if line is not None]
    if not lined:
        raise ValueError("a memory-against-batch chart needs a per-sample line")
    rows, columns = grid_shape(len(lined))
    fig = Figure(figsize=figure_size(rows, columns), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False)
    sources = set()
    for ax, (e, (static, slope, source)) in zip(axes.flat, lined):
        sources.add(source)
        _memory_panel(ax, e, static, slope)
    for ax in list(axes.flat)[len(lined) :]:
        ax.set_visible(False)
    _lines_legend(fig, lined, sources)
    return fig


def _memory_panel(ax, e: Entry, static: float, slope: float) -> None:
    """One panel of lines_figure: the static part, the per-sample line, the capacity, B and b*, the peak at B."""
    record, capacity, best = e.measured, e.result.capacity_bytes, e.result.best_batch
    edge = (capacity - static) / slope if capacity else 0.0
    xmax = 1.1 * max(record.batch, best or 0, edge, 1)
    color = PRECISION_COLORS.get(e.precision, "#777777")
    ax.fill_between([0, xmax], 0, static / GIB, color="#d9d9d9")
    ax.text(xmax * 0.02, static / GIB / 2, f"static {static / GIB:.1f} GiB", fontsize=7.5, va="center")
    ax.plot([0, xmax], [static / GIB, (static + slope * xmax) / GIB], color=color, linewidth=1.8)
    ax.annotate(
        f"+{slope / GIB * 1024:.1f} MiB per sample",
        (xmax * 0.5, (static + slope * xmax * 0.5) / GIB),
        textcoords="offset points",
        xytext=(0, 8),
        ha="right",
        fontsize=7.5,
        color=color,
    )
    if capacity:
        ax.axhline(capacity / GIB, color="black", linestyle="--", linewidth=1.2)
    ax.axvline(record.batch, color="#b2182b", linewidth=1.2)
    ax.plot(
        record.batch,
        record.peak_reserved / GIB,
        "*",
        color=color,
        markersize=12,
        markeredgecolor="black",
        markeredgewidth=0.6,
        zorder=5,
    )
    marks = [(record.batch, f"B={record.batch}", "#b2182b")]
    if best == record.batch:  # one label where they meet, not two drawn over each other
        marks = [(record.batch, f"B=b*={best}", "#b2182b")]
    elif best:
        ax.axvline(best, color="#1a7837", linestyle="-.", linewidth=1.2)
        marks.append((best, f"b*={best}", "#1a7837"))
    for x, text, ink in marks:  # B and b* named at the top, inside the panel
        ax.annotate(
            text,
            (x, 1),
            xycoords=("data", "axes fraction"),
            xytext=(3, -3),
            textcoords="offset points",
            ha="left",
            va="top",
            fontsize=7.5,
            color=ink,
        )
    ax.set_xlim(0, xmax)
    ax.set_ylim(0, 1.08 * max(capacity or 0, static + slope * xmax, record.peak_reserved) / GIB)
    ax.set_title(f"{e.workload} {e.precision} on {e.gpu}", fontsize=9)
    ax.set_xlabel("batch", fontsize=8.5)
    ax.set_ylabel("GiB", fontsize=8.5)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.3)


def _lines_legend(fig, lined: Sequence[tuple[Entry, Any]], sources: set[str]) -> None:
    """lines_figure's one legend and footer."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    precisions = list(dict.fromkeys(e.precision for e, _ in lined))
    handles: list[Any] = [Patch(facecolor="#d9d9d9", label="static part (batch-independent)")]
    handles += [
        Line2D(
            [0],
            [0],
            color=PRECISION_COLORS.get(p, "#777777"),
            linewidth=2,
            label=f"static + bytes per sample x batch, {p}",
        )
        for p in precisions
    ]
    handles += [
        marker_handle("*", "measured peak reserved at B", 10),
        Line2D([0], [0], color="#b2182b", label="max batch B"),
        Line2D([0], [0], color="#1a7837", linestyle="-.", label="best batch b*"),
    ]
    if any(e.result.capacity_bytes for e, _ in lined):
        handles.append(Line2D([0], [0], color="black", linestyle="--", label="allocator capacity"))
    title_legend(fig, handles, "Memory against batch", min(len(handles), 4))
    fig.supxlabel(
        "The line is the peak reserved memory " + " or ".join(sorted(sources)) + "; where it meets the "
        "capacity is the batch the memory holds. Peak reserved excludes memory outside PyTorch.",
        fontsize=7.5,
        color="#444444",
        wrap=True,
    )
