"""The tables of `memprobe guide`: the catalog, the max batch per card, throughput per dollar and per watt, verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from memprobe.compare.card_predictions import MemoryModel, Prediction, card_capacity
from memprobe.compare.comparison import MEASURED, PREDICTED, Comparison
from memprobe.compare.curves import at_batch_text, knee_text
from memprobe.compare.tables import Cell, Table, fmt_number
from memprobe.compare.verdicts import VERDICT_RULE, Verdict
from memprobe.core.cards.catalog import Card
from memprobe.core.cards.overhead import OverheadTable, default_overhead_table
from memprobe.core.text.units import gib


def price_text(card: Card) -> str:
    price = card.price
    return "-" if price is None else f"{price.usd:,.0f} ({price.date}, {price.source})"


def per_1000_usd(throughput: float, card: Card) -> float | None:
    """Throughput per 1000 USD of the card's catalog price (None without a price)."""
    return throughput / card.price.usd * 1000 if card.price else None


def catalog_table(cards: Sequence[Card]) -> Table:
    """The catalog rows shown (datasheet values and sourced prices; nothing here is measured)."""
    columns = [
        "card",
        "arch",
        "memory GiB",
        "peak TFLOP/s fp32/tf32/fp16/bf16",
        "bandwidth GB/s",
        "TDP W",
        "price USD (date, source)",
        "spec source",
    ]
    rows = []
    for c in cards:
        peaks = "/".join(fmt_number(v) if v is not None else "-" for v in c.peak_tflops.values())
        rows.append(
            [
                c.name,
                c.architecture,
                fmt_number(c.memory_bytes / 2**30),
                peaks,
                fmt_number(c.bandwidth_gb_s) if c.bandwidth_gb_s else "-",
                fmt_number(c.tdp_w) if c.tdp_w else "-",
                price_text(c),
                c.spec_source,
            ]
        )
    notes = [
        "Datasheet figures and published prices from memprobe/data/gpus.yaml (sources listed there); "
        "'-' = not sourced, left empty rather than guessed. Peaks are dense (no sparsity); fp16/bf16 with FP32 "
        "accumulate."
    ]
    return Table("catalog", "GPU catalog (datasheets and published prices, not measured)", columns, rows, notes)


def usable_note(table: OverheadTable | None = None) -> str:
    """One sentence: the usable memory per card, and where it comes from (memprobe/data/overhead.yaml)."""
    table = table or default_overhead_table()
    scanned = ", ".join(f"the {c.card} {gib(c.capacity_bytes, 2)} GiB" for c in table.cards.values())
    carried = table.carried()
    rest = (
        f"on the others, the card's memory (driver-reported total where the catalog has it, else datasheet) "
        f"minus {gib(carried.overhead_bytes, 2)} GiB measured on the {carried.card}, carried over"
        if carried
        else "on the others, the whole memory (no scanned card to measure the overhead on)"
    )
    return (
        f"Usable memory per card, as `memprobe predict --gpu CARD` takes it (memprobe/data/overhead.yaml): "
        f"measured where memprobe scanned the card ({scanned or 'none'}); {rest}."
    )


def prediction_table(
    preds: Sequence[Prediction],
    cards: Sequence[Card],
    models: Sequence[MemoryModel],
    table: OverheadTable | None = None,
) -> Table:
    """Predicted max batch per card (rows) and workload/precision (columns), and how many workloads train."""
    cols = list(dict.fromkeys((m.workload, m.precision) for m in models))
    by = {(p.card.name, p.workload, p.precision): p for p in preds}
    fitted_in = {(m.workload, m.precision): m.source for m in models}  # a measured cell's file
    workloads = list(dict.fromkeys(m.workload for m in models))
    columns = ["card", "memory GiB", "usable GiB"] + [f"{w} {p}" for w, p in cols] + ["trains (workloads)"]
    rows = []
    for card in cards:
        row: list[Any] = [card.name, fmt_number(card.memory_bytes / 2**30), gib(card_capacity(card, table), 2)]
        for w, pr in cols:
            p = by.get((card.name, w, pr))
            if p is None or p.batch is None:
                row.append(f"n/a (no {pr})")
            elif p.batch == 0:
                row.append(
                    Cell("OOM" + (" (pred)" if p.origin == PREDICTED else ""), 0.0, p.origin, _file(p, fitted_in))
                )
            else:
                text = str(p.batch) + (" (pred)" if p.origin == PREDICTED else "")
                row.append(Cell(text, float(p.batch), p.origin, _file(p, fitted_in)))
        batches = [(w, by[(card.name, w, pr)].batch) for w, pr in cols if (card.name, w, pr) in by]
        trains = len({w for w, b in batches if b})
        row.append(f"{trains}/{len(workloads)}")
        rows.append(row)
    notes = [
        "(pred) = the scan's straight line (below) at the card's usable memory, the one `memprobe predict --gpu "
        "CARD` takes (column 'usable GiB'). `memprobe predict -m WORKLOAD -p PRECISION --gpu CARD` replays the "
        "trial through a model of the caching allocator instead of a line, so for the same card its answer can "
        "differ by a few percent: the line runs through the peaks of the search's trials, not through the edge.",
        usable_note(table),
    ]
    for m in models:
        notes.append(
            f"{m.workload} {m.precision}: peak reserved = {gib(m.static_bytes, 2)} GiB + "
            f"{gib(m.per_sample_bytes, 3)} GiB x batch ({m.batch_unit}), fitted in {Path(m.source).name}."
        )
    several = [f"{w} {pr}" for w, pr in cols if sum((m.workload, m.precision) == (w, pr) for m in models) > 1]
    if several:
        notes.append(
            f"{len(several)} workload/precision pairs have lines from more than one scanned card ("
            + ", ".join(several)
            + "): each card takes the line of the scanned card nearest it in usable memory, a scanned card shows "
            "its own measured max batch."
        )
    checks = [
        f"{p.workload} {p.precision} on the {p.card.name} predicted {p.predicted_batch}, measured {p.batch}"
        for p in preds
        if p.origin == MEASURED
    ]
    if checks:
        notes.append(
            "Check on the measured card(s): " + "; ".join(checks) + ". The line is fitted to the peaks of "
            "the search's trials, not to the edge, so it can miss the true maximum by a few percent either "
            "way."
        )
    notes.append(
        "Other cards run other kernels and library workspaces (cuDNN, cuBLAS), so their true maxima can "
        "differ by a few samples; 'n/a' = the card has no such precision (tf32/bf16 need Ampere or newer)."
    )
    return Table(
        "predicted",
        "Max batch on every catalog card (predicted from the scan's fitted memory line)",
        columns,
        rows,
        notes,
    )


