"""The HTML pieces of the report page: tables that sort and filter, heatmap tables, and the list of sources.

No torch. Every number comes from a compare Table or Heat as the text reports show it; a measured cell links to the
result file that measured it, listed under a name relative to the folder given (`shown_names`: never the writing
machine's absolute path). Rows, columns and cells carry the workload, precision and card they are about
(data-workload, data-precision, data-card), which the page's filters read.
"""

from __future__ import annotations

from html import escape
from pathlib import Path, PurePath
from typing import Any, Collection, Iterable, Mapping, Sequence

from memprobe.compare.comparison import file_kind, workload_labels
from memprobe.compare.heatmap import Heat
from memprobe.compare.published import SOURCES
from memprobe.compare.tables import Cell, Table
from memprobe.core.cards.catalog import PRECISIONS, default_catalog
from memprobe.core.records.results import ScanResult


def esc(value: Any) -> str:
    """Text for HTML, quotes too (it also goes into attributes)."""
    return escape(str(value), quote=True)


def environment_text(result: ScanResult) -> str:
    """The environment a result was measured in, in one line: GPU, driver, CUDA, torch."""
    env = result.environment
    parts = [result.gpu_name()]
    for label, value in (("driver", env.driver), ("CUDA", env.cuda_runtime), ("torch", env.torch)):
        if value:
            parts.append(f"{label} {value}")
    return ", ".join(parts)


def shown_names(files: Sequence[str | Path], given: Sequence[str | Path]) -> dict[str, str]:
    """The name each file is shown under: relative to the folder it was found in, after that folder's own name
    ("h100/x.json" for a file of `report /home/me/reports/h100`), or its name alone where it was given itself; never
    an absolute path. Where two files would share a name, each takes more of its folder's path until they differ."""
    roots = [Path(g).resolve() for g in given]
    parts: dict[str, tuple[str, ...]] = {}
    for f in files:
        real = Path(f).resolve()
        found = next((r for r in roots if real == r or r in real.parents), None)
        if found is None or found == real:
            parts[str(f)] = (real.name,)
        else:
            parts[str(f)] = ((found.name,) if found.name else ()) + real.relative_to(found).parts
    names = {f: PurePath(*p).as_posix() for f, p in parts.items()}
    for _ in range(64):  # widen clashing names one folder at a time (a path has fewer folders than this)
        count: dict[str, int] = {}
        for name in names.values():
            count[name] = count.get(name, 0) + 1
        clashing = [f for f, name in names.items() if count[name] > 1]
        if not clashing:
            break
        for f in clashing:
            real = Path(f).resolve()
            shown = len(parts[f])
            above = real.parts[1:-shown] if len(real.parts) > shown + 1 else ()
            if above:
                parts[f] = (above[-1],) + parts[f]
                names[f] = PurePath(*parts[f]).as_posix()
    return names


class Sources:
    """The result files on the page, numbered in the order given: cells link to #src-N, and the page lists them
    under their shown names (shown_names), with the published sources the page's figures cite."""

    def __init__(self, loaded: Sequence[tuple[Path, ScanResult]], given: Sequence[str | Path] = ()) -> None:
        self.loaded = list(loaded)
        self.number = {str(path): i + 1 for i, (path, _result) in enumerate(self.loaded)}
        self.results = {str(path): result for path, result in self.loaded}
        self.names = shown_names([p for p, _r in self.loaded], given or [Path(p).parent for p, _r in self.loaded])
        self._by_result = {id(result): str(path) for path, result in self.loaded}

    def of(self, result: ScanResult) -> str:
        """The path a result was read from ("" when it is not among the files)."""
        return self._by_result.get(id(result), "")

    def name(self, source: str) -> str:
        """The name a file is shown under (its own name when it is not among the files)."""
        return self.names.get(source, Path(source).name)

    def tip(self, source: str) -> str:
        """What hovering a linked figure says: what the file holds, its shown name and its environment."""
        result = self.results.get(source)
        if result is None:
            return f"from {Path(source).name}"
        return f"{file_kind(result)} in {self.name(source)} ({environment_text(result)})"

    def link(self, source: str, inner: str) -> str:
        """`inner` (HTML) linked to the source's entry in the list of files (which holds the hover text): a result
        file's number, or a published source's key; unlinked when unknown."""
        n = self.number.get(source)
        if n is not None:
            return f'<a class="src" href="#src-{n}" data-n="{n}">{inner}</a>'
        if source in SOURCES:
            return f'<a class="src" href="#pub-{esc(source)}" data-n="{esc(source)}">{inner}</a>'
        return inner

    def list_html(self) -> str:
        """The numbered list of result files with what each holds and its environment, each tagged with its
        workload and card for the filters."""
        labels, _notes = workload_labels([r for _p, r in self.loaded])
        catalog = default_catalog()
        items = []
        for i, ((path, result), label) in enumerate(zip(self.loaded, labels), 1):
            precisions = ", ".join(f"{n} {p.status}" for n, p in result.precisions.items()) or "no precision"
            kind = file_kind(result)
            card = catalog.canonical(result.gpu_name())
            items.append(
                f'<li id="src-{i}" value="{i}" data-workload="{esc(label)}" data-card="{esc(card)}" '
                f'data-tip="{esc(self.tip(str(path)))}"><code>{esc(self.name(str(path)))}</code> '
                f'<span class="kind kind-{kind}">{kind}</span><br>{esc(result.workload.name)} '
                f"({esc(result.mode)}; {esc(precisions)}), {esc(result.created)}; {esc(environment_text(result))}</li>"
            )
        return '<ol class="sources">' + "".join(items) + "</ol>"


