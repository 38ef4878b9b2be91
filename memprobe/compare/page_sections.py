"""The sections of the HTML page, each from the compare layer's own tables and data: the workload view, max batch,
throughput, relative throughput, breakdowns, LLM edges, the frontier, scaling, scans and the guide.

No torch. Nothing is computed here a second time: the tables are build_report's, guide_tables', scan_rows', ...; the
charts are drawn (page_charts.py, page_memory_charts.py) from the data `report --charts` draws; the relative throughput
is built once per card that can be the reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from memprobe.compare.card_predictions import Prediction
from memprobe.compare.comparison import PUBLISHED, ReportError
from memprobe.compare.page_html import Sources, esc, heat_html, notes_html, table_html
from memprobe.compare.tables import Table
from memprobe.core.cards.catalog import Catalog, default_catalog
from memprobe.core.records.results import ScanResult


@dataclass
class PageOptions:
    """What shapes the page: the report's options (the reference selected first, precisions, --at-batch,
    published figures, predicted breakdowns) and the guide's (--budget, --gpu)."""

    reference: str | None = None
    precisions: Sequence[str] | None = None
    at_batch: str = "best"
    with_published: bool = False
    predicted: list | None = None
    budget: float | None = None
    only: Sequence[str] | None = None


@dataclass
class Section:
    """One section of the page: its anchor, heading and body (HTML)."""

    key: str
    title: str
    body: str


@dataclass
class Context:
    """What every section reads: the single-GPU results, the page's options, the sources, the workload labels (for
    the filters), the notes for the page's header, and the references offered."""

    single: list[tuple[Path, ScanResult]]
    options: PageOptions
    sources: Sources
    catalog: Catalog = field(default_factory=default_catalog)
    workloads: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    references: list[str] = field(default_factory=list)
    cited: set[str] = field(default_factory=set)
    labels: dict[int, str] = field(default_factory=dict)  # id(result) -> its workload's label
    _predictions: list[Prediction] | None = None

    def predictions(self) -> list[Prediction]:
        """Every workload and precision on every catalog card, from the scans' memory lines (computed once)."""
        if self._predictions is None:
            from memprobe.compare.card_predictions import memory_models, predictions

            self._predictions = predictions(memory_models(self.single, self.catalog)[0], self.catalog.cards)
        return self._predictions


CAPTIONS = {
    "max_batch": "Max batch by card memory, a panel per workload: measured (stars), predicted for every catalog card "
    "from the scans' memory lines (dots), published (open triangles, lower bounds). Hover a point for its value.",
    "throughput_vs_batch": "Throughput against batch (measured), a panel per workload: b* a star, B a cross, the knee a "
    "triangle. Hover a point for its value.",
    "memory_breakdown": "Where the memory goes at the peak of B, a panel per card: measured, and predicted (dashed "
    "outline, emulated) at the same batch where given. Hover a segment for its value.",
    "memory_vs_batch": "Memory against batch: the static part, the per-sample line, the allocator capacity, B and b*.",
    "frontier": "Batch x sequence-length frontier: measured (solid) and predicted (dashed). Hover a point.",
}


def view_section(ctx: Context) -> Section | None:
    """The workload view (page_view.py): every catalog card for the chosen workload and precision, published figures
    included as the guide includes them."""
    from memprobe.compare.comparison import build_comparison
    from memprobe.compare.curves import like_for_like
    from memprobe.compare.page_view import views_html
    from memprobe.compare.view_text import model_views

    try:
        comparison = build_comparison(ctx.single, with_published=True, catalog=ctx.catalog)
    except ReportError:
        return None
    basis = like_for_like(comparison)
    reference = ctx.options.reference
    try:
        from memprobe.compare.relative import resolve_reference

        reference = resolve_reference(comparison, reference) if reference else None
    except ReportError:
        reference = None  # the report's own check names it; the views open on their defaults
    views = model_views(ctx.single, basis.comparison, basis.label, ctx.predictions(), ctx.catalog, reference)
    for view in views:
        ctx.references += [r for r in view.references if r not in ctx.references]
        ctx.cited |= {s.source for row in view.rows for s in (row.batch, row.throughput) if s and s.origin == PUBLISHED}
    body = views_html(views, ctx.sources)
    return Section("answer", "Which card: one workload, every card ranked", body) if body else None


