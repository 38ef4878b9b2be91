"""The HTML page's generation section, for `scan --mode generate` results: the generation table (concurrent
sequences B, the peak at B by category, KV cache bytes per token, the KV capacity beside vLLM's formula, labelled a
formula, prefill and decode tokens/s), each row linked to its file, and the decode curve (decode tokens/s against
concurrent sequences, measured).

No torch. The table is compare/generation.py's, as `memprobe report` prints it; the curve is the scan's own timed
points (each records its decode tokens/s).
"""

from __future__ import annotations

from memprobe.compare.generation import NOTES, generation_entries
from memprobe.compare.page_charts import DASHES, LINE_KINDS, card_colors, chart_html
from memprobe.compare.page_html import table_html
from memprobe.compare.page_sections import Context, Section, rows_table
from memprobe.compare.svg_plot import Axis, Mark, Panel, Series, legend_html
from memprobe.core.process.outcomes import FIT
from memprobe.core.records.records import CurvePoint, Timed
from memprobe.core.records.results import ScanResult

CAPTION = (
    "Decode tokens/s against concurrent sequences (measured): each timed generation of the scan's curve, B a cross. "
    "Hover a point for its value."
)


def decode_points(result: ScanResult, precision: str) -> list[tuple[float, float]]:
    """(concurrent sequences, decode tokens/s) of each timed generation of one precision that fit, by batch."""
    p = result.precisions[precision]
    found: dict[int, float] = {}
    runs: list[CurvePoint | Timed] = [*p.curve, *([p.throughput] if p.throughput else [])]
    for run in runs:
        rate = getattr(run, "decode_tokens_per_s", None)
        if (run.outcome or FIT) == FIT and rate and run.batch is not None:
            found.setdefault(int(run.batch), float(rate))
    return sorted(found.items())


def decode_chart(ctx: Context) -> str:
    """The decode curve: a panel per generation workload, a line per card and precision, B a cross."""
    curves = []
    for _path, result in ctx.single:
        if result.mode != "generate":
            continue
        for precision, p in result.precisions.items():
            points = decode_points(result, precision)
            if points:
                workload = ctx.labels.get(id(result), str(result.workload.name))
                curves.append((workload, ctx.catalog.canonical(result.gpu_name()), precision, p.max_batch, points))
    colors = card_colors([c[1] for c in curves])
    panels: dict[str, Panel] = {}
    for workload, card, precision, top, points in curves:
        panel = panels.setdefault(
            workload,
            Panel(
                workload,
                Axis("concurrent sequences (log 2)", log=2),
                Axis("decode tokens/s", lo=0.0),
                data={"workload": workload},
            ),
        )
        name = f"{workload}, {card} {precision} (measured)"
        marks = [Mark(x, y, f"{x:g} sequences: {y:,.0f} decode tokens/s", "o", 2.2) for x, y in points]
        data = {"card": card, "precision": precision}
        panel.series.append(Series(colors[card], marks, True, DASHES.get(precision, ""), data, name))
        at_b = [Mark(x, y, f"B = {x:g}: {y:,.0f} decode tokens/s", "x", 3.5) for x, y in points if x == top]
        panel.series.append(Series(colors[card], at_b, False, "", data, name))
    legend = legend_html(
        [("-", color, card) for card, color in colors.items()]
        + [(LINE_KINDS.get(pr, "-"), "#555", pr) for pr in dict.fromkeys(c[2] for c in curves)]
        + [("x", "#000", "max concurrent sequences B")]
    )
    return chart_html("decode_curve", [(panel, 380) for panel in panels.values()], legend, CAPTION)


def generation_section(ctx: Context) -> Section | None:
    """The generation table and the decode curve, where the results hold a generation record; None otherwise."""
    entries = generation_entries(ctx.single)
    if not entries:
        return None
    files = [ctx.sources.of(result) for _row, result in entries]
    table = rows_table(
        "generation", "Generation with a static KV cache (--mode generate)", [r for r, _ in entries], NOTES, files
    )
    body = table_html(table, ctx.sources, workloads=ctx.workloads) + decode_chart(ctx)
    return Section("generation", "Generation: concurrent sequences, KV cache and tokens/s", body)
