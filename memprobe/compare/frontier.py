"""The frontier report: measured and predicted frontier points side by side, as a table and a chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from memprobe.core.records.frontier import BATCH_AT_SEQ, SEQ_AT_BATCH, Frontier
from memprobe.core.records.results import ScanResult

KIND_TEXT = {BATCH_AT_SEQ: "max batch at length", SEQ_AT_BATCH: "max length at batch"}


def _card(result: ScanResult) -> str:
    """The catalog name of the card a result ran on (or was predicted for), so the two pair up."""
    from memprobe.core.cards.catalog import default_catalog

    return default_catalog().canonical(result.gpu_name())


def frontier_entries(
    loaded: Sequence[tuple[Path | None, ScanResult]],
) -> dict[tuple[str, str, str], dict[str, Frontier]]:
    """(workload, card, precision) -> {source: Frontier} for every result with a frontier section, the newest of
    each source kept."""
    return {key: {source: f for source, (f, _path) in found.items()} for key, found in _collect(loaded).items()}


def frontier_files(
    loaded: Sequence[tuple[Path | None, ScanResult]],
) -> dict[tuple[str, str, str], dict[str, Path | None]]:
    """(workload, card, precision) -> {source: the file frontier_entries took that source's frontier from}."""
    return {key: {source: path for source, (_f, path) in found.items()} for key, found in _collect(loaded).items()}


def _collect(
    loaded: Sequence[tuple[Path | None, ScanResult]],
) -> dict[tuple[str, str, str], dict[str, tuple[Frontier, Path | None]]]:
    out: dict[tuple[str, str, str], dict[str, tuple[Frontier, Path | None]]] = {}
    for path, result in sorted(loaded, key=lambda item: item[1].created_at):
        for precision, frontier in (result.frontier or {}).items():
            key = (str(result.workload.name), _card(result), precision)
            out.setdefault(key, {})[frontier.source] = (frontier, path)
    return out


def frontier_rows(loaded: Sequence[tuple[Path | None, ScanResult]]) -> list[dict[str, Any]]:
    """One row per (workload, card, precision, ladder point): measured and predicted beside each other, with how
    the measured point stands (verified in fresh processes, skipped by the budget, an error)."""
    rows = []
    for (workload, card, precision), by_source in frontier_entries(loaded).items():
        measured, predicted = by_source.get("measured"), by_source.get("predicted")
        keys = sorted({(p.kind, p.fixed) for f in by_source.values() for p in f.points})
        for kind, fixed in keys:
            m = next((p for p in (measured.points if measured else []) if (p.kind, p.fixed) == (kind, fixed)), None)
            q = next((p for p in (predicted.points if predicted else []) if (p.kind, p.fixed) == (kind, fixed)), None)
            rows.append(
                {
                    "workload": workload,
                    "gpu": card,
                    "precision": precision,
                    "point": f"{KIND_TEXT[kind]} {fixed}",
                    "measured": _value(m),
                    "proof": ""
                    if m is None or m.found is None
                    else ("fresh pair verified" if m.verified else "not verified in fresh processes"),
                    "predicted": _value(q),
                    "predicted / measured": (
                        f"{q.found / m.found:.2f}"
                        if m
                        and q
                        and m.found
                        and q.found is not None
                        and m.status == "measured"
                        and q.status == "predicted"
                        else ""
                    ),
                }
            )
    return rows


def _value(point) -> str:
    if point is None:
        return "-"
    if point.found is None:
        return point.status
    return str(point.found)


def write_frontier_chart(loaded: Sequence[tuple[Path, ScanResult]], out_dir: str | Path) -> list[Path]:
    """One panel per (workload, card, precision): max batch against sequence length, measured (solid) and predicted
    (dashed), both ladders on the same axes. Returns the files written (none without frontier results)."""
    from memprobe.compare.chart_layout import save

    entries = frontier_entries(loaded)
    if not entries:
        return []
    return save(frontier_figure(entries), Path(out_dir) / "frontier")


def frontier_figure(entries: dict[tuple[str, str, str], dict[str, Frontier]]):
    """The frontier panels as a matplotlib Figure (not laid out yet). Raises ValueError without entries."""
    from matplotlib.figure import Figure

    from memprobe.compare.chart_layout import figure_size, grid_shape

    if not entries:
        raise ValueError("a frontier chart needs at least one frontier")
    rows, columns = grid_shape(len(entries))
    fig = Figure(figsize=figure_size(rows, columns), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False)
    for ax, ((workload, card, precision), by_source) in zip(axes.flat, entries.items()):
        for source, style in (("measured", "-o"), ("predicted", "--x")):
            frontier = by_source.get(source)
            if frontier is None:
                continue
            pairs = sorted(
                [(seq, b) for seq, b in frontier.found(BATCH_AT_SEQ).items()]
                + [(seq, b) for b, seq in frontier.found(SEQ_AT_BATCH).items()]
            )
            if pairs:
                ax.plot([p[0] for p in pairs], [p[1] for p in pairs], style, label=source)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("sequence length")
        ax.set_ylabel("batch")
        ax.set_title(f"{workload} {precision}\n{card}", fontsize=9)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(entries) :]:
        ax.set_visible(False)
    return fig
