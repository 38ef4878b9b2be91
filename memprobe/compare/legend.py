"""A chart's legend: its title as the title of one legend above all the panels, and the marker entries in it."""

from __future__ import annotations

from typing import Any


def marker_handle(marker: str, label: str, size: float, face: str | None = None) -> Any:
    """A legend entry that is one grey marker and no line (a measured B, a best batch, a knee, a published point);
    `face` "none" draws it hollow."""
    from matplotlib.lines import Line2D

    style: dict[str, Any] = {"markerfacecolor": face} if face is not None else {"markeredgecolor": "black"}
    return Line2D([0], [0], marker=marker, color="#555555", linestyle="none", markersize=size, label=label, **style)


def title_legend(fig: Any, handles: list[Any], title: str, ncols: int) -> None:
    """The chart's title as the title of one legend above all its panels (every chart reads the same way)."""
    legend = fig.legend(
        handles=handles,
        loc="outside upper center",
        ncols=ncols,
        fontsize=8.5,
        frameon=False,
        title=title,
        title_fontproperties={"size": 13, "weight": "bold"},
    )
    legend.get_title().set_multialignment("center")