def published_html(keys: Iterable[str]) -> str:
    """The published sources a page cites, each with its anchor (#pub-KEY) and citation."""
    items = [
        f'<li id="pub-{esc(k)}" data-tip="{esc(SOURCES.get(k, k))}"><code>{esc(k)}</code>: {esc(SOURCES.get(k, k))}</li>'
        for k in sorted(set(keys))
    ]
    return f'<ul class="sources">{"".join(items)}</ul>' if items else ""


def column_meta(name: str, workloads: Collection[str] = ()) -> tuple[str, str]:
    """(precision, workload) a column is about, from its name: "fp16", "fp16 MFU", "resnet50 fp16", or a workload's
    own name (one of `workloads`); ("", "") for a column about neither (the page's filters hide columns by these)."""
    if name in workloads:
        return "", name
    words = name.split(" ")
    if words[0] in PRECISIONS:
        return words[0], ""
    if len(words) > 1 and words[-1] in PRECISIONS:
        return words[-1], " ".join(words[:-1])
    return "", ""


LONG = 48  # characters: a cell longer than this wraps on the page, shorter ones stay on one line

# A row's workload, precision and card come from its own columns of these names.
ROW_KEYS = {
    "workload": "workload",
    "model": "workload",
    "precision": "precision",
    "GPU": "card",
    "gpu": "card",
    "card": "card",
}


def _cell_html(cell: Any, sources: Sources, color: tuple[str, str] | None, attrs: str = "") -> str:
    """One <td>: its text, and for a Cell its number (data-value, for sorting), origin (class) and file (link)."""
    text = esc(cell).replace("\n", "<br>")
    if len(str(cell)) > LONG:
        attrs += ' class="long"' if not isinstance(cell, Cell) else ""
    if isinstance(cell, Cell):
        if cell.value is not None:
            attrs += f' data-value="{cell.value:.7g}"'
        attrs += f' class="o-{esc(cell.origin)}"'
        if cell.source:
            text = sources.link(cell.source, text)
    if color is not None:
        attrs += f' style="background:{color[0]};color:{color[1]}"'
    return f"<td{attrs}>{text}</td>"


def table_html(
    table: Table,
    sources: Sources,
    colors: Mapping[tuple[int, int], tuple[str, str]] | None = None,
    caption: bool = True,
    workloads: Collection[str] = (),
) -> str:
    """A Table as a sortable HTML table with its notes: columns and rows carry the precision, workload and card they
    are about (data-precision, data-workload, data-card) for the page's filters; a measured cell links to its result
    file, and a table whose rows are files (Table.sources) gets a column linking each row's. `colors` paints cells
    (row, column) as a heatmap; `workloads` are the labels a column may be named after."""
    metas = [column_meta(c, workloads) for c in table.columns]
    row_keys = {i: ROW_KEYS[c] for i, c in enumerate(table.columns) if c in ROW_KEYS}
    head = [
        f"<th{_data('precision', precision)}{_data('workload', workload)}>{esc(column)}</th>"
        for column, (precision, workload) in zip(table.columns, metas)
    ]
    if table.sources:
        head.append("<th>result file</th>")
    body = []
    for r, row in enumerate(table.rows):
        meta = {key: str(row[i]) for i, key in row_keys.items() if i < len(row)}
        cells = [_cell_html(cell, sources, (colors or {}).get((r, c))) for c, cell in enumerate(row)]
        if table.sources:
            source = table.sources[r] if r < len(table.sources) else ""
            cells.append(f"<td>{sources.link(source, '[' + str(sources.number.get(source, '-')) + ']')}</td>")
        tags = "".join(_data(k, meta.get(k, "")) for k in ("precision", "workload", "card"))
        body.append(f"<tr{tags}>" + "".join(cells) + "</tr>")
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


def heat_html(
    heat: Heat,
    colors: Mapping[tuple[int, int], tuple[str, str]],
    key: str,
    caption: str,
    cards: Sequence[str] = (),
) -> str:
    """A Heat (compare.heatmap) as a colored HTML table: workload groups above their precision columns, a row per
    card (tagged with `cards`, one per row, for the filters), each cell its number, colored as the chart colors it
    (the page's script says, on hover, the row, column and origin it is)."""
    groups = "".join(
        f'<th colspan="{last - first + 1}" data-workload="{esc(group)}">{esc(group)}</th>'
        for group, first, last in heat.groups()
    )
    labels = "".join(
        f'<th data-workload="{esc(group)}"{_data("precision", label.splitlines()[0])}>'
        f"{esc(label).replace(chr(10), '<br>')}</th>"
        for group, label in heat.columns
    )
    body = []
    for r, (label, origin) in enumerate(heat.rows):
        cells = [f'<th class="o-{esc(origin)}">{esc(label)}</th>']
        for c in range(len(heat.columns)):
            cell = heat.cells.get((r, c))
            if cell is None:
                cells.append("<td>-</td>")
                continue
            fill, ink = colors.get((r, c), ("#ffffff", "black"))
            cells.append(
                f'<td class="o-{esc(cell.origin)}" style="background:{fill};color:{ink}" '
                f'data-value="{cell.value:.6g}">{esc(cell.text)}</td>'
            )
        card = _data("card", cards[r]) if r < len(cards) else ""
        body.append(f"<tr{card}>" + "".join(cells) + "</tr>")
    return (
        f'<div class="table-wrap"><table class="heat" data-table="{esc(key)}"><caption>{esc(caption)}</caption>'
        f"<thead><tr><th></th>{groups}</tr><tr><th></th>{labels}</tr></thead><tbody>{''.join(body)}</tbody>"
        "</table></div>"
    )
