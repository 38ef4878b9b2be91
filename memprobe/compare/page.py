"""`memprobe report --html` and `guide --html`: one self-contained page holding the report, the guide and the rest.

No torch. The page opens on one workload's answer (every card ranked, page_view.py), then the report's sections, the
guide and the list of sources (page_sections.py): every table is the compare layer's own, every chart drawn from the
data `report --charts` draws, and no figure is computed here a second time. Workload, precision and card filters apply
to every section, charts included. Files are named relative to the folders given, never by the writing machine's
absolute path. Styles, script and charts are inline and a Content-Security-Policy forbids fetching anything: the page
works offline, mailed or printed.
"""

from __future__ import annotations

import html
import re
from importlib import resources
from pathlib import Path
from typing import IO, Sequence

from memprobe.compare.comparison import workload_labels
from memprobe.compare.page_generation import generation_section
from memprobe.compare.page_html import Sources, esc, notes_html, published_html
from memprobe.compare.page_sections import (
    Context,
    PageOptions,
    Section,
    breakdown_section,
    frontier_section,
    guide_section,
    llm_section,
    report_sections,
    scaling_section,
    scans_section,
    view_section,
)
from memprobe.core.cards.catalog import PRECISIONS
from memprobe.core.files.outputs import OutputError, atomic_write
from memprobe.core.records.results import ScanResult

CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"


def check_page_path(path: str | Path) -> Path:
    """Before any work: the page's folder exists or can be made and written, and `path` is no folder. Raises
    OutputError (one line)."""
    from memprobe.core.files.outputs import prepare_dir

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


def build_page(
    loaded: Sequence[tuple[Path, ScanResult]], options: PageOptions | None = None, given: Sequence[str | Path] = ()
) -> str:
    """The page for the (path, result) pairs given, as HTML text (with none, the guide's catalog alone); `given` are
    the files and folders they were found in (the page names files relative to them). Raises ReportError when the
    reference card is not among the results, ValueError for a negative budget."""
    from memprobe.compare.scaling import split_by_world_size

    options = options or PageOptions()
    single, multi = split_by_world_size(list(loaded))
    labels, _notes = workload_labels([r for _p, r in single])
    ctx = Context(single, options, Sources(loaded, given))
    ctx.workloads = set(labels)
    ctx.labels = {id(r): label for (_p, r), label in zip(single, labels)}
    sections: list[Section] = []
    if single or options.with_published:
        report = report_sections(ctx)  # first: it raises for an unknown reference card before any other work
        sections += [s for s in (view_section(ctx),) if s] + report
    sections += [s for s in (generation_section(ctx), breakdown_section(ctx), llm_section(ctx)) if s]
    sections += [s for s in (frontier_section(ctx, loaded),) if s]
    sections += [s for s in (scaling_section(ctx, multi), scans_section(ctx), guide_section(ctx)) if s]
    sources = _sources_intro() + ctx.sources.list_html()
    if ctx.cited:
        sources += "<p>Published sources cited:</p>" + published_html(ctx.cited)
    sections.append(Section("sources", "Sources", sources))
    return _document(sections, ctx, len(loaded))


def _sources_intro() -> str:
    return (
        "<p>Every measured figure on this page links to the result file that measured it (its number here), a "
        "predicted max batch to the file whose memory line predicted it, a published figure to its publication; "
        "hover the link to read the file and its environment. Files are named relative to the folders given.</p>"
    )


def _asset(name: str) -> str:
    return (resources.files("memprobe") / "data" / "page" / name).read_text(encoding="utf-8")


def _boxes(name: str, values: Sequence[str], on: set[str] | None = None) -> str:
    return "".join(
        f'<label><input type="checkbox" name="{name}" value="{esc(v)}"{"" if on and v not in on else " checked"}> '
        f"{esc(v)}</label>"
        for v in values
    )


def _all_none(what: str) -> str:
    return f'{what} <button type="button" data-all="1">all</button> <button type="button" data-all="0">none</button>'


def _choices(body: str, attribute: str, order: Sequence[str] = ()) -> list[str]:
    """The values of data-`attribute` on the page (unescaped), in `order` first, then as they come."""
    found = [html.unescape(v) for v in dict.fromkeys(re.findall(rf'data-{attribute}="([^"]*)"', body))]
    return [v for v in order if v in found] + [v for v in found if v not in order]


def _controls(ctx: Context, body: str) -> str:
    """The reference card, and the precision, workload and card filters that every section obeys (their choices:
    what the page's sections are about)."""
    chosen = (ctx.options.reference or "").casefold()
    options_html = "".join(
        f'<option value="{esc(r)}"{" selected" if r.casefold() == chosen else ""}>{esc(r)}</option>'
        for r in ctx.references
    )
    wanted = set(ctx.options.precisions or PRECISIONS)
    precisions = _choices(body, "precision", PRECISIONS)
    workloads = _choices(body, "workload")
    cards = _choices(body, "card", ctx.references)
    reference = (
        f'<label class="ref">Reference card <select id="reference"><option value="">each view\'s default</option>'
        f"{options_html}</select></label>"
    )
    return (
        '<form class="controls" id="controls" onsubmit="return false">'
        + (reference if ctx.references else "")
        + f'<fieldset id="precisions"><legend>Precision</legend>{_boxes("precision", precisions, wanted)}</fieldset>'
        + f'<fieldset id="workloads" class="many"><legend>{_all_none("Workloads")}</legend>'
        + f"{_boxes('workload', workloads)}</fieldset>"
        + f'<details class="cards"><summary>Cards ({len(cards)})</summary><fieldset id="cards" class="many">'
        + f"<legend>{_all_none('Cards')}</legend>{_boxes('card', cards)}</fieldset></details>"
        + "</form>"
    )


def _document(sections: list[Section], ctx: Context, files: int) -> str:
    """The whole page: head with the inline style, controls, table of contents, sections and the inline script."""
    from memprobe import __version__

    shown = [s for s in sections if s.body]
    body = "".join(f'<section id="{s.key}"><h2>{esc(s.title)}</h2>{s.body}</section>' for s in shown)
    toc = "".join(f'<li><a href="#{s.key}">{esc(s.title)}</a></li>' for s in shown)
    title = "memprobe: max batch, throughput and GPU guidance"
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_asset('page.css')}</style></head><body>"
        f"<header><h1>{esc(title)}</h1><p>{files} result file(s); written by memprobe {esc(__version__)}. "
        "Unmarked figures are measured by memprobe on a real card; (pred) predicted, (pub) published elsewhere, "
        "(emul) or emulated = a smaller card emulated on a larger one (scan --memory-cap).</p>"
        f'{_controls(ctx, body)}<nav class="toc"><ul>{toc}</ul></nav>'
        f'<details class="about"><summary>Notes on these numbers</summary>{notes_html(ctx.notes)}</details></header>'
        f"<main>{body}</main><script>{_asset('page.js')}</script></body></html>\n"
    )
