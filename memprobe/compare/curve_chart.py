"""Chart of throughput against batch size: one panel per workload, one line per card and precision.

No torch here. Drawn from the throughput curves in the result files (measured points only); b* is marked
with a star, B (the max batch, the curve's last point) with a cross and the knee with a triangle and its fall,
so a drop at B, and where it starts, show at a glance.
"""

from __future__ import annotations

from pathlib import Path

from memprobe.compare.chart_layout import PRECISION_LINESTYLES as LINESTYLES
from memprobe.compare.chart_layout import figure_size, grid_shape, save
from memprobe.compare.comparison import MEASURED, Comparison, Point
from memprobe.compare.legend import marker_handle, title_legend
from memprobe.compare.tables import fmt_number
from memprobe.core.estimates.knee import KNEE_FALL

CHART_NAME = "throughput_vs_batch"


def curve_series(comparison: Comparison) -> dict[str, list[Point]]:
    """Measured points with at least two curve points, grouped by workload (in the comparison's order)."""
    series: dict[str, list[Point]] = {}
    for p in comparison.points:
        if p.origin == MEASURED and len(p.curve) >= 2:
            series.setdefault(p.workload, []).append(p)
    return series


def knee_mark(p: Point) -> tuple[float, float, str] | None:
    """Where to mark a point's knee: (batch, throughput there, label such as "knee 2644: -36.7%"); None without a
    knee or when the knee's batch is not on the drawn curve."""
    if p.knee_batch is None or p.knee_drop is None:
        return None
    speed = next((y for x, y in p.curve if x == p.knee_batch), None)
    return None if speed is None else (p.knee_batch, speed, f"knee {p.knee_batch:g}: {p.knee_drop:+.1%}")


def point_text(p: Point, batch: float, speed: float) -> str:
    """A curve point in words: its batch and throughput, and whether it is b*, B or the knee."""
    marks = [
        name
        for name, at in (("b*", p.best_batch), ("max batch B", p.max_batch), ("knee", p.knee_batch))
        if at is not None and at == batch
    ]
    return f"batch {fmt_number(batch)}, {fmt_number(speed)} {p.unit}" + (f" ({', '.join(marks)})" if marks else "")


def write_curve_chart(comparison: Comparison, out_dir: str | Path) -> list[Path]:
    """Write throughput_vs_batch.png and .svg into out_dir; returns the paths ([] when no result has a curve)."""
    series = curve_series(comparison)
    if not series:
        return []
    return save(curve_figure(series), Path(out_dir) / CHART_NAME)


def curve_figure(series: dict[str, list[Point]]):
    """A panel per workload in a grid, one legend for all, as a matplotlib Figure (not laid out yet)."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    rows, columns = grid_shape(len(series))
    fig = Figure(figsize=figure_size(rows, columns), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False)
    gpus = list(dict.fromkeys(p.gpu for ps in series.values() for p in ps))
    colors = {gpu: f"C{i % 10}" for i, gpu in enumerate(gpus)}
    precisions = list(dict.fromkeys(p.precision for ps in series.values() for p in ps))
    for ax, (workload, points) in zip(axes.flat, series.items()):
        _curve_panel(ax, workload, points, colors)
    for ax in list(axes.flat)[len(series) :]:
        ax.set_visible(False)
    # One legend for every panel: a card is a color, a precision a line style.
    handles = [Line2D([0], [0], color=colors[g], linewidth=2, label=g) for g in gpus]
    handles += [Line2D([0], [0], color="#555555", linestyle=LINESTYLES.get(p, "-"), label=p) for p in precisions]
    handles += [
        marker_handle("*", "best batch b*", 10),
        Line2D([0], [0], marker="x", color="black", linestyle="none", markersize=7, label="max batch B"),
        marker_handle("v", f"knee (then a fall > {KNEE_FALL:.0%})", 8),
    ]
    title_legend(fig, handles, "Throughput against batch size", min(len(handles), 8))
    return fig


def _curve_panel(ax, workload: str, points: list[Point], colors: dict[str, str]) -> None:
    """One panel of curve_figure: a line per card and precision, b* starred, B crossed, the knee marked and listed."""
    knees = 0  # knee labels in this panel so far: each next one a line lower
    for p in points:
        xs, ys = zip(*sorted(p.curve))
        ax.plot(
            xs,
            ys,
            LINESTYLES.get(p.precision, "-"),
            color=colors[p.gpu],
            marker="o",
            markersize=3,
            linewidth=1.4,
            label=f"{p.gpu} {p.precision}",
        )
        if p.best_batch is not None and p.best_throughput:
            ax.plot(
                [p.best_batch],
                [p.best_throughput],
                "*",
                color=colors[p.gpu],
                markersize=11,
                markeredgecolor="black",
                markeredgewidth=0.5,
            )
        if p.max_batch:
            ax.plot([xs[-1]], [ys[-1]], "x", color="black", markersize=7)
        knee = knee_mark(p)
        if knee is not None:
            ax.plot(
                [knee[0]],
                [knee[1]],
                "v",
                color=colors[p.gpu],
                markersize=9,
                markeredgecolor="black",
                markeredgewidth=0.5,
            )
            # Listed in the panel's upper left (throughput is low at small batches, so that corner is free):
            # labels beside their points overlapped where two cards' knees sit at similar batches.
            ax.text(
                0.02,
                0.96 - 0.075 * knees,
                f"{p.gpu} {p.precision}: {knee[2]}",
                transform=ax.transAxes,
                ha="left",
                va="top",
                fontsize=7,
                color=colors[p.gpu],
            )
            knees += 1
    ax.set_xscale("log", base=2)
    ax.set_title(workload, fontsize=10)
    ax.set_xlabel("batch size (log 2)", fontsize=8.5)
    ax.set_ylabel(points[0].unit, fontsize=8.5)
    # room above the highest point for its marker
    ax.set_ylim(bottom=0, top=1.12 * max(y for p in points for _, y in p.curve))
    ax.grid(alpha=0.3)
    ax.tick_params(labelsize=8)
