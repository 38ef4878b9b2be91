"""The HTML page's charts, drawn as small SVG panels (svg_plot.py) from the data `report --charts` draws: max batch by
card memory, throughput against batch, the frontier; every panel tagged with its workload, every mark with its card
and precision, so the page's filters apply to the charts as to the tables.

No torch, no matplotlib. A curve of more than MAX_CURVE_POINTS timed points is drawn from MAX_CURVE_POINTS of them
(reduce_curve: log-spaced in batch, with b*, B, the knee and the first point always kept), and each chart says so
where it happens; every point drawn shows its measured figure on hover. The memory charts are in page_memory_charts.py.
"""

from __future__ import annotations

import bisect
import math
from html import escape
from typing import Iterable, Sequence

from memprobe.compare.chart_layout import PRECISION_COLORS
from memprobe.compare.comparison import MEASURED, PREDICTED, PUBLISHED, Comparison, Point
from memprobe.compare.curve_chart import curve_series, point_text
from memprobe.compare.max_batch_chart import BatchPanel
from memprobe.compare.svg_plot import Axis, Mark, Panel, Series, legend_html, panel_svg
from memprobe.core.estimates.knee import KNEE_FALL

MAX_CURVE_POINTS = 64
# matplotlib's tab10, so that a card keeps one color in every panel (as in `report --charts`)
CARD_COLORS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
DASHES = {"fp32": "1.5 2.5", "tf32": "6 2 1.5 2", "fp16": "", "bf16": "5 3"}
LINE_KINDS = {"fp32": ":", "tf32": "-.", "fp16": "-", "bf16": "--"}
REDUCTION = (
    f"A curve of more than {MAX_CURVE_POINTS} timed points is drawn from {MAX_CURVE_POINTS} of them, log-spaced in "
    "batch, with its first point, b*, B and the knee always among them; its result file holds every point."
)


def chart_html(key: str, panels: Iterable[tuple[Panel, int]], legend: str, caption: str) -> str:
    """A chart: its panels side by side (each a <div> tagged like its Panel, for the filters), a legend and a
    caption. `panels` are (panel, width in pixels)."""
    shown = []
    for panel, width in panels:
        data = "".join(f' data-{k}="{escape(v, quote=True)}"' for k, v in panel.data.items() if v)
        shown.append(f'<div class="panel"{data}>{panel_svg(panel, width)}</div>')
    if not shown:
        return ""
    return (
        f'<figure class="chart" id="chart-{escape(key)}"><div class="panels">{"".join(shown)}</div>{legend}'
        f"<figcaption>{escape(caption)}</figcaption></figure>"
    )


def card_colors(cards: Sequence[str]) -> dict[str, str]:
    """One color per card, in the order given."""
    return {card: CARD_COLORS[i % len(CARD_COLORS)] for i, card in enumerate(dict.fromkeys(cards))}


def reduce_curve(curve: Sequence[tuple[float, float]], keep: Iterable[float | None], limit: int = MAX_CURVE_POINTS):
    """The (batch, throughput) points to draw: all of them up to `limit`; beyond, the first point, those at the
    batches in `keep` (b*, B, the knee) and, to make up `limit`, the point nearest each of log-spaced batches."""
    points = sorted(curve)
    if len(points) <= limit:
        return points
    wanted = {points[0][0], points[-1][0]} | {k for k in keep if k is not None}
    chosen = [p for p in points if p[0] in wanted]
    lo, hi = math.log(max(points[0][0], 1e-9)), math.log(max(points[-1][0], 1e-9))
    room = max(limit - len(chosen), 0)
    batches = [p[0] for p in points]
    for i in range(room):
        target = math.exp(lo + (hi - lo) * (i + 0.5) / max(room, 1))
        chosen.append(points[_nearest(batches, target)])
    return sorted(set(chosen))


def _nearest(batches: list[float], target: float) -> int:
    """The index of the batch nearest `target` in a sorted list (bisection)."""
    i = bisect.bisect_left(batches, target)
    if i == 0:
        return 0
    if i == len(batches):
        return len(batches) - 1
    return i if batches[i] - target < target - batches[i - 1] else i - 1


def curve_chart(comparison: Comparison, caption: str) -> str:
    """Throughput against batch: a panel per workload, a line per card and precision (reduced where long), b* a
    star, B a cross, the knee a triangle."""
    series = curve_series(comparison)
    colors = card_colors([p.gpu for points in series.values() for p in points])
    panels, reduced = [], False
    for workload, points in series.items():
        panel = Panel(
            workload, Axis("batch size (log 2)", log=2), Axis(points[0].unit, lo=0.0), data={"workload": workload}
        )
        for p in points:
            drawn = reduce_curve(p.curve, (p.best_batch, p.max_batch, p.knee_batch))
            reduced = reduced or len(drawn) < len(p.curve)
            marks = [Mark(x, y, point_text(p, x, y), "o", 2.2) for x, y in drawn]
            data = {"card": p.gpu, "precision": p.precision}
            name = f"{p.workload}, {p.gpu} {p.precision} (measured)"
            panel.series.append(Series(colors[p.gpu], marks, True, DASHES.get(p.precision, ""), data, name))
            panel.series.append(Series(colors[p.gpu], _curve_marks(p), False, "", data, name))
        panels.append((panel, 380))
    legend = legend_html(
        [("-", color, card) for card, color in colors.items()]
        + [
            (LINE_KINDS.get(pr, "-"), "#555", pr)
            for pr in dict.fromkeys(p.precision for ps in series.values() for p in ps)
        ]
        + [
            ("*", "#999", "best batch b*"),
            ("x", "#000", "max batch B"),
            ("v", "#999", f"knee (then a fall > {KNEE_FALL:.0%})"),
        ]
    )
    return chart_html("throughput_vs_batch", panels, legend, caption + (" " + REDUCTION if reduced else ""))


