"""One workload's answer for a GPU buyer: every card ranked by throughput at its best batch b* and by max batch,
relative to a reference card and per 1000 USD where a price is known, each figure labelled with where it comes from.

No torch. Nothing here is a figure of its own: max batches and throughputs are the comparison's points (like for like
at b*: compare/curves.py) and the catalog predictions from the scans' memory lines (card_predictions.py); the relative
throughput is relative.py's, on this workload and precision alone; per 1000 USD is the guide's division
(guide_tables.per_1000_usd). The HTML page (page_view.py) and `report/guide --model` (view_text.py) show these same
records. A view is a workload label and a precision, whatever the scan's mode (an inference scan's label says so).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from memprobe.compare.card_predictions import Prediction
from memprobe.compare.comparison import (
    DEFAULT_REFERENCE,
    EMULATED,
    MEASURED,
    PREDICTED,
    PUBLISHED,
    Comparison,
    Point,
)
from memprobe.compare.curves import at_batch_text
from memprobe.compare.guide_tables import per_1000_usd
from memprobe.compare.relative import relative_throughput
from memprobe.compare.tables import fmt_number
from memprobe.core.cards.catalog import Catalog

# The precision a view opens on when none is asked for: mixed precision first (every catalog card runs fp16, and the
# published figures are mostly fp16), then the others.
PREFERRED_PRECISIONS = ("fp16", "bf16", "tf32", "fp32")
MARK = {MEASURED: "", EMULATED: " (emul)", PREDICTED: " (pred)", PUBLISHED: " (pub)"}
ORIGIN_WORDS = {MEASURED: "measured", EMULATED: "emulated", PREDICTED: "predicted", PUBLISHED: "published"}


@dataclass(frozen=True)
class Shown:
    """One figure of a view: its number (None: a word such as "n/a"), its text with its origin's mark, its origin
    (measured, emulated, predicted or published) and its source (a result file's path, or a published source's key;
    for a predicted batch, the file whose memory line predicted it)."""

    value: float | None
    text: str
    origin: str
    source: str = ""


@dataclass
class CardRow:
    """One card in a view. `at` says where its throughput was taken ("b* 193", "B 3321 (no curve)", "published");
    `relative` holds its throughput over each possible reference card's (reference -> figure)."""

    card: str
    memory_gib: float | None
    price_usd: float | None
    batch: Shown | None
    throughput: Shown | None = None
    at: str = ""
    per_usd: Shown | None = None
    relative: dict[str, Shown] = field(default_factory=dict)
    rank_speed: int | None = None
    rank_batch: int | None = None


@dataclass
class View:
    """A workload and precision: every card's row ranked by throughput at b* (then max batch), the cards that can be
    the reference (those with a throughput above 0 here) and the one shown by default."""

    workload: str
    precision: str
    unit: str
    batch_unit: str
    rows: list[CardRow]
    references: list[str]
    reference: str
    basis: str

    @property
    def key(self) -> str:
        return f"{self.workload} {self.precision}"


def _origin(point: Point, kinds: Mapping[str, str]) -> str:
    """A point's origin as a view labels it: a measured point's file may hold an emulated card or a prediction."""
    return kinds.get(point.source, MEASURED) if point.origin == MEASURED else point.origin


def _batch(point: Point | None, prediction: Prediction | None, kinds: Mapping[str, str]) -> Shown | None:
    """A card's max batch: measured (or emulated) where scanned, else predicted from a memory line, else published
    (a batch that fit, a lower bound); "n/a" where the card cannot run the precision."""
    if point is not None and point.origin == MEASURED and point.max_batch is not None:
        origin = _origin(point, kinds)
        text = "OOM" if point.max_batch == 0 else fmt_number(point.max_batch)
        return Shown(point.max_batch, text + MARK[origin], origin, point.source)
    if prediction is not None and prediction.batch is not None:
        text = "OOM" if prediction.batch == 0 else str(prediction.batch)
        return Shown(float(prediction.batch), text + MARK[PREDICTED], PREDICTED, prediction.source)
    if point is not None and point.max_batch is not None:
        text = (">=" if point.batch_lower_bound else "") + fmt_number(point.max_batch)
        return Shown(point.max_batch, text + MARK[PUBLISHED], PUBLISHED, point.source)
    if prediction is not None:
        return Shown(None, f"n/a (no {prediction.precision})", PREDICTED)
    return None


def _throughput(point: Point | None, kinds: Mapping[str, str]) -> Shown | None:
    if point is None or point.throughput is None:
        return None
    origin = _origin(point, kinds)
    text = "0 (OOM)" if point.oom else fmt_number(point.throughput)
    return Shown(point.throughput, text + MARK[origin], origin, point.source)


