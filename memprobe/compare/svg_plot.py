"""Small SVG charts for the HTML page, written as text: panels of lines, markers, rules and stacked bars on linear or
log axes, each mark a hover target, each series tagged with what it shows (card, precision, workload) for the filters.

No torch and no matplotlib: matplotlib draws the PNG and SVG files of `report --charts`, but drawing a page's charts
with it took seconds per chart and grew with every result file. Here a chart is a grid of small panels (one per
workload, card or scan), so the page's filters can hide a workload's panel or a card's or precision's marks, and a page
of hundreds of result files draws its charts in a fraction of a second. The numbers drawn are the compare layer's;
this module only places them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape

WIDTH, HEIGHT = 380, 250
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 24, 40  # room for the y labels, the title and the x labels


@dataclass
class Axis:
    """An axis: its label, scale (0: linear from `lo`, else the base of a log scale), limits (None: from the data)
    and ticks (None: chosen)."""

    label: str
    log: int = 0
    lo: float | None = None
    hi: float | None = None
    ticks: list[float] | None = None


@dataclass
class Mark:
    """One point: where, what hovering it says, its shape (o, s, ^, v, *, x, _ or "" for none) and size; `open`
    draws it unfilled; `data` tags it alone (a card's point on a line of several cards)."""

    x: float
    y: float
    tip: str
    shape: str = "o"
    size: float = 3.0
    open: bool = False
    data: dict[str, str] = field(default_factory=dict)


@dataclass
class Series:
    """Marks in one color, joined by a line when `line`; `data` tags the group (card, precision) for the filters;
    `name` says what it is, before each mark's own hover text (written once for all its marks)."""

    color: str
    marks: list[Mark]
    line: bool = True
    dash: str = ""
    data: dict[str, str] = field(default_factory=dict)
    name: str = ""


@dataclass
class Bar:
    """One segment of a stacked bar at category `x` (0, 1, ...): from `bottom` up by `height` (down when negative)."""

    x: float
    bottom: float
    height: float
    color: str
    tip: str
    width: float = 0.6
    hatch: bool = False
    label: str = ""
    data: dict[str, str] = field(default_factory=dict)


@dataclass
class Rule:
    """A line across the plot at `value` (vertical: an x value), with an optional label at its end."""

    value: float
    vertical: bool = False
    color: str = "#000000"
    dash: str = "4 3"
    label: str = ""


@dataclass
class Panel:
    """One small chart: title, axes, what is drawn, category labels under bars, and `data` (its workload or card)
    for the filters."""

    title: str
    x: Axis
    y: Axis
    series: list[Series] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    data: dict[str, str] = field(default_factory=dict)


def compact(value: float) -> str:
    """A tick's number: 0.5, 12, 1.5k, 2M."""
    size = abs(value)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if size >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def _limits(axis: Axis, values: list[float]) -> tuple[float, float]:
    """The axis's range: its own limits, else the data's (from 0 on a linear axis), a little beyond the largest."""
    shown = [v for v in values if v is not None and (not axis.log or v > 0)]
    if axis.log:
        lo = axis.lo if axis.lo is not None else min(shown, default=1.0)
        hi = axis.hi if axis.hi is not None else max(shown, default=lo * axis.log)
        lo = max(lo, 1e-9)
        if hi <= lo:
            hi = lo * axis.log
        return lo / 1.15, hi * 1.15
    lo = axis.lo if axis.lo is not None else min([0.0] + shown)
    hi = axis.hi if axis.hi is not None else max(shown, default=1.0) * 1.08
    return lo, hi if hi > lo else lo + 1.0


def _ticks(axis: Axis, lo: float, hi: float) -> list[float]:
    """Powers of the base on a log axis (every other where too many); 1, 2 or 5 x 10^k steps, about 5, on a linear one."""
    if axis.ticks is not None:
        return [t for t in axis.ticks if lo <= t <= hi]
    if axis.log:
        first, last = math.ceil(math.log(lo, axis.log)), math.floor(math.log(hi, axis.log))
        powers = list(range(first, last + 1))
        every = max(1, math.ceil(len(powers) / 7))
        return [float(axis.log**p) for p in powers[::every]] or [lo, hi]
    raw = (hi - lo) / 5
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 1)]


class _Scale:
    """Data to pixels along one axis."""

    def __init__(self, axis: Axis, lo: float, hi: float, start: float, end: float) -> None:
        self.log, self.lo, self.hi, self.start, self.end = axis.log, lo, hi, start, end

    def __call__(self, value: float) -> float:
        if self.log:
            value = max(value, self.lo)
            share = (math.log(value) - math.log(self.lo)) / (math.log(self.hi) - math.log(self.lo))
        else:
            share = (value - self.lo) / (self.hi - self.lo)
        return round(self.start + share * (self.end - self.start))  # whole pixels: a page holds thousands of marks


