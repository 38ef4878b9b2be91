"""What every chart of `memprobe report --charts` shares: screen-sized figures, grids of small panels, and saving.

A chart is read on a screen: at DPI it is at most MAX_WIDTH_PX x MAX_HEIGHT_PX (about 1600 x 1000), its panels
laid out in a grid of at most MAX_COLUMNS columns, its labels inside the figure (constrained layout), fonts
no smaller than 7.5 pt. Each is written as PNG and SVG.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from memprobe.core.files.outputs import prepare_dir, save_figure

DPI = 110
MAX_WIDTH_PX = 1600
MAX_HEIGHT_PX = 1000
MAX_COLUMNS = 4
FORMATS = ("png", "svg")
PRECISION_COLORS = {"fp32": "#4c4c4c", "tf32": "#8c6bb1", "fp16": "#e6550d", "bf16": "#1f5fa8"}
PRECISION_LINESTYLES: dict[str, Any] = {"fp32": ":", "tf32": "-.", "fp16": "-", "bf16": "--"}


def grid_shape(panels: int, max_columns: int = MAX_COLUMNS) -> tuple[int, int]:
    """(rows, columns) for `panels` small panels: a row of up to 3, then 2 x 2, 3 x 2, 3 x 3, then 4 wide.

    Raises ValueError for no panels.
    """
    if panels < 1:
        raise ValueError("a grid needs at least one panel")
    columns = panels if panels <= 3 else 2 if panels == 4 else 3 if panels <= 9 else max_columns
    columns = min(columns, max_columns)
    return math.ceil(panels / columns), columns


def figure_size(
    rows: int, columns: int, panel_width: float = 4.8, panel_height: float = 3.1, extra_height: float = 1.6
) -> tuple[float, float]:
    """Figure (width, height) in inches for a grid: panels shrink to keep the figure within MAX_WIDTH_PX x
    MAX_HEIGHT_PX at DPI; past 3 rows the height grows instead (panels must stay readable)."""
    width = min(columns * panel_width, MAX_WIDTH_PX / DPI)
    height = rows * panel_height + extra_height
    if rows <= 3:
        height = min(height, MAX_HEIGHT_PX / DPI)
    return width, height


def save(fig, out_base: Path) -> list[Path]:
    """Lay the figure out once and write out_base.png and out_base.svg. Returns the paths written.

    SVG text stays text (searchable, small); a fixed hash salt and no dates keep re-runs byte-identical.
    """
    from matplotlib import rc_context

    prepare_dir(out_base.parent)
    # Lay out once, then freeze: otherwise constrained layout runs again for every file format (it dominates).
    fig.draw_without_rendering()
    fig.set_layout_engine("none")
    written = []
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "memprobe"}):
        for ext in FORMATS:
            path = out_base.with_suffix(f".{ext}")
            # atomic: Ctrl-C leaves no half a file
            save_figure(fig, path, dpi=DPI, metadata={"Date": None} if ext == "svg" else {"Software": None})
            written.append(path)
    return written