def _file(p: Prediction, fitted_in: dict[tuple[str, str], str]) -> str:
    """The result file behind a measured cell of the prediction table ("" for a predicted one)."""
    return fitted_in.get((p.workload, p.precision), "") if p.origin == MEASURED else ""


def value_table(comparison: Comparison | None, cards: Sequence[Card], workloads: Sequence[str] | None) -> Table:
    """Throughput per 1000 USD and per watt, where throughput is measured (on the file's card) or published."""
    allowed = {c.name: c for c in cards}
    columns = [
        "workload",
        "precision",
        "card",
        "throughput",
        "unit",
        "at batch",
        "knee (fall)",
        "price USD",
        "per 1000 USD",
        "TDP W",
        "per W (TDP)",
        "per W (measured power)",
    ]
    rows = []
    points = (
        []
        if comparison is None
        else [
            p
            for p in comparison.points
            if p.throughput and p.gpu in allowed and (workloads is None or p.workload in workloads)
        ]
    )
    points.sort(key=lambda p: (p.workload, p.precision, -(p.throughput or 0)))
    for p in points:
        card = allowed[p.gpu]
        throughput = p.throughput or 0.0  # points holds only those with a throughput
        mark = "" if p.origin == MEASURED else " (pub)"
        price = card.price.usd if card.price else None
        value = per_1000_usd(throughput, card)
        per_usd = Cell(f"{value:.2f}{mark}", value, p.origin) if value is not None else "-"
        per_w = Cell(f"{throughput / card.tdp_w:.3f}{mark}", throughput / card.tdp_w, p.origin) if card.tdp_w else "-"
        power = ((p.utilization or {}).get("power_w") or {}).get("mean")
        per_power = Cell(f"{throughput / power:.3f}", throughput / power, MEASURED) if power else "-"
        rows.append(
            [
                p.workload,
                p.precision,
                card.name,
                Cell(fmt_number(throughput) + mark, throughput, p.origin, p.source if p.origin == MEASURED else ""),
                p.unit,
                at_batch_text(p),
                knee_text(p.knee_batch, p.knee_after_batch, p.knee_drop),
                f"{price:,.0f}" if price else "-",
                per_usd,
                fmt_number(card.tdp_w) if card.tdp_w else "-",
                per_w,
                per_power,
            ]
        )
    notes = [
        "Prices and TDP are the catalog's (gpus.yaml: datasheet TDP, published prices with their dates); "
        "throughput is memprobe's on the card a file was measured on, or published (pub). Card-only prices: "
        "a host, power and cooling are not included."
    ]
    return Table(
        "value",
        "Throughput per 1000 USD and per watt (measured: at the best batch b* where the scan timed "
        "a curve, else at max batch B)",
        columns,
        rows,
        notes,
        keep=3,
    )


def verdict_table(verdicts_: Sequence[Verdict]) -> Table:
    """A row per card: the verdict, how many workloads train (roomily), and a column per workload with the best
    batch it rests on (its precision, and whether it is predicted)."""
    workloads = list(dict.fromkeys(w for v in verdicts_ for w in v.best))
    rows = []
    for v in verdicts_:
        row: list[Any] = [
            v.card.name,
            fmt_number(v.card.memory_bytes / 2**30),
            f"{v.card.price.usd:,.0f}" if v.card.price else "-",
            v.verdict,
            f"{v.trains}/{v.total} train, {v.roomy}/{v.total} roomy",
        ]
        for w in workloads:
            if w not in v.best:
                row.append("-")
                continue
            batch, precision, origin = v.best[w]
            row.append(Cell(f"{batch} ({precision}{', pred' if origin == PREDICTED else ''})", float(batch), origin))
        rows.append(row)
    notes = [
        VERDICT_RULE,
        "A workload's column: the card's largest batch over the precisions it supports (which one, "
        "and 'pred' where predicted); prices as in the catalog table.",
    ]
    return Table(
        "verdicts",
        "Verdicts, and the best batch per workload they rest on",
        ["card", "memory GiB", "price USD", "verdict", "count", *workloads],
        rows,
        notes,
        keep=1,
    )
