"""The top of the HTML page: pick a workload and a precision, and every card is ranked in one table whose bars make it
a chart, by throughput at its best batch b* or by max batch, relative to the reference card and per 1000 USD, with a
sentence that answers first.

No torch. The views are compare/workload_view.py's (the same `report/guide --model` print); each holds its throughput
relative to every card that can be its reference, computed by memprobe, so choosing a reference in the page only shows
another of them. A bar's length is its figure over the largest in the view (drawing, not a figure of its own).
"""

from __future__ import annotations

from typing import Sequence

from memprobe.compare.page_html import Sources, esc
from memprobe.compare.workload_view import CardRow, Shown, View, answer


def _figure(shown: Shown | None, sources: Sources, largest: float = 0.0) -> str:
    """A figure's cell: its number for sorting, its origin, a link to where it comes from, and a bar."""
    if shown is None:
        return "<td>-</td>"
    attrs = f' class="o-{shown.origin}"'
    if shown.value is not None:
        attrs += f' data-value="{shown.value:.6g}"'
    text = sources.link(shown.source, esc(shown.text)) if shown.source else esc(shown.text)
    bar = ""
    if largest > 0 and shown.value:
        bar = f'<i class="bar" style="width:{max(1, round(100 * shown.value / largest))}%"></i>'
    return f"<td{attrs}>{bar}{text}</td>"


def _relative(row: CardRow, view: View) -> str:
    """The relative throughput against every possible reference (data-r: its index in the view's data-refs); the page
    shows the chosen one's."""
    if not row.relative:
        return "<td>-</td>"
    spans = []
    for i, reference in enumerate(view.references):
        shown = row.relative.get(reference)
        hidden = "" if reference == view.reference else " hidden"
        spans.append(f'<span data-r="{i}"{hidden}>{esc(shown.text) if shown else "-"}</span>')
    return f'<td class="rel">{"".join(spans) or "-"}</td>'


def _row(row: CardRow, view: View, sources: Sources, largest: tuple[float, float]) -> str:
    memory = f"{row.memory_gib:.0f}" if row.memory_gib else "-"
    price = f'<td data-value="{row.price_usd:.0f}">{row.price_usd:,.0f}</td>' if row.price_usd else "<td>-</td>"
    return (
        f'<tr data-card="{esc(row.card)}"{_rank("rs", row.rank_speed)}{_rank("rb", row.rank_batch)}>'
        f'<td class="rank">{row.rank_speed or "-"}</td><td>{esc(row.card)}</td><td>{memory}</td>'
        + _figure(row.batch, sources, largest[0])
        + f"<td>{esc(row.at.replace('b* ', '') if row.at.startswith('b* ') else row.at or '-')}</td>"
        + _figure(row.throughput, sources, largest[1])
        + _relative(row, view)
        + _figure(row.per_usd, sources)
        + price
        + "</tr>"
    )


def _rank(name: str, rank: int | None) -> str:
    return f' data-{name}="{rank}"' if rank else ""


def view_html(view: View, sources: Sources, shown: bool) -> str:
    """One view: its sentence, then its ranked table (the chosen reference's relative figures shown)."""
    largest = (
        max((r.batch.value or 0.0 for r in view.rows if r.batch), default=0.0),
        max((r.throughput.value or 0.0 for r in view.rows if r.throughput), default=0.0),
    )
    head = (
        f"<th>#</th><th>card</th><th>GiB</th><th>max batch ({esc(view.batch_unit or 'samples')})</th><th>b*</th>"
        f"<th>throughput at b* ({esc(view.unit or 'per s')})</th>"
        f'<th>vs <span class="ref-name">{esc(view.reference or "-")}</span></th><th>per 1000 USD</th><th>price USD</th>'
    )
    rows = "".join(_row(r, view, sources, largest) for r in view.rows)
    refs = "|".join(view.references)
    return (
        f'<div class="view" data-workload="{esc(view.workload)}" data-precision="{esc(view.precision)}" '
        f'data-refs="{esc(refs)}" data-default-ref="{esc(view.reference)}"{"" if shown else " hidden"}>'
        f'<p class="answer">{esc(answer(view))}</p>'
        f'<div class="table-wrap"><table class="data view-table" data-table="view">'
        f"<caption>{esc(view.workload)} {esc(view.precision)}: every card, ranked</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div></div>"
    )


HINT = (
    "Throughput is each card's best (at its best batch b*, from its scan's curve); 'B N' where a file has no curve, "
    "'published' at the batch its source ran. Unmarked figures are measured by memprobe; (pred) predicted from a scan's "
    "memory line, (emul) a smaller card emulated on a larger one, (pub) published elsewhere. A figure links to its "
    "source (the result file or the publication); its bar is its share of the largest in the view."
)


def views_html(views: Sequence[View], sources: Sources) -> str:
    """The section's body: the workload and precision pickers, the ranking switch, and every view (the first shown)."""
    if not views:
        return ""
    workloads = list(dict.fromkeys(v.workload for v in views))
    precisions = list(dict.fromkeys(v.precision for v in views))
    pick = (
        '<form class="pick" onsubmit="return false">'
        '<label>Workload <select id="view-workload">'
        + "".join(f'<option value="{esc(w)}">{esc(w)}</option>' for w in workloads)
        + '</select></label> <label>Precision <select id="view-precision">'
        + "".join(f'<option value="{esc(p)}">{esc(p)}</option>' for p in precisions)
        + '</select></label> <span class="rank-by">Rank by <label><input type="radio" name="rank-by" value="speed" '
        'checked> throughput at b*</label> <label><input type="radio" name="rank-by" value="batch"> max batch</label>'
        "</span></form>"
    )
    body = "".join(view_html(v, sources, i == 0) for i, v in enumerate(views))
    return pick + f'<p class="hint">{esc(HINT)}</p>' + body