def report_sections(ctx: Context) -> list[Section]:
    """Max batch, throughput (at b*) and relative throughput: `memprobe report`'s tables, with their charts."""
    from memprobe.compare.max_batch_chart import batch_panels
    from memprobe.compare.page_charts import curve_chart, max_batch_chart
    from memprobe.compare.report import build_report

    o = ctx.options
    report = build_report(ctx.single, o.reference, o.precisions, o.with_published, o.at_batch)
    ctx.notes += [report.title] + report.notes
    tables = {t.key: t for t in report.tables}
    precisions = report.comparison.precisions()
    preds = [p for p in ctx.predictions() if p.precision in precisions]
    batch_chart = max_batch_chart(batch_panels(report.comparison, preds, ctx.catalog), CAPTIONS["max_batch"])
    speed_chart = curve_chart(report.comparison, CAPTIONS["throughput_vs_batch"])

    def shown(*keys: str) -> str:
        return "".join(table_html(tables[k], ctx.sources, workloads=ctx.workloads) for k in keys if k in tables)

    return [
        Section("max-batch", "Max batch", shown("max_batch") + batch_chart),
        Section(
            "throughput",
            "Throughput at each card's best batch b*",
            # a generation's prefill and decode tokens/s are the generation section's (page_generation.py)
            shown("throughput", "best_batch", "ranking") + speed_chart + shown("gains", "utilization"),
        ),
        Section("relative", "Relative throughput", _relative_views(ctx, report)),
    ]


def _relative_views(ctx: Context, report) -> str:
    """The relative-throughput table once per card that can be the reference, the report's chosen one shown."""
    from memprobe.compare.charts import relative_heat
    from memprobe.compare.curves import with_basis
    from memprobe.compare.heatmap import heat_colors
    from memprobe.compare.relative import relative_table, relative_throughput

    views = []
    for gpu in report.comparison.gpu_order:
        relative = relative_throughput(report.basis.comparison, gpu)
        if not relative.columns:
            continue  # no throughput to normalize to: not offered as a reference
        relative.basis = report.basis.label
        table = with_basis([relative_table(relative)], report.basis, report.comparison)[0]
        colors = {(r, c + 2): color for (r, c), color in heat_colors(relative_heat(relative)).items()}
        hidden = " data-default" if gpu == report.relative.reference else " hidden"
        inner = table_html(table, ctx.sources, colors, workloads=ctx.workloads)
        views.append(f'<div class="ref-view" data-ref="{esc(gpu)}"{hidden}>{inner}</div>')
        if gpu not in ctx.references:
            ctx.references.append(gpu)
    return (
        '<p class="hint">Choose the reference card above; every number below is memprobe\'s for that card. '
        "Blue: faster than the reference, red: slower (log scale); grey: out of memory.</p>"
        '<p class="no-ref" hidden>The card chosen has no throughput in these tables: shown relative to '
        f"{esc(report.relative.reference)}.</p>" + "".join(views)
    )


def breakdown_section(ctx: Context) -> Section | None:
    """`memprobe report --breakdown`: the memory at B by category, measured against predicted where given."""
    from memprobe.compare.breakdown import breakdown_parts
    from memprobe.compare.page_memory_charts import breakdown_chart, memory_lines_chart

    predicted = ctx.options.predicted
    parts = breakdown_parts([r for _p, r in ctx.single], predicted)
    if not parts:
        return None
    body = []
    for part, result in parts:
        if isinstance(part, str):
            body.append(f"<p>{esc(part)}</p>")
            continue
        source = ctx.sources.of(result)
        tags = f'data-workload="{esc(ctx.labels.get(id(result), result.workload.name))}" data-card="{esc(ctx.catalog.canonical(result.gpu_name()))}"'
        origin = f'<p class="from">{ctx.sources.link(source, esc(ctx.sources.name(source)))}</p>'
        body.append(f'<div class="part" {tags}>{table_html(part, ctx.sources)}{origin}</div>')
    charts = breakdown_chart(ctx.single, predicted, CAPTIONS["memory_breakdown"])
    charts += memory_lines_chart(ctx.single, predicted, CAPTIONS["memory_vs_batch"])
    return Section("breakdown", "Memory breakdown at B", charts + "".join(body))


def rows_table(key: str, title: str, rows: list[dict], notes: list[str], files: list[str]) -> Table:
    columns = list(rows[0]) if rows else []
    return Table(key, title, columns, [list(r.values()) for r in rows], notes, files)


def llm_section(ctx: Context) -> Section | None:
    """`memprobe report --llm`: max batch or length per memory-saving setting."""
    from memprobe.compare.llm import llm_entries

    entries = llm_entries([r for _p, r in ctx.single])
    if not entries:
        return None
    rows = [row for row, _r in entries]
    files = [ctx.sources.of(r) for _row, r in entries]
    table = rows_table("llm", "LLM edges per setting (measured)", rows, [], files)
    return Section("llm", "LLM edges", table_html(table, ctx.sources))


