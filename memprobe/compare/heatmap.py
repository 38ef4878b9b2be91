"""A table drawn as a heatmap: a row per card, a column per workload and precision, the number in each cell.

No torch. Many cards times many columns read at screen size as one grid, where a bar chart per column
needed a panel each. Measured cells are bold and outlined, published ones plain; out-of-memory cells are
grey. The color shows `Heat.scale`: a ratio on a log scale centred on 1 (relative throughput), or a share
of the column's best (0 to 1).
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from memprobe.compare.chart_layout import DPI, MAX_WIDTH_PX, save
from memprobe.compare.comparison import MEASURED, PUBLISHED
from memprobe.compare.legend import title_legend

MEASURED_EDGE = "#0b2e59"
OOM_FILL = "#d9d9d9"
ROW_INCHES = 0.27
COLUMN_INCHES = 1.2
LABEL_INCHES = 2.1
FIXED_INCHES = 2.2  # title and legend, column headers, footer


@dataclass
class HeatCell:
    """One cell: the number the color shows, the text written, where it comes from."""

    value: float
    text: str
    origin: str
    oom: bool = False


@dataclass
class Heat:
    """Rows (label, origin) x columns (group, label): a group (a workload) names consecutive columns (its
    precisions) once, above them; the cells there are, and how to color them."""

    columns: list[tuple[str, str]]
    rows: list[tuple[str, str]]
    cells: dict[tuple[int, int], HeatCell] = field(default_factory=dict)
    scale: str = "ratio"  # "ratio": log scale centred on 1; "share": 0 to 1
    colorbar: str = ""
    cards: list[str] = field(
        default_factory=list
    )  # the card of each row, as the comparison names it (the page's filter)

    def groups(self) -> list[tuple[str, int, int]]:
        """(group, first column, last column) of each run of columns with the same group."""
        out: list[tuple[str, int, int]] = []
        for i, (group, _label) in enumerate(self.columns):
            if out and out[-1][0] == group:
                out[-1] = (group, out[-1][1], i)
            else:
                out.append((group, i, i))
        return out


def heat_size(heat: Heat) -> tuple[float, float]:
    """Figure (width, height) in inches: within MAX_WIDTH_PX x MAX_HEIGHT_PX while rows fit, taller beyond."""
    width = min(LABEL_INCHES + COLUMN_INCHES * len(heat.columns) + 1.3, MAX_WIDTH_PX / DPI)
    height = FIXED_INCHES + ROW_INCHES * len(heat.rows)
    return max(width, 7.0), height


def _colors(heat: Heat):
    from matplotlib import colormaps
    from matplotlib.colors import Normalize, TwoSlopeNorm

    if heat.scale == "ratio":
        spread = max([abs(math.log2(c.value)) for c in heat.cells.values() if c.value > 0] + [1.0])
        return colormaps["RdBu"], TwoSlopeNorm(0.0, -spread, spread), lambda v: math.log2(v) if v > 0 else None
    return colormaps["Greens"], Normalize(0.0, 1.0), lambda v: v


def draw_heat(heat: Heat, title: str, footer: str, out_base: Path) -> list[Path]:
    """Draw the heatmap and write out_base.png and .svg. Raises ValueError when it has no cells."""
    if not heat.cells:
        raise ValueError(f"nothing to draw for {out_base.name}")
    return save(heat_figure(heat, title, footer), out_base)


def heat_figure(heat: Heat, title: str, footer: str):
    """The heatmap as a matplotlib Figure (not laid out yet). Raises ValueError when it has no cells."""
    import numpy as np
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch, Rectangle

    if not heat.cells:
        raise ValueError("a heatmap needs cells")
    cmap, norm, transform = _colors(heat)
    grid = np.full((len(heat.rows), len(heat.columns)), np.nan)
    for (r, c), cell in heat.cells.items():
        shown = transform(cell.value) if not cell.oom else None
        if shown is not None:
            grid[r, c] = shown
    fig = Figure(figsize=heat_size(heat), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, norm=norm, aspect="auto")
    for (r, c), cell in heat.cells.items():
        if cell.oom:
            ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, facecolor=OOM_FILL, edgecolor="none"))
        measured = cell.origin == MEASURED
        ax.text(
            c,
            r,
            cell.text,
            ha="center",
            va="center",
            fontsize=7.5,
            color=_ink(cmap, norm, grid[r, c]),
            fontweight="bold" if measured else "normal",
        )
        if measured:
            ax.add_patch(Rectangle((c - 0.47, r - 0.45), 0.94, 0.9, fill=False, edgecolor=MEASURED_EDGE, linewidth=1.3))
    ax.set_xticks(range(len(heat.columns)))
    ax.set_xticklabels([label for _group, label in heat.columns], fontsize=7.5)
    groups = heat.groups()
    top = ax.secondary_xaxis("top")
    top.set_xticks([(first + last) / 2 for _g, first, last in groups])
    chars = _chars_per_column(fig, heat)
    top.set_xticklabels(
        [header(g, width=max(8, chars * (last - first + 1))) for g, first, last in groups],
        fontsize=8,
        fontweight="bold",
    )
    top.tick_params(length=0)
    for _g, first, _last in groups[1:]:
        ax.axvline(first - 0.5, color="#333333", linewidth=1.4)
    ax.set_yticks(range(len(heat.rows)))
    ax.set_yticklabels([label for label, _ in heat.rows], fontsize=8)
    for tick, (_, origin) in zip(ax.get_yticklabels(), heat.rows):
        if origin == MEASURED:
            tick.set_fontweight("bold")
    ax.set_xticks([x - 0.5 for x in range(1, len(heat.columns))], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, len(heat.rows))], minor=True)
    ax.tick_params(which="both", length=0)
    ax.grid(which="minor", color="white", linewidth=1.0)
    bar = fig.colorbar(image, ax=ax, shrink=0.6, pad=0.01)
    bar.set_label(heat.colorbar, fontsize=8)
    bar.ax.tick_params(labelsize=7.5)
    if heat.scale == "ratio":
        ticks = [t for t in range(-4, 5) if norm.vmin <= t <= norm.vmax]
        bar.set_ticks(ticks, labels=[f"{2.0**t:g}x" for t in ticks])
    handles = [Patch(facecolor="white", edgecolor=MEASURED_EDGE, linewidth=1.3, label="measured by memprobe (bold)")]
    if any(origin == PUBLISHED for _, origin in heat.rows):
        handles.append(Patch(facecolor="white", edgecolor="#bbbbbb", label="published (other implementation)"))
    if any(c.oom for c in heat.cells.values()):
        handles.append(Patch(facecolor=OOM_FILL, edgecolor="none", label="OOM: did not fit (counts as 0)"))
    title_legend(fig, handles, title, len(handles))
    fig.supxlabel(footer, fontsize=7.5, color="#444444", wrap=True)
    return fig


def _chars_per_column(fig, heat: Heat) -> int:
    """About how many 8-pt characters fit across one column (row labels and colorbar take the rest)."""
    inches = (fig.get_figwidth() - LABEL_INCHES - 1.3) / max(1, len(heat.columns))
    return max(6, int(inches * 72 / 8 * 1.6))


def _ink(cmap, norm, value: float) -> str:
    """Black or white text, whichever reads on the cell's color (black on an empty or OOM cell)."""
    if math.isnan(value):
        return "black"
    r, g, b, _a = cmap(norm(value))
    return "white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.5 else "black"