def _shape(mark: Mark, x: float, y: float) -> str:
    """A marker's SVG element at pixel (x, y), a hover target saying mark.tip."""
    s = mark.size
    tip = (f' data-tip="{escape(mark.tip, quote=True)}"' if mark.tip else "") + _data(mark.data)
    fill = ' fill="#fff"' if mark.open else ""
    if mark.shape == "s":
        return f'<rect x="{x - s:.1f}" y="{y - s:.1f}" width="{2 * s:.1f}" height="{2 * s:.1f}"{fill}{tip}/>'
    if mark.shape in ("^", "v"):
        d = -1 if mark.shape == "^" else 1
        points = f"{x:.1f},{y + d * s * 1.3:.1f} {x - s * 1.2:.1f},{y - d * s * 0.8:.1f} {x + s * 1.2:.1f},{y - d * s * 0.8:.1f}"
        return f'<polygon points="{points}"{fill}{tip}/>'
    if mark.shape == "*":
        corners = []
        for i in range(10):
            r = s * (1.6 if i % 2 == 0 else 0.7)
            a = math.pi / 5 * i - math.pi / 2
            corners.append(f"{x + r * math.cos(a):.1f},{y + r * math.sin(a):.1f}")
        return f'<polygon points="{" ".join(corners)}" stroke="#000" stroke-width="0.6"{tip}/>'
    if mark.shape == "_":
        return (
            f'<path d="M{x - s:.1f} {y:.1f}H{x + s:.1f}" stroke="#000" stroke-width="2" stroke-dasharray="4 2"{tip}/>'
        )
    if mark.shape == "x":
        path = f"M{x - s:.1f} {y - s:.1f}L{x + s:.1f} {y + s:.1f}M{x - s:.1f} {y + s:.1f}L{x + s:.1f} {y - s:.1f}"
        return f'<path d="{path}" stroke="#000" stroke-width="1.5"{tip}/>'
    return f'<circle cx="{x:g}" cy="{y:g}" r="{s:g}"{fill}{tip}/>'


def _data(data: dict[str, str]) -> str:
    return "".join(f' data-{k}="{escape(v, quote=True)}"' for k, v in data.items() if v)


def panel_svg(panel: Panel, width: int = WIDTH, height: int = HEIGHT) -> str:
    """The panel as an <svg> element: axes with ticks and labels, rules, bars, then each series' line and marks."""
    xs = [m.x for s in panel.series for m in s.marks] + [b.x for b in panel.bars]
    xs += [r.value for r in panel.rules if r.vertical]
    ys = [m.y for s in panel.series for m in s.marks] + [r.value for r in panel.rules if not r.vertical]
    ys += [b.bottom + b.height for b in panel.bars] + [b.bottom for b in panel.bars]
    if panel.bars:
        xlo, xhi = -0.6, max(len(panel.categories), 1) - 0.4
    else:
        xlo, xhi = _limits(panel.x, xs)
    ylo, yhi = _limits(panel.y, ys)
    sx = _Scale(panel.x, xlo, xhi, LEFT, width - RIGHT)
    sy = _Scale(panel.y, ylo, yhi, height - BOTTOM, TOP)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{escape(panel.title, quote=True)}" font-size="10">',
        f'<text x="{width / 2:.0f}" y="14" text-anchor="middle" font-size="11" font-weight="600">'
        f"{escape(panel.title)}</text>",
    ]
    out += _axes(panel, sx, sy, (xlo, xhi), (ylo, yhi), width, height)
    for rule in panel.rules:
        out.append(_rule(rule, sx, sy, width, height))
    for bar in panel.bars:
        out.append(_bar(bar, sx, sy))
    for series in panel.series:
        out.append(_series(series, sx, sy))
    out.append("</svg>")
    return "".join(out)