def rank_rows(rows: list[CardRow]) -> None:
    """Rank by throughput (cards without one after, by max batch) and by max batch, and sort the rows so; a missing
    figure has no rank."""

    def speed(row: CardRow) -> tuple[float, float]:
        return (-(row.throughput.value or 0.0) if row.throughput else 1.0, -_value(row.batch))

    def batch(row: CardRow) -> tuple[float, float]:
        return (-_value(row.batch), -(row.throughput.value or 0.0) if row.throughput else 0.0)

    for i, row in enumerate(sorted((r for r in rows if r.throughput is not None), key=speed)):
        row.rank_speed = i + 1
    for i, row in enumerate(sorted((r for r in rows if r.batch and r.batch.value is not None), key=batch)):
        row.rank_batch = i + 1
    last = len(rows) + 1  # not len() inside the key: list.sort empties the list while it sorts
    rows.sort(key=lambda r: (r.rank_speed or last, r.rank_batch or last, r.card))


def _value(shown: Shown | None) -> float:
    return shown.value if shown is not None and shown.value is not None else -1.0


def _relative(rows: list[CardRow], points: list[Point], gpu_order: list[str]) -> list[str]:
    """Fill each row's throughput relative to every card that can be the reference; returns those cards."""
    fast = {r.card for r in rows if r.throughput is not None and r.throughput.value}
    references = [g for g in gpu_order if g in fast]
    sub = Comparison(points=points, gpu_order=list(dict.fromkeys(p.gpu for p in points)))
    for reference in references:
        relative = relative_throughput(sub, reference)
        cells = {(r.gpu, r.origin): next(iter(r.cells.values())) for r in relative.rows if r.cells}
        for row in rows:
            if row.throughput is None:
                continue
            kind = PUBLISHED if row.throughput.origin == PUBLISHED else MEASURED
            cell = cells.get((row.card, kind))
            if cell is None:
                continue
            text = "0 (OOM)" if cell.oom else f"{cell.value:.2f}"
            text += MARK[row.throughput.origin] + (" (vs pub)" if cell.vs_published else "")
            row.relative[reference] = Shown(cell.value, text, row.throughput.origin, row.throughput.source)
    return references


def default_reference(references: Sequence[str], requested: str | None, measured: Sequence[str]) -> str:
    """The reference a view opens on: the card asked for where it has a throughput here, else the 2020 study's Quadro
    RTX 8000, else the first measured card that has one, else the first that has one ("" when none has)."""
    for choice in (requested, DEFAULT_REFERENCE):
        if choice and choice in references:
            return choice
    return next((g for g in references if g in measured), references[0] if references else "")


def build_views(
    comparison: Comparison,
    basis: str,
    predictions: Sequence[Prediction],
    catalog: Catalog,
    kinds: Mapping[str, str] | None = None,
    reference: str | None = None,
    memory: Mapping[str, float] | None = None,
) -> list[View]:
    """A view per workload and precision of `comparison` (like for like, its throughputs what `basis` says) and of
    `predictions` (every catalog card; [] for the cards with figures alone). `kinds` maps a result file to what it
    holds (measured, emulated, predicted: comparison.file_kind); `memory` a card the catalog lacks to its GiB. Never
    raises."""
    kinds = kinds or {}
    points: dict[tuple[str, str], list[Point]] = {}
    for p in comparison.points:
        points.setdefault((p.workload, p.precision), []).append(p)
    predicted: dict[tuple[str, str], list[Prediction]] = {}
    for pr in predictions:
        predicted.setdefault((pr.workload, pr.precision), []).append(pr)
    keys = list(points) + [k for k in predicted if k not in points]
    order = {w: i for i, w in enumerate(dict.fromkeys(w for w, _p in keys))}
    keys.sort(key=lambda k: (order[k[0]], PREFERRED_PRECISIONS.index(k[1]) if k[1] in PREFERRED_PRECISIONS else 9))
    context = _Context(comparison.gpu_order, catalog, kinds, memory or {}, reference, basis)
    return [_view(key, points.get(key, []), predicted.get(key, []), context) for key in keys]


@dataclass(frozen=True)
class _Context:
    """What every view of one comparison shares (build_views' arguments)."""

    gpu_order: list[str]
    catalog: Catalog
    kinds: Mapping[str, str]
    memory: Mapping[str, float]
    reference: str | None
    basis: str


