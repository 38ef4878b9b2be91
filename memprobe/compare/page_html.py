"""The HTML pieces of the report page: tables that sort and filter, inline SVG charts with hover texts, sources.

No torch. Everything is inline (no network when the page is opened): charts are matplotlib's SVG written into
the page, each chart's ids made its own so several can share one document. Every number comes from a compare
Table or Heat as the text reports show it; a measured cell links to the result file that measured it.
"""

from __future__ import annotations

import io
import re
from html import escape
from pathlib import Path
from typing import Any, Iterable, Sequence

from memprobe.compare.chart_layout import TIP_ID
from memprobe.compare.comparison import MEASURED
from memprobe.compare.heatmap import Heat
from memprobe.compare.tables import Cell, Table
from memprobe.core.catalog import PRECISIONS
from memprobe.core.memcap import is_emulated
from memprobe.core.results import ScanResult

PREDICTED_FILE, EMULATED = "predicted", "emulated"


def esc(value: Any) -> str:
    """Text for HTML, quotes too (it also goes into attributes)."""
    return escape(str(value), quote=True)


def file_kind(result: ScanResult) -> str:
    """What a result file holds: measured on a real card, emulated (scan --memory-cap) or predicted (memprobe
    predict); the page labels every figure with it."""
    gpu = result.environment.gpu
    if gpu is not None and gpu.predicted:
        return PREDICTED_FILE
    return EMULATED if is_emulated(result.gpu_name()) else MEASURED


def environment_text(result: ScanResult) -> str:
    """The environment a result was measured in, in one line: GPU, driver, CUDA, torch."""
    env = result.environment
    parts = [result.gpu_name()]
    for label, value in (("driver", env.driver), ("CUDA", env.cuda_runtime), ("torch", env.torch)):
        if value:
            parts.append(f"{label} {value}")
    return ", ".join(parts)


class Sources:
    """The result files on the page, numbered in the order given: cells link to #src-N, and the page lists them."""

    def __init__(self, loaded: Sequence[tuple[Path, ScanResult]]) -> None:
        self.loaded = list(loaded)
        self.number = {str(path): i + 1 for i, (path, _result) in enumerate(self.loaded)}
        self.results = {str(path): result for path, result in self.loaded}

    def of(self, result: ScanResult) -> str:
        """The path a result was read from ("" when it is not among the files)."""
        return next((str(path) for path, r in self.loaded if r is result), "")

    def tip(self, source: str) -> str:
        """What hovering a linked figure says: what the file holds, its name and its environment."""
        result = self.results.get(source)
        if result is None:
            return f"from {source}"
        return f"{file_kind(result)} in {Path(source).name} ({environment_text(result)})"

    def link(self, source: str, inner: str) -> str:
        """`inner` (HTML) linked to the source's entry in the list of result files; unlinked when unknown."""
        n = self.number.get(source)
        if n is None:
            return inner
        return f'<a class="src" href="#src-{n}" data-n="{n}" data-tip="{esc(self.tip(source))}">{inner}</a>'

    def list_html(self) -> str:
        """The numbered list of result files with what each holds and its environment."""
        items = []
        for i, (path, result) in enumerate(self.loaded, 1):
            precisions = ", ".join(f"{n} {p.status}" for n, p in result.precisions.items()) or "no precision"
            items.append(
                f'<li id="src-{i}" value="{i}"><code>{esc(path)}</code> <span class="kind kind-{file_kind(result)}">'
                f"{file_kind(result)}</span><br>{esc(result.workload.name)} "
                f"({esc(result.mode)}; {esc(precisions)}), {esc(result.created)}; "
                f"{esc(environment_text(result))}</li>"
            )
        return '<ol class="sources">' + "".join(items) + "</ol>"


def column_meta(name: str) -> tuple[str, str]:
    """(precision, workload) a column is about, from its name: "fp16", "fp16 MFU", "resnet50 fp16"; ("", "")
    for a column about neither (the page's filters hide columns by these)."""
    words = name.split(" ")
    if words[0] in PRECISIONS:
        return words[0], ""
    if len(words) > 1 and words[-1] in PRECISIONS:
        return words[-1], " ".join(words[:-1])
    return "", ""


ROW_KEYS = {"workload": "workload", "model": "workload", "precision": "precision"}


def _cell_html(cell: Any, sources: Sources, color: tuple[str, str] | None) -> str:
    """One <td>: its text, and for a Cell its number (data-value, for sorting), origin (class) and file (link)."""
    attrs = ""
    text = esc(cell).replace("\n", "<br>")
    if isinstance(cell, Cell):
        if cell.value is not None:
            attrs += f' data-value="{cell.value:.10g}"'
        attrs += f' class="o-{esc(cell.origin)}"'
        if cell.source:
            text = sources.link(cell.source, text)
    if color is not None:
        attrs += f' style="background:{color[0]};color:{color[1]}"'
    return f"<td{attrs}>{text}</td>"