def frontier_section(ctx: Context, loaded: Sequence[tuple[Path, ScanResult]]) -> Section | None:
    """`memprobe report --frontier`: measured and predicted frontier points, and their chart."""
    from memprobe.compare.frontier import frontier_entries, frontier_files, frontier_rows
    from memprobe.compare.page_charts import frontier_chart

    rows = frontier_rows(loaded)
    if not rows:
        return None
    files = frontier_files(loaded)
    row_files = []
    for row in rows:
        found = files.get((row["workload"], row["gpu"], row["precision"]), {})
        row_files.append(str(found.get("measured") or found.get("predicted") or ""))
    notes = [
        f"{key[0]} {key[2]} on {key[1]}: "
        + "; ".join(f"{source} in {ctx.sources.name(str(path))}" for source, path in by.items())
        for key, by in files.items()
    ]
    table = rows_table("frontier", "Batch x sequence-length frontier", rows, notes, row_files)
    chart = frontier_chart(frontier_entries(loaded), CAPTIONS["frontier"])
    return Section("frontier", "Frontier: measured and predicted", table_html(table, ctx.sources) + chart)


def scaling_section(ctx: Context, multi: list[tuple[Path, ScanResult]]) -> Section | None:
    """The multi-GPU scaling table (and the published one with published figures), where multi-GPU files exist."""
    from memprobe.compare.published_scaling import published_scaling, published_scaling_rows
    from memprobe.compare.scaling import scaling_rows_table

    if not multi:
        return None
    single = [r for _p, r in ctx.single]
    body = table_html(scaling_rows_table([r for _p, r in multi], single, ctx.sources.of), ctx.sources)
    names = sorted({str(r.workload.name) for _p, r in multi})
    if ctx.options.with_published and published_scaling_rows(names):
        body += table_html(published_scaling(names), ctx.sources)
    return Section("scaling", "Multi-GPU scaling", body)


def scans_section(ctx: Context) -> Section | None:
    """`memprobe report --scans`: one row per GPU, workload and precision, from the newest file that finished it."""
    from memprobe.compare.scan_table import scan_entries, scan_notes, scan_rows

    results = [r for _p, r in ctx.single]
    precisions = ctx.options.precisions
    rows = scan_rows(results, newest_only=True, precisions=precisions)
    if not rows:
        return None
    files = [ctx.sources.of(r) for r, _name, _p in scan_entries(results, True, precisions)]
    notes = scan_notes(results, True, precisions)
    table = rows_table("scans", "Scans: proof, trials, throughput, b*, knee, MFU", rows, notes, files)
    return Section("scans", "Scans", table_html(table, ctx.sources))


def guide_section(ctx: Context) -> Section | None:
    """`memprobe guide`: the catalog, the max batch on every card, what a dollar and a watt buy, verdicts."""
    from memprobe.compare.charts import value_heat
    from memprobe.compare.comparison import build_comparison
    from memprobe.compare.curves import like_for_like
    from memprobe.compare.guide import guide_tables
    from memprobe.compare.heatmap import heat_colors

    o = ctx.options
    title, notes, tables = guide_tables(ctx.single, o.budget, only=o.only)
    body = f"<p>{esc(title)}. {esc(notes[0])}</p>"  # the legend; the other notes below the tables
    by_key = {t.key: t for t in tables}
    for key in ("verdicts", "predicted", "value"):
        if key in by_key:
            body += table_html(by_key[key], ctx.sources, workloads=ctx.workloads)
    try:  # the chart of throughput per 1000 USD, as `report --charts` draws it (at b*, like the value table)
        comparison = like_for_like(build_comparison(ctx.single, with_published=True)).comparison
        heat, _units = value_heat(comparison, ctx.catalog)
        if heat.cells:
            caption = f"{comparison.throughput_noun()} per 1000 USD of card price, at each card's best batch b*"
            body += heat_html(heat, heat_colors(heat), "value_heat", caption, heat.cards)
    except ReportError:
        pass  # nothing measured or published to price
    if "catalog" in by_key:
        body += table_html(by_key["catalog"], ctx.sources)
    if notes[1:]:
        body += f'<details class="about"><summary>Notes on the guide ({len(notes) - 1})</summary>'
        body += notes_html(notes[1:]) + "</details>"
    return Section("guide", "Guide: which card, at what batch, for what price", body)