def _view(key: tuple[str, str], points: list[Point], predicted: list[Prediction], context: _Context) -> View:
    """One workload and precision's rows: a card's measured point first, its published one where it has no measured
    figure, and its prediction for the max batch where it was not scanned."""
    workload, precision = key
    measured = {p.gpu: p for p in points if p.origin == MEASURED}
    published: dict[str, Point] = {}
    for p in points:
        if p.origin == PUBLISHED and (p.gpu not in published or (published[p.gpu].throughput is None and p.throughput)):
            published[p.gpu] = p
    by_card = {pr.card.name: pr for pr in predicted}
    cards = list(dict.fromkeys([*(p.gpu for p in points), *by_card]))
    rows = []
    for card in cards:
        point = measured.get(card) or published.get(card)
        speed_point = point if point is not None and point.throughput is not None else published.get(card)
        found = context.catalog.find(card)
        row = CardRow(
            card=card,
            memory_gib=found.memory_bytes / 2**30 if found else context.memory.get(card),
            price_usd=found.price.usd if found and found.price else None,
            batch=_batch(point, by_card.get(card), context.kinds),
            throughput=_throughput(speed_point, context.kinds),
            at=at_batch_text(speed_point) if speed_point is not None and speed_point.throughput is not None else "",
        )
        if row.throughput is not None and row.throughput.value and found is not None:
            value = per_1000_usd(row.throughput.value, found)
            if value is not None:
                row.per_usd = Shown(value, f"{value:.2f}" + MARK[row.throughput.origin], row.throughput.origin)
        rows.append(row)
    shown = [p for p in points if p is measured.get(p.gpu) or p is published.get(p.gpu)]
    references = _relative(rows, shown, context.gpu_order)
    rank_rows(rows)
    units = [p.unit for p in points if p.origin == MEASURED and p.unit] + [p.unit for p in points if p.unit]
    batch_units = [p.batch_unit for p in points if p.origin == MEASURED and p.batch_unit]
    return View(
        workload,
        precision,
        units[0] if units else "",
        batch_units[0] if batch_units else "",
        rows,
        references,
        default_reference(references, context.reference, [g for g in context.gpu_order if g in measured]),
        context.basis,
    )


def answer(view: View) -> str:
    """The view in a sentence: the fastest cards at b*, the largest batch, the most throughput per 1000 USD, and how
    many cards have figures of each origin (a view of one card says just that card's figures)."""
    parts = []
    fast = [r for r in view.rows if r.throughput and r.throughput.value]
    for row in fast[:2]:
        assert row.throughput is not None
        parts.append(
            f"{'fastest' if row is fast[0] else 'then'} {row.card}, {_plain(row.throughput.text)} {view.unit}"
            + (f" at {row.at}" if row.at and row.at != PUBLISHED else "")
            + f" ({ORIGIN_WORDS[row.throughput.origin]})"
        )
    sized = [r for r in view.rows if r.batch and r.batch.value]
    if sized:
        big = max(sized, key=lambda r: _value(r.batch))
        assert big.batch is not None
        parts.append(
            f"largest max batch: {big.card}, {_plain(big.batch.text)} {view.batch_unit or 'samples'}"
            + f" ({ORIGIN_WORDS[big.batch.origin]})"
        )
    priced = [r for r in view.rows if r.per_usd is not None]
    if priced:
        best = max(priced, key=lambda r: _value(r.per_usd))
        assert best.per_usd is not None
        parts.append(
            f"most per 1000 USD: {best.card}, {_plain(best.per_usd.text)} {view.unit} "
            f"({ORIGIN_WORDS[best.per_usd.origin]})"
        )
    counts = {
        o: sum(1 for r in view.rows if r.batch and r.batch.origin == o and r.batch.value is not None) for o in MARK
    }
    tally = ", ".join(f"{n} {ORIGIN_WORDS[o]}" for o, n in counts.items() if n)
    head = f"For {view.workload} {view.precision}"
    body = "; ".join(parts) if parts else "no figure"
    return f"{head}: {body}. Max batch on {len(view.rows)} card(s): {tally or 'none'}."


def _plain(text: str) -> str:
    """A figure's text without its origin mark (the sentence names the origin in words)."""
    for mark in MARK.values():
        if mark and text.endswith(mark):
            return text[: -len(mark)]
    return text


def restricted(view: View, cards: Sequence[str]) -> View:
    """The view with the rows of `cards` alone, ranked among themselves (the reference stays what it was)."""
    rows = [replace(r, rank_speed=None, rank_batch=None) for r in view.rows if r.card in cards]
    rank_rows(rows)
    return replace(view, rows=rows)