def table_html(
    table: Table,
    sources: Sources,
    colors: dict[tuple[int, int], tuple[str, str]] | None = None,
    caption: bool = True,
) -> str:
    """A Table as a sortable HTML table with its notes: columns and rows carry the precision and workload they are
    about (data-precision, data-workload) for the page's filters; a measured cell links to its result file, and
    a table whose rows are files (Table.sources) gets a column linking each row's. `colors` paints cells
    (row, column) as a heatmap."""
    metas = [column_meta(c) for c in table.columns]
    row_keys = {i: ROW_KEYS[c] for i, c in enumerate(table.columns) if c in ROW_KEYS}
    head = []
    for column, (precision, workload) in zip(table.columns, metas):
        head.append(
            f"<th{_data('precision', precision)}{_data('workload', workload)}>"
            f'<button type="button" class="sort">{esc(column)}</button></th>'
        )
    if table.sources:
        head.append('<th><button type="button" class="sort">result file</button></th>')
    body = []
    for r, row in enumerate(table.rows):
        # a row's precision and workload come from its own columns ("precision", "workload" or "model")
        meta = {key: str(row[i]) for i, key in row_keys.items() if i < len(row)}
        cells = [_cell_html(cell, sources, (colors or {}).get((r, c))) for c, cell in enumerate(row)]
        if table.sources:
            source = table.sources[r] if r < len(table.sources) else ""
            cells.append(f"<td>{sources.link(source, '[' + str(sources.number.get(source, '-')) + ']')}</td>")
        body.append(
            f"<tr{_data('precision', meta.get('precision', ''))}{_data('workload', meta.get('workload', ''))}>"
            + "".join(cells)
            + "</tr>"
        )
    title = f"<caption>{esc(table.title)}</caption>" if caption else ""
    rows_html = "".join(body) if body else f'<tr><td colspan="{len(head)}">(no rows)</td></tr>'
    return (
        f'<div class="table-wrap"><table class="data" data-table="{esc(table.key)}">{title}'
        f"<thead><tr>{''.join(head)}</tr></thead><tbody>{rows_html}</tbody></table></div>" + notes_html(table.notes)
    )


def _data(name: str, value: str) -> str:
    return f' data-{name}="{esc(value)}"' if value else ""


def notes_html(notes: Iterable[str]) -> str:
    """Notes under a table or section, as the text reports print them (one line each)."""
    items = [f"<li>{esc(n.strip())}</li>" for n in notes if n.strip()]
    return f'<ul class="notes">{"".join(items)}</ul>' if items else ""


def heat_html(heat: Heat, colors: dict[tuple[int, int], tuple[str, str]], key: str, caption: str) -> str:
    """A Heat (compare.heatmap) as a colored HTML table: workload groups above their precision columns, a row
    per card, each cell its number, colored as the chart colors it; hovering a cell says what it is."""
    groups = "".join(f'<th colspan="{last - first + 1}">{esc(group)}</th>' for group, first, last in heat.groups())
    labels = "".join(f"<th>{esc(label).replace(chr(10), '<br>')}</th>" for _group, label in heat.columns)
    body = []
    for r, (label, origin) in enumerate(heat.rows):
        cells = [f'<th class="o-{esc(origin)}">{esc(label)}</th>']
        for c, (group, column) in enumerate(heat.columns):
            cell = heat.cells.get((r, c))
            if cell is None:
                cells.append("<td>-</td>")
                continue
            fill, ink = colors.get((r, c), ("#ffffff", "black"))
            what = f"{label}, {group} {column.splitlines()[0]}: {cell.text} ({cell.origin})"
            cells.append(
                f'<td class="o-{esc(cell.origin)}" style="background:{fill};color:{ink}" '
                f'data-value="{cell.value:.10g}" data-tip="{esc(what)}">{esc(cell.text)}</td>'
            )
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<div class="table-wrap"><table class="heat" data-table="{esc(key)}"><caption>{esc(caption)}</caption>'
        f"<thead><tr><th></th>{groups}</tr><tr><th></th>{labels}</tr></thead><tbody>{''.join(body)}</tbody>"
        "</table></div>"
    )


_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r'(href="#|url\(#)([^")]+)')


def svg_html(fig: Any, tips: Sequence[str], name: str, caption: str) -> str:
    """A matplotlib Figure as an inline <figure>: its SVG (text kept as text), ids prefixed with `name` so charts
    do not share ids, hover targets (chart_layout.tip) given their texts, and sized to the page's width."""
    from matplotlib import rc_context

    fig.draw_without_rendering()
    fig.set_layout_engine("none")
    out = io.StringIO()
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "memprobe"}):
        fig.savefig(out, format="svg", metadata={"Date": None})
    svg = out.getvalue()
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)
    svg = re.sub(r"\n[ \t]+", "\n", svg)  # matplotlib's indentation: a sixth of a chart, and never read

    def named(match: re.Match[str]) -> str:
        ident = match.group(1)
        if ident.startswith(TIP_ID):
            text = tips[int(ident[len(TIP_ID) :])]
            return f'id="{name}-{ident}" class="tip" data-tip="{esc(text)}"'
        return f'id="{name}-{ident}"'

    svg = _ID.sub(named, svg)
    svg = _REF.sub(lambda m: f"{m.group(1)}{name}-{m.group(2)}", svg)
    width = re.search(r'<svg[^>]*\bwidth="([\d.]+)pt"', svg)
    natural = f"max-width:{float(width.group(1)) * 4 / 3:.0f}px" if width else ""
    svg = re.sub(
        r'<svg([^>]*?) width="[\d.]+pt" height="[\d.]+pt"',
        lambda m: f'<svg{m.group(1)} width="100%" style="{natural}" role="img" aria-label="{esc(caption)}"',
        svg,
        count=1,
    )
    return f'<figure class="chart" id="chart-{esc(name)}">{svg}<figcaption>{esc(caption)}</figcaption></figure>'
