"""The HTML page's memory charts, as small SVG panels (svg_plot.py) from what `report --charts` draws
(breakdown_chart.py's entries and lines): where the memory goes at B, and memory against batch.

No torch, no matplotlib. Each bar and panel is tagged with its workload, card and precision for the page's filters.
"""

from __future__ import annotations

from typing import Any, Sequence

from memprobe.compare.breakdown_chart import CATEGORY_COLORS, Entry, entries, per_sample_line
from memprobe.compare.chart_layout import PRECISION_COLORS
from memprobe.compare.page_charts import chart_html
from memprobe.compare.svg_plot import Axis, Bar, Mark, Panel, Rule, Series, legend_html
from memprobe.core.records.breakdown import CATEGORIES, LABELS, Breakdown

GIB = 1024**3


def _gib(value: float) -> str:
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _stack(x: float, record: Breakdown, what: str, hatch: bool, width: float, data: dict[str, str]) -> list[Bar]:
    """One stacked bar: positive categories upward from 0, negative ones downward, each a hover target."""
    bars, up, down = [], 0.0, 0.0
    for name in CATEGORIES:
        value = record.categories.get(name, 0) / GIB
        if value == 0:
            continue
        bottom = up if value > 0 else down
        tip = f"{what}: {LABELS[name]} {_gib(value)} GiB"
        bars.append(Bar(x, bottom, value, CATEGORY_COLORS[name], tip, width, hatch, _gib(value), data))
        up, down = (up + value, down) if value > 0 else (up, down + value)
    return bars


def breakdown_chart(loaded: Sequence, predicted: list[dict[str, Any]] | None, caption: str) -> str:
    """Where the memory goes at the peak of B: a panel per card, a stacked bar per workload and precision, the
    predicted breakdown at the same batch hatched beside the measured one, the allocator capacity a dashed mark."""
    found = entries(loaded, predicted)
    panels = []
    for gpu in dict.fromkeys(e.gpu for e in found):
        mine = [e for e in found if e.gpu == gpu]
        panel = Panel(gpu, Axis(""), Axis("GiB at the peak of a step at B"), data={"card": gpu})
        capacity = Series("#000000", [], False)
        for x, e in enumerate(mine):
            data = {"workload": e.workload, "precision": e.precision}
            what = f"{e.workload} {e.precision} on {gpu} at batch {e.measured.batch}"
            twin = e.predicted is not None
            panel.bars += _stack(
                x - 0.2 if twin else x, e.measured, f"{what}, measured", False, 0.38 if twin else 0.6, data
            )
            if e.predicted is not None:
                panel.bars += _stack(x + 0.2, e.predicted, f"{what}, predicted (emulated)", True, 0.38, data)
            if e.result.capacity_bytes:
                tip = f"{what}: allocator capacity {_gib(e.result.capacity_bytes / GIB)} GiB"
                capacity.marks.append(Mark(x, e.result.capacity_bytes / GIB, tip, "_", 14, data=data))
            panel.categories.append(f"{e.workload}\n{e.precision} B={e.measured.batch}")
        panel.series.append(capacity)
        panels.append((panel, max(380, 90 * len(mine) + 70)))
    shown = [n for n in CATEGORIES if any(r.categories.get(n, 0) for e in found for r in _records(e))]
    items = [("s", CATEGORY_COLORS[n], LABELS[n]) for n in shown]
    if any(e.predicted is not None for e in found):
        items.append(("s", "#ffffff", "predicted (emulated, same batch): dashed outline"))
    items.append(("--", "#000000", "allocator capacity"))
    return chart_html("memory_breakdown", panels, legend_html(items), caption)


def _records(entry: Entry) -> list[Breakdown]:
    return [r for r in (entry.measured, entry.predicted) if r is not None]


def memory_lines_chart(loaded: Sequence, predicted: list[dict[str, Any]] | None, caption: str) -> str:
    """Memory against batch: a panel per workload, precision and card; the static part, the per-sample line, the
    allocator capacity, B and b*, and the measured peak at B (a star)."""
    panels = []
    for e in entries(loaded, predicted):
        line = per_sample_line(e)
        if line is None:
            continue
        static, slope, _source = line
        record, capacity, best = e.measured, e.result.capacity_bytes, e.result.best_batch
        edge = (capacity - static) / slope if capacity else 0.0
        xmax = 1.1 * max(record.batch, best or 0, edge, 1)
        color = PRECISION_COLORS.get(e.precision, "#777777")
        panel = Panel(
            f"{e.workload} {e.precision}, {e.gpu}",
            Axis("batch", lo=0.0, hi=xmax),
            Axis("GiB", lo=0.0),
            data={"workload": e.workload, "card": e.gpu, "precision": e.precision},
        )
        static_tip = f"static part {_gib(static / GIB)} GiB (batch-independent)"
        panel.series.append(
            Series("#999999", [Mark(0, static / GIB, static_tip, ""), Mark(xmax, static / GIB, "", "")])
        )
        per = f"+{slope / GIB * 1024:.1f} MiB per sample"
        ends = [Mark(0, static / GIB, per, ""), Mark(xmax, (static + slope * xmax) / GIB, per, "")]
        panel.series.append(Series(color, ends))
        peak = f"{e.workload} {e.precision} on {e.gpu}: peak reserved {_gib(record.peak_reserved / GIB)} GiB at B={record.batch} - measured"
        panel.series.append(Series(color, [Mark(record.batch, record.peak_reserved / GIB, peak, "*", 5)], False))
        if capacity:
            panel.rules.append(Rule(capacity / GIB, False, "#000000", "4 3", "capacity"))
        panel.rules.append(
            Rule(record.batch, True, "#b2182b", "", f"B={record.batch}" if best != record.batch else f"B=b*={best}")
        )
        if best and best != record.batch:
            panel.rules.append(Rule(best, True, "#1a7837", "6 2 1.5 2", f"b*={best}"))
        panels.append((panel, 380))
    items = [("-", "#999999", "static part"), ("-", "#555555", "static + bytes per sample x batch")]
    items += [
        ("*", "#555555", "measured peak reserved at B"),
        ("-", "#b2182b", "max batch B"),
        ("-.", "#1a7837", "best batch b*"),
    ]
    items.append(("--", "#000000", "allocator capacity"))
    return chart_html("memory_vs_batch", panels, legend_html(items), caption)