def _axes(panel: Panel, sx: _Scale, sy: _Scale, xr: tuple, yr: tuple, width: int, height: int) -> list[str]:
    """The frame, grid lines, tick labels and axis labels."""
    bottom, right = height - BOTTOM, width - RIGHT
    out = [f'<rect x="{LEFT}" y="{TOP}" width="{right - LEFT}" height="{bottom - TOP}" fill="none" stroke="#999"/>']
    for t in _ticks(panel.y, *yr):
        y = sy(t)
        out.append(f'<path d="M{LEFT} {y}H{right}" stroke="#e4e4e4"/>')
        out.append(f'<text x="{LEFT - 4}" y="{y + 3}" text-anchor="end">{compact(t)}</text>')
    if panel.categories:
        for i, name in enumerate(panel.categories):
            for j, line in enumerate(name.split("\n")[:2]):
                out.append(
                    f'<text x="{sx(i)}" y="{bottom + 12 + 10 * j}" text-anchor="middle" font-size="9">'
                    f"{escape(line)}</text>"
                )
    else:
        for t in _ticks(panel.x, *xr):
            x = sx(t)
            out.append(f'<path d="M{x} {TOP}V{bottom}" stroke="#e4e4e4"/>')
            out.append(f'<text x="{x}" y="{bottom + 12}" text-anchor="middle">{compact(t)}</text>')
    out.append(
        f'<text x="{(LEFT + right) / 2:.0f}" y="{height - 6}" text-anchor="middle">{escape(panel.x.label)}</text>'
    )
    out.append(
        f'<text transform="translate(12 {(TOP + bottom) / 2:.0f}) rotate(-90)" text-anchor="middle">'
        f"{escape(panel.y.label)}</text>"
    )
    return out


def _rule(rule: Rule, sx: _Scale, sy: _Scale, width: int, height: int) -> str:
    dash = f' stroke-dasharray="{rule.dash}"' if rule.dash else ""
    if rule.vertical:
        x = sx(rule.value)
        line = f'<path d="M{x} {TOP}V{height - BOTTOM}" stroke="{rule.color}"{dash}/>'
        label = f'<text x="{x + 3}" y="{TOP + 10}" fill="{rule.color}" font-size="9">{escape(rule.label)}</text>'
    else:
        y = sy(rule.value)
        line = f'<path d="M{LEFT} {y}H{width - RIGHT}" stroke="{rule.color}"{dash}/>'
        label = (
            f'<text x="{width - RIGHT - 3}" y="{y - 3}" text-anchor="end" fill="{rule.color}" font-size="9">'
            f"{escape(rule.label)}</text>"
        )
    return line + (label if rule.label else "")


def _bar(bar: Bar, sx: _Scale, sy: _Scale) -> str:
    half = (sx(bar.x + bar.width / 2) - sx(bar.x - bar.width / 2)) / 2
    top, low = sy(max(bar.bottom, bar.bottom + bar.height)), sy(min(bar.bottom, bar.bottom + bar.height))
    x = sx(bar.x)
    hatch = ' stroke-dasharray="2 2"' if bar.hatch else ""
    rect = (
        f'<rect x="{x - half:.1f}" y="{top}" width="{2 * half:.1f}" height="{max(low - top, 0.5):.1f}" '
        f'fill="{bar.color}" stroke="#555"{hatch} data-tip="{escape(bar.tip, quote=True)}"/>'
    )
    label = ""
    if bar.label and low - top >= 11:
        label = (
            f'<text x="{x}" y="{(top + low) / 2 + 3:.1f}" text-anchor="middle" font-size="8">{escape(bar.label)}</text>'
        )
    return f"<g{_data(bar.data)}>{rect}{label}</g>"


def _series(series: Series, sx: _Scale, sy: _Scale) -> str:
    points = [(sx(m.x), sy(m.y)) for m in series.marks]
    name = f' data-name="{escape(series.name, quote=True)}"' if series.name else ""
    out = [f'<g{_data(series.data)}{name} fill="{series.color}" stroke="{series.color}">']
    if series.line and len(points) > 1:
        dash = f' stroke-dasharray="{series.dash}"' if series.dash else ""
        joined = " ".join(f"{x},{y}" for x, y in points)
        out.append(f'<polyline points="{joined}" fill="none" stroke-width="1.5"{dash}/>')
    for mark, (x, y) in zip(series.marks, points):
        if mark.shape:
            out.append(_shape(mark, x, y))
    out.append("</g>")
    return "".join(out)


def legend_html(items: list[tuple[str, str, str]]) -> str:
    """A legend under a chart: (kind, color, label) per entry, kind a line style ("-", "--", ":", "-.") or a marker
    shape; drawn as small inline SVGs beside their labels."""
    dashes = {"-": "", "--": "5 3", ":": "1.5 2.5", "-.": "6 2 1.5 2"}
    out = []
    for kind, color, label in items:
        if kind in dashes:
            dash = f' stroke-dasharray="{dashes[kind]}"' if dashes[kind] else ""
            icon = f'<path d="M1 6H23" stroke="{color}" stroke-width="2"{dash}/>'
        else:
            icon = f'<g fill="{color}" stroke="{color}">' + _shape(Mark(12, 6, "", kind, 3.5), 12, 6) + "</g>"
        out.append(f'<span><svg width="24" height="12" aria-hidden="true">{icon}</svg>{escape(label)}</span>')
    return '<p class="legend">' + "".join(out) + "</p>"
