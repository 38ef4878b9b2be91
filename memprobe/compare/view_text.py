"""`memprobe report --model NAME` and `guide --model NAME`: one workload's answer in a terminal screen.

No torch. The same views the HTML page opens on (compare/workload_view.py): a sentence, then one table per precision
with every card ranked by throughput at its best batch b*, its max batch, its throughput relative to the reference card
and per 1000 USD, each figure marked with its origin, and the files and sources the figures come from under it. One
precision by default (workload_view.PREFERRED_PRECISIONS: the first the workload has), so that the answer fits 60 lines of 120
columns; the others are named, for --precision.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from memprobe.compare.card_predictions import Prediction
from memprobe.compare.comparison import EMULATED, MEASURED, PREDICTED, PUBLISHED, Comparison, ReportError, file_kind
from memprobe.compare.published import SOURCES
from memprobe.compare.report import render
from memprobe.compare.tables import Table, fmt_number
from memprobe.compare.workload_view import CardRow, View, answer, build_views, restricted
from memprobe.core.cards.catalog import Catalog, default_catalog
from memprobe.core.records.results import ScanResult


def pick(views: Sequence[View], name: str) -> list[View]:
    """The views of workload `name`: its label exactly ("resnet50", "resnet50 (inference)"), else every label of that
    name (several definitions, or training and inference). Raises ReportError naming the workloads there are."""
    exact = [v for v in views if v.workload == name]
    if exact:
        return exact
    base = [v for v in views if v.workload.split(" (")[0].split("@")[0] == name]
    if base:
        return base
    names = ", ".join(dict.fromkeys(v.workload for v in views)) or "none"
    raise ReportError(f"no workload '{name}' in these results (workloads: {names})")


def chosen(views: Sequence[View], precisions: Sequence[str] | None) -> tuple[list[View], list[str]]:
    """The views to print and the precisions left out: those asked for, else each workload's first precision in
    PREFERRED_PRECISIONS order. Raises ReportError when none of the precisions asked for is there."""
    if precisions:
        shown = [v for v in views if v.precision in precisions]
        if not shown:
            have = ", ".join(dict.fromkeys(v.precision for v in views))
            raise ReportError(f"no {', '.join(precisions)} figures for {views[0].workload} (it has {have})")
    else:
        first: dict[str, View] = {}
        for v in views:  # views come in PREFERRED_PRECISIONS order within a workload
            first.setdefault(v.workload, v)
        shown = list(first.values())
    return shown, [v.precision for v in views if v not in shown]


def view_table(view: View) -> Table:
    """A view as a table: a row per card ranked by throughput at b*, then by max batch (the units in the title)."""
    columns = ["#", "card", "GiB", "max batch", "b*", "at b*", f"vs {view.reference}" if view.reference else "relative"]
    columns += ["per 1000 USD", "price USD"]
    rows = []
    for n, row in enumerate(view.rows, 1):
        relative = row.relative.get(view.reference)
        rows.append(
            [
                str(n),
                row.card,
                fmt_number(round(row.memory_gib, 1)) if row.memory_gib else "-",
                row.batch.text if row.batch else "-",
                _at(row),
                row.throughput.text if row.throughput else "-",
                relative.text if relative else "-",
                row.per_usd.text if row.per_usd else "-",
                f"{row.price_usd:,.0f}" if row.price_usd else "-",
            ]
        )
    units = f"throughput in {view.unit or 'samples/s'}, max batch in {view.batch_unit or 'samples'}"
    title = f"{view.workload} {view.precision}: cards ranked by throughput at b*, then by max batch ({units})"
    return Table("view", title, columns, rows, view_notes(view), keep=2)


def _at(row: CardRow) -> str:
    """Where a row's throughput was taken, short: b* itself, "B 3321 (no curve)", or "pub" (the source's batch)."""
    if not row.at:
        return "-"
    if row.at.startswith("b* "):
        return row.at[3:].replace(" (best of timed)", "")  # said under the table (view_notes)
    return "pub" if row.at == PUBLISHED else row.at


def view_notes(view: View) -> list[str]:
    """What the marks mean and where every figure comes from: files by name, published sources by citation."""
    notes = [
        f"Throughput: {view.basis}; 'B N (no curve)' = at the max batch B (the file has no curve); 'pub' = at the "
        "batch the published source ran. Unmarked = measured by memprobe; (pred) = predicted from a scan's memory "
        "line; (emul) = a smaller card emulated on a larger one (scan --memory-cap); (pub) = published elsewhere."
    ]
    skipped = [r.card for r in view.rows if "(best of timed)" in r.at]
    if skipped:
        notes.append(
            f"b* of {', '.join(skipped)}: the best of the batches timed (the curve's time budget skipped some)."
        )
    if view.reference:
        notes.append(f"vs {view.reference} = the card's throughput over the {view.reference}'s (= 1.00).")
        if any("(vs pub)" in s.text for r in view.rows for s in r.relative.values()):
            notes.append("(vs pub) = a measured figure over a published one: two implementations compared.")
    files: dict[str, list[str]] = {}
    lines: dict[str, list[str]] = {}
    published: set[str] = set()
    for row in view.rows:
        for shown in (row.batch, row.throughput):
            if shown is None or not shown.source:
                continue
            if shown.origin in (MEASURED, EMULATED) or (shown is row.throughput and shown.origin == PREDICTED):
                files.setdefault(Path(shown.source).name, []).append(row.card)
            elif shown.origin == PREDICTED:
                lines.setdefault(Path(shown.source).name, []).append(row.card)
            elif shown.origin == PUBLISHED:
                published.add(shown.source)
    for name, cards in files.items():
        notes.append(f"{', '.join(dict.fromkeys(cards))}: {name}.")
    for name, cards in lines.items():
        notes.append(f"(pred) from the memory line of {name}: {len(set(cards))} card(s).")
    notes += [f"(pub) {key}: {SOURCES.get(key, key)}." for key in sorted(published)]
    return notes


def model_views(
    loaded: Sequence[tuple[Path, ScanResult]],
    comparison: Comparison,
    basis: str,
    predictions: Sequence[Prediction] = (),
    catalog: Catalog | None = None,
    reference: str | None = None,
) -> list[View]:
    """Every view of these results (build_views), each figure labelled by what its file holds."""
    catalog = catalog or default_catalog()
    kinds = {str(path): file_kind(result) for path, result in loaded}
    memory = {}
    for _path, result in loaded:
        gpu = result.environment.gpu
        if gpu is not None and gpu.total_bytes:
            memory[catalog.canonical(result.gpu_name())] = gpu.total_bytes / 2**30
    return build_views(comparison, basis, predictions, catalog, kinds, reference, memory)


def model_text(
    views: Sequence[View], name: str, precisions: Sequence[str] | None, fmt: str, command: str, cards_note: str = ""
) -> str:
    """`COMMAND --model NAME` as text: the sentence of each view shown, the precisions left out, and the tables.
    Raises ReportError for an unknown workload or precision, ValueError for an unknown format."""
    shown, left = chosen(pick(views, name), precisions)
    notes = [answer(v) for v in shown]
    if left:
        notes.append(f"Also in these results: {', '.join(dict.fromkeys(left))} (--precision to show them).")
    if cards_note:
        notes.append(cards_note)
    title = f"memprobe {command}: {', '.join(dict.fromkeys(v.workload for v in shown))}"
    return render([view_table(v) for v in shown], fmt, title, notes)


def guide_model_text(
    loaded: Sequence[tuple[Path, ScanResult]],
    name: str,
    precisions: Sequence[str] | None,
    fmt: str,
    budget: float | None = None,
    only: Sequence[str] | None = None,
) -> str:
    """`guide --model NAME`: every catalog card (and every scanned one) for one workload, with the guide's published
    figures and its --budget and --gpu choices. Raises ReportError for an unknown workload or precision."""
    from memprobe.compare.card_predictions import memory_models, predictions
    from memprobe.compare.comparison import build_comparison
    from memprobe.compare.curves import like_for_like

    catalog = default_catalog()
    try:
        comparison = build_comparison(loaded, with_published=True, catalog=catalog)
    except ReportError:  # nothing measured or published: the predictions alone
        comparison = Comparison([], [])
    basis = like_for_like(comparison)
    preds = predictions(memory_models(loaded, catalog)[0], catalog.cards)
    views = model_views(loaded, basis.comparison, basis.label, preds, catalog)
    note = ""
    if budget is not None or only is not None:
        cards = {row.card for v in views for row in v.rows}
        if budget is not None:
            cards = {c for c in cards if (found := catalog.find(c)) and found.price and found.price.usd <= budget}
        if only is not None:
            cards &= set(only)
        views = [restricted(v, sorted(cards)) for v in views]
        note = (
            f"Cards shown: {len(cards)} ("
            + ", ".join(
                x for x in (f"--budget {budget:,.0f} USD" if budget is not None else "", "--gpu" if only else "") if x
            )
            + ")."
        )
    return model_text(views, name, precisions, fmt, "guide", note)
