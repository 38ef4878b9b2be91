"""`memprobe report --html` and `guide --html`: one self-contained page holding the report, the guide and the rest.

No torch. The page is assembled from the compare layer's own tables and charts (build_report, guide_tables,
scan_entries, llm_entries, breakdown_parts, frontier_rows, scaling_rows_table, chart_figures): no figure is
computed here a second time. The relative throughput is built once per possible reference card, so choosing a
card in the page shows numbers memprobe computed, never numbers the page's script derived. Styles, script and
charts are inline and a Content-Security-Policy forbids fetching anything: the page works offline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO, Sequence

from memprobe.compare.chart_layout import collecting_tips
from memprobe.compare.comparison import ReportError
from memprobe.compare.page_html import Sources, esc, heat_html, notes_html, svg_html, table_html
from memprobe.compare.tables import Table
from memprobe.core.catalog import PRECISIONS
from memprobe.core.outputs import OutputError, atomic_write
from memprobe.core.results import ScanResult

CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"


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


def check_page_path(path: str | Path) -> Path:
    """Before any work: the page's folder exists or can be made and written, and `path` is no folder. Raises
    OutputError (one line)."""
    from memprobe.core.outputs import prepare_dir

    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{path} is a folder, not a file for the page")
    prepare_dir(path.parent if str(path.parent) else ".", suffixes=(".html",))
    return path


def write_page(path: str | Path, html: str) -> Path:
    """Write the page atomically (a temporary file renamed over `path`: never half a page). Raises OutputError."""

    # A file name that is not UTF-8 (os.fsdecode keeps its bytes as lone surrogates) is shown with U+FFFD for them
    html = html.encode("utf-8", "surrogateescape").decode("utf-8", "replace")

    def fill(handle: IO[str]) -> None:
        handle.write(html)

    try:
        return atomic_write(path, fill)
    except OutputError:
        raise  # names the file and the reason already (a full disk, a link loop)
    except OSError as exc:
        raise OutputError(f"cannot write {path} ({exc.strerror or type(exc).__name__})") from None


def build_page(loaded: Sequence[tuple[Path, ScanResult]], options: PageOptions | None = None) -> str:
    """The page for the (path, result) pairs given, as HTML text (with none, the guide's catalog alone). Raises
    ReportError when the reference card is not among the results, ValueError for a negative budget."""
    from memprobe.compare.scaling import split_by_world_size

    options = options or PageOptions()
    sources = Sources(loaded)
    single, multi = split_by_world_size(list(loaded))
    results = [r for _p, r in single]
    sections: list[Section] = []
    notes: list[str] = []
    if single or options.with_published:
        sections += _report_sections(single, options, sources, notes)
    sections += [s for s in (_breakdown(single, options, sources), _llm(results, sources)) if s]
    sections += [s for s in (_frontier(loaded, sources), _scaling(multi, results, options, sources)) if s]
    sections += [s for s in (_scans(results, options, sources), _guide(single, options, sources)) if s]
    sections.append(Section("sources", "Result files", _sources_intro() + sources.list_html()))
    return _document(sections, notes, len(loaded), options)


def _report_sections(
    single: list[tuple[Path, ScanResult]], options: PageOptions, sources: Sources, notes: list[str]
) -> list[Section]:
    """Max batch, throughput and relative throughput: `memprobe report`'s tables and charts."""
    from memprobe.compare.charts import chart_figures, relative_heat
    from memprobe.compare.curves import with_basis
    from memprobe.compare.heatmap import heat_colors
    from memprobe.compare.relative import relative_table, relative_throughput
    from memprobe.compare.report import build_report

    report = build_report(single, options.reference, options.precisions, options.with_published, options.at_batch)
    notes += [report.title] + report.notes
    tables = {t.key: t for t in report.tables}
    with collecting_tips() as tips:
        charts = {
            name: svg_html(fig, tips, name, CAPTIONS[name])
            for name, fig in chart_figures(
                report.comparison,
                report.relative,
                single,
                predicted=options.predicted,
                names=("max_batch", "throughput_vs_batch"),
            )
        }
    views = []
    for gpu in report.comparison.gpu_order:
        relative = relative_throughput(report.basis.comparison, gpu)
        if not relative.columns:
            continue  # no throughput to normalize to: not offered as a reference
        relative.basis = report.basis.label
        table = with_basis([relative_table(relative)], report.basis, report.comparison)[0]
        colors = {(r, c + 2): color for (r, c), color in heat_colors(relative_heat(relative)).items()}
        hidden = "" if gpu == report.relative.reference else " hidden"
        views.append(f'<div class="ref-view" data-ref="{esc(gpu)}"{hidden}>{table_html(table, sources, colors)}</div>')

    def shown(*keys: str) -> str:
        return "".join(table_html(tables[k], sources) for k in keys if k in tables)

    return [
        Section("max-batch", "Max batch", shown("max_batch") + charts.get("max_batch", "")),
        Section(
            "throughput",
            "Throughput",
            shown("throughput", "best_batch", "ranking")
            + charts.get("throughput_vs_batch", "")
            + shown("gains", "utilization"),
        ),
        Section(
            "relative",
            "Relative throughput",
            '<p class="hint">Choose the reference card above; every number below is memprobe\'s for that card. '
            "Blue: faster than the reference, red: slower (log scale); grey: out of memory.</p>" + "".join(views),
        ),
    ]


CAPTIONS = {
    "max_batch": "Max batch by card memory: measured (stars), predicted for every catalog card from the scans' "
    "memory lines (dots), published (triangles, lower bounds). Hover a point for its value.",
    "throughput_vs_batch": "Throughput against batch (measured): b* starred, B crossed, the knee a triangle. "
    "Hover a point for its value.",
    "memory_breakdown": "Where the memory goes at the peak of B: measured, and predicted (hatched, emulated) at the "
    "same batch where given. Hover a segment for its value.",
    "memory_vs_batch": "Memory against batch: the static part, the per-sample line, the allocator capacity, B and b*.",
    "frontier": "Batch x sequence-length frontier: measured (solid) and predicted (dashed). Hover a point.",
}


def _breakdown(single: list[tuple[Path, ScanResult]], options: PageOptions, sources: Sources) -> Section | None:
    """`memprobe report --breakdown`: the memory at B by category, measured against predicted where given."""
    from memprobe.compare.breakdown import breakdown_parts
    from memprobe.compare.breakdown_chart import breakdown_figures

    parts = breakdown_parts([r for _p, r in single], options.predicted)
    if not parts:
        return None
    body = []
    for part, result in parts:
        source = sources.of(result)
        origin = f'<p class="from">{sources.link(source, esc(Path(source).name))}</p>'
        body.append(f"<p>{esc(part)}</p>" if isinstance(part, str) else table_html(part, sources) + origin)
    with collecting_tips() as tips:  # the charts `report --charts` draws from these results
        charts = "".join(
            svg_html(fig, tips, name, CAPTIONS[name]) for name, fig in breakdown_figures(single, options.predicted)
        )
    return Section("breakdown", "Memory breakdown at B", charts + "".join(body))


def _rows_table(key: str, title: str, rows: list[dict], notes: list[str], files: list[str]) -> Table:
    columns = list(rows[0]) if rows else []
    return Table(key, title, columns, [list(r.values()) for r in rows], notes, files)


def _llm(results: list[ScanResult], sources: Sources) -> Section | None:
    """`memprobe report --llm`: max batch or length per memory-saving setting."""
    from memprobe.compare.llm import llm_entries

    entries = llm_entries(results)
    if not entries:
        return None
    rows = [row for row, _r in entries]
    files = [sources.of(r) for _row, r in entries]
    table = _rows_table("llm", "LLM edges per setting (measured)", rows, [], files)
    return Section("llm", "LLM edges", table_html(table, sources))


def _frontier(loaded: Sequence[tuple[Path, ScanResult]], sources: Sources) -> Section | None:
    """`memprobe report --frontier`: measured and predicted frontier points, and their chart."""
    from memprobe.compare.frontier import frontier_entries, frontier_figure, frontier_files, frontier_rows

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
        + "; ".join(f"{source} in {Path(str(path)).name}" for source, path in by.items())
        for key, by in files.items()
    ]
    table = _rows_table("frontier", "Batch x sequence-length frontier", rows, notes, row_files)
    with collecting_tips() as tips:
        chart = svg_html(frontier_figure(frontier_entries(loaded)), tips, "frontier", CAPTIONS["frontier"])
    return Section("frontier", "Frontier: measured and predicted", table_html(table, sources) + chart)