def _curve_marks(p: Point) -> list[Mark]:
    """b*, B and the knee of one curve, as marks on its line (not joined: the line runs through the points)."""
    at = dict(p.curve)
    marks = []
    if p.best_batch is not None and p.best_throughput:
        marks.append(Mark(p.best_batch, p.best_throughput, point_text(p, p.best_batch, p.best_throughput), "*", 4.5))
    if p.max_batch and p.max_batch in at:
        marks.append(Mark(p.max_batch, at[p.max_batch], point_text(p, p.max_batch, at[p.max_batch]), "x", 3.5))
    if p.knee_batch is not None and p.knee_batch in at:
        marks.append(Mark(p.knee_batch, at[p.knee_batch], point_text(p, p.knee_batch, at[p.knee_batch]), "v", 4))
    return marks


def max_batch_chart(panels: Sequence[BatchPanel], caption: str) -> str:
    """Max batch by card memory: a panel per workload, a color per precision; predicted a line of dots, measured a
    star, published an open triangle (a lower bound)."""
    shown = []
    kinds: set[str] = set()
    for bp in panels:
        ticks = sorted({round(p.memory_gib, 1) for p in bp.points})
        panel = Panel(
            bp.workload,
            Axis("card memory (GiB, log 2)", log=2, ticks=ticks),
            Axis(f"max batch ({bp.unit})", lo=0.0),
            data={"workload": bp.workload},
        )
        for precision in bp.precisions():
            color = PRECISION_COLORS.get(precision, "#777777")
            mine = sorted((p for p in bp.points if p.precision == precision), key=lambda p: (p.memory_gib, p.origin))
            marks = []
            for p in mine:
                what = f"max batch {'>=' if p.lower_bound else ''}{p.batch:g} {bp.unit}" if p.batch else "OOM"
                tip = f"{p.card} ({p.memory_gib:g} GiB): {what} - {p.origin}"
                shape, size = {MEASURED: ("*", 5.0), PUBLISHED: ("^", 3.5)}.get(p.origin, ("o", 2.2))
                marks.append(Mark(p.memory_gib, p.batch, tip, shape, size, p.origin == PUBLISHED, {"card": p.card}))
                kinds.add(p.origin)
            line = [m for m, p in zip(marks, mine) if p.origin == PREDICTED]
            rest = [m for m, p in zip(marks, mine) if p.origin != PREDICTED]
            data, name = {"precision": precision}, f"{bp.workload} {precision}"
            panel.series.append(Series(color, line, True, DASHES.get(precision, ""), data, name))
            panel.series.append(Series(color, rest, False, "", data, name))
        shown.append((panel, 380))
    precisions = list(dict.fromkeys(pr for bp in panels for pr in bp.precisions()))
    items = [(LINE_KINDS.get(pr, "-"), PRECISION_COLORS.get(pr, "#777777"), pr) for pr in precisions]
    words = {
        MEASURED: ("*", "measured by memprobe"),
        PREDICTED: ("o", "predicted (memory line)"),
        PUBLISHED: ("^", "published: a batch that fit"),
    }
    items += [(words[k][0], "#555", words[k][1]) for k in (MEASURED, PREDICTED, PUBLISHED) if k in kinds]
    return chart_html("max_batch", shown, legend_html(items), caption)


def frontier_chart(entries: dict, caption: str) -> str:
    """The batch x sequence-length frontier: a panel per workload, card and precision; measured solid, predicted
    dashed, both on log 2 axes."""
    from memprobe.core.records.frontier import BATCH_AT_SEQ, SEQ_AT_BATCH

    panels = []
    for (workload, card, precision), by_source in entries.items():
        panel = Panel(
            f"{workload} {precision}, {card}",
            Axis("sequence length (log 2)", log=2),
            Axis("batch (log 2)", log=2),
            data={"workload": workload, "card": card, "precision": precision},
        )
        for source, color, dash, shape in (("measured", "#1f5fa8", "", "o"), ("predicted", "#e6550d", "5 3", "x")):
            frontier = by_source.get(source)
            if frontier is None:
                continue
            pairs = sorted(
                [(seq, b) for seq, b in frontier.found(BATCH_AT_SEQ).items()]
                + [(seq, b) for b, seq in frontier.found(SEQ_AT_BATCH).items()]
            )
            marks = [
                Mark(seq, b, f"{workload} {precision} on {card}, {source}: batch {b} at length {seq}", shape, 3)
                for seq, b in pairs
                if min(seq, b) > 0  # log axes: a 0 is not drawn
            ]
            panel.series.append(Series(color, marks, True, dash))
        panels.append((panel, 380))
    legend = legend_html([("-", "#1f5fa8", "measured"), ("--", "#e6550d", "predicted")])
    return chart_html("frontier", panels, legend, caption)