def header(*parts: str, width: int = 16) -> str:
    """A column header: each part wrapped to `width` characters, one part per line at least."""
    return "\n".join(line for part in parts if part for line in textwrap.wrap(part, width, break_on_hyphens=False))


# matplotlib's "RdBu" (ratio) and "Greens" (share) colormaps, the ColorBrewer colors the charts use, and the 256 steps
# matplotlib interpolates between them: the page colors its tables alike without importing matplotlib.
_BREWER = {
    "ratio": ("#67001f", "#b2182b", "#d6604d", "#f4a582", "#fddbc7", "#f7f7f7", "#d1e5f0", "#92c5de", "#4393c3",
              "#2166ac", "#053061"),
    "share": ("#f7fcf5", "#e5f5e0", "#c7e9c0", "#a1d99b", "#74c476", "#41ab5d", "#238b45", "#006d2c", "#00441b"),
}  # fmt: skip
LUT_SIZE = 256


def _lut(scale: str) -> list[tuple[float, float, float]]:
    """The colormap as matplotlib tabulates it: LUT_SIZE colors, linear between the anchors, ends included."""
    anchors = [(int(h[1:3], 16) / 255, int(h[3:5], 16) / 255, int(h[5:7], 16) / 255) for h in _BREWER[scale]]
    steps = len(anchors) - 1
    out = []
    for i in range(LUT_SIZE):
        x = i / (LUT_SIZE - 1) * steps
        k = min(int(x), steps - 1)
        (r0, g0, b0), (r1, g1, b1) = anchors[k], anchors[k + 1]
        f = x - k
        out.append((r0 + (r1 - r0) * f, g0 + (g1 - g0) * f, b0 + (b1 - b0) * f))
    return out


def _norm(heat: Heat):
    """A cell's value on 0..1 as the chart's norm puts it: log2 of the ratio, centred on 1 (TwoSlopeNorm), or the
    share itself; None for a value with no color (not above 0 on the log scale)."""
    if heat.scale == "ratio":
        spread = max([abs(math.log2(c.value)) for c in heat.cells.values() if c.value > 0] + [1.0])

        def ratio(value: float) -> float | None:
            if value <= 0:
                return None
            x = math.log2(value)
            return 0.5 / spread * (x + spread) if x < 0 else 0.5 / spread * x + 0.5

        return ratio
    return lambda value: value


def heat_colors(heat: Heat) -> dict[tuple[int, int], tuple[str, str]]:
    """Each cell's fill and text color as CSS hex colors, on the scale the chart draws (OOM cells grey): the HTML
    page colors its tables with them (the same colors as matplotlib's, tests/test_charts.py checks)."""
    lut, norm = _lut(heat.scale), _norm(heat)
    out = {}
    for key, cell in heat.cells.items():
        shown = None if cell.oom else norm(cell.value)
        if shown is None:
            out[key] = (OOM_FILL, "black")
            continue
        r, g, b = lut[min(max(int(shown * LUT_SIZE), 0), LUT_SIZE - 1)]
        fill = "#" + "".join(format(round(v * 255), "02x") for v in (r, g, b))
        out[key] = (fill, "white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.5 else "black")
    return out