def _scaling(
    multi: list[tuple[Path, ScanResult]], single: list[ScanResult], options: PageOptions, sources: Sources
) -> Section | None:
    """The multi-GPU scaling table (and the published one with published figures), where multi-GPU files exist."""
    from memprobe.compare.published_scaling import published_scaling, published_scaling_rows
    from memprobe.compare.scaling import scaling_rows_table

    if not multi:
        return None
    body = table_html(scaling_rows_table([r for _p, r in multi], single, sources.of), sources)
    names = sorted({str(r.workload.name) for _p, r in multi})
    if options.with_published and published_scaling_rows(names):
        body += table_html(published_scaling(names), sources)
    return Section("scaling", "Multi-GPU scaling", body)


def _scans(results: list[ScanResult], options: PageOptions, sources: Sources) -> Section | None:
    """`memprobe report --scans`: one row per GPU, workload and precision, from the newest file that finished it."""
    from memprobe.compare.scan_table import scan_entries, scan_notes, scan_rows

    rows = scan_rows(results, newest_only=True, precisions=options.precisions)
    if not rows:
        return None
    files = [sources.of(r) for r, _name, _p in scan_entries(results, True, options.precisions)]
    notes = scan_notes(results, True, options.precisions)
    table = _rows_table("scans", "Scans: proof, trials, throughput, b*, knee, MFU", rows, notes, files)
    return Section("scans", "Scans", table_html(table, sources))


def _guide(single: list[tuple[Path, ScanResult]], options: PageOptions, sources: Sources) -> Section | None:
    """`memprobe guide`: the catalog, the max batch on every card, what a dollar and a watt buy, verdicts."""
    from memprobe.compare.charts import value_heat
    from memprobe.compare.comparison import build_comparison
    from memprobe.compare.curves import like_for_like
    from memprobe.compare.guide import guide_tables
    from memprobe.compare.heatmap import heat_colors
    from memprobe.core.catalog import default_catalog

    title, notes, tables = guide_tables(single, options.budget, only=options.only)
    body = f"<p>{esc(title)}. {esc(notes[0])}</p>"  # the legend; the other notes below the tables
    by_key = {t.key: t for t in tables}
    for key in ("verdicts", "predicted", "value"):
        if key in by_key:
            body += table_html(by_key[key], sources)
    try:  # the chart of throughput per 1000 USD, as `report --charts` draws it
        comparison = like_for_like(build_comparison(single, with_published=True)).comparison
        heat, _units = value_heat(comparison, default_catalog())
        if heat.cells:
            body += heat_html(heat, heat_colors(heat), "value_heat", "Training throughput per 1000 USD of card price")
    except ReportError:
        pass  # nothing measured or published to price
    if "catalog" in by_key:
        body += table_html(by_key["catalog"], sources)
    if notes[1:]:
        body += f'<details class="about"><summary>Notes on the guide ({len(notes) - 1})</summary>'
        body += notes_html(notes[1:]) + "</details>"
    return Section("guide", "Guide: which card, at what batch, for what price", body)


def _sources_intro() -> str:
    return (
        "<p>Every measured figure on this page links to the result file that measured it (its number here); "
        "hover it to read the file and its environment.</p>"
    )


def _asset(name: str) -> str:
    return (resources.files("memprobe") / "data" / "page" / name).read_text(encoding="utf-8")


def _choices(body: str, attribute: str, order: Sequence[str] = ()) -> list[str]:
    """The values of data-`attribute` on the page, in `order` first, then as they come."""
    found = list(dict.fromkeys(re.findall(rf'data-{attribute}="([^"]*)"', body)))
    return [v for v in order if v in found] + [v for v in found if v not in order]


def _document(sections: list[Section], notes: list[str], files: int, options: PageOptions) -> str:
    """The whole page: head with the inline style, controls, table of contents, sections and the inline script."""
    from memprobe import __version__

    body = "".join(f'<section id="{s.key}"><h2>{esc(s.title)}</h2>{s.body}</section>' for s in sections if s.body)
    refs = _choices(body, "ref")  # values read back from the page: already escaped, written as they are
    chosen = re.search(r'<div class="ref-view" data-ref="([^"]*)">', body)
    selected = chosen.group(1) if chosen else ""
    options_html = "".join(f'<option value="{r}"{" selected" if r == selected else ""}>{r}</option>' for r in refs)
    wanted = set(options.precisions or PRECISIONS)

    def boxes(name: str, values: list[str], on: set[str] | None = None) -> str:
        return "".join(
            f'<label><input type="checkbox" name="{name}" value="{v}"{"" if on and v not in on else " checked"}> '
            f"{v}</label>"
            for v in values
        )

    controls = (
        '<form class="controls" id="controls" onsubmit="return false">'
        + (f'<label class="ref">Reference card <select id="reference">{options_html}</select></label>' if refs else "")
        + f'<fieldset id="precisions"><legend>Precision</legend>{boxes("precision", _choices(body, "precision", PRECISIONS), wanted)}</fieldset>'
        + '<fieldset id="workloads"><legend>Workloads <button type="button" data-all="1">all</button> '
        + f'<button type="button" data-all="0">none</button></legend>{boxes("workload", _choices(body, "workload"))}'
        + "</fieldset></form>"
    )
    toc = "".join(f'<li><a href="#{s.key}">{esc(s.title)}</a></li>' for s in sections if s.body)
    title = "memprobe: max batch, throughput and GPU guidance"
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_asset('page.css')}</style></head><body>"
        f"<header><h1>{esc(title)}</h1><p>{files} result file(s); written by memprobe {esc(__version__)}. "
        "Unmarked figures are measured by memprobe on a real card; (pred) predicted, (pub) published elsewhere, "
        "emulated = a smaller card emulated on a larger one (scan --memory-cap).</p>"
        f'{controls}<nav class="toc"><ul>{toc}</ul></nav>'
        f'<details class="about"><summary>Notes on these numbers</summary>{notes_html(notes)}</details></header>'
        f"<main>{body}</main><script>{_asset('page.js')}</script></body></html>\n"
    )
