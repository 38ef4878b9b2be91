"""Build a serving plan (`memprobe plan --mode generate`): per precision, the concurrent sequences of a generation
that fit on one card, measured (a result file of that card, model, P, N, chunk and precision) or else predicted."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from memprobe.compare.scaling import world_size
from memprobe.core.cards.catalog import Card, Catalog, default_catalog
from memprobe.core.estimates.serving import MEASURED, PREDICTED, ServingPlan, ServingRow, measured_row
from memprobe.core.records.results import ResultFileError, ScanResult
from memprobe.core.workload.registry import Workload
from memprobe.planning.build import NO_RESULTS_NOTE, load_plan_results, plan_card
from memprobe.planning.measured import of_card, same_definition
from memprobe.predict.progress import TraceProgress, silent

MEASURED_NOTE = (
    "measured rows: B from `memprobe scan --mode generate` on this card (the most concurrent sequences that complete "
    "the generation, proven in fresh processes), with the prefill and decode tokens/s timed at B and the KV capacity "
    "(whole P + N contexts) beside the weights and the activation measured there; above B where the prefill's "
    "activation, not the cache, binds"
)
PREDICTED_NOTE = (
    "predicted rows: `memprobe predict --mode generate` for this card (fake tensors, no GPU; not measured); safe: "
    "the batch that leaves the prediction's margin of the usable memory unused, the one to run. Tokens/s only where "
    "measured"
)


def _measured(
    workload: Workload, precision: str, loaded: Sequence[tuple[Path, ScanResult]], card: Card, catalog: Catalog
) -> ServingRow | None:
    """The row of the newest finished generate result of this workload, precision and card, None without one."""
    found = [
        (result.created_at, path, result)
        for path, result in loaded
        if result.mode == "generate"
        and world_size(result) == 1
        and same_definition(result, workload)
        and of_card(result, card, catalog)
    ]
    for _created, path, result in sorted(found, key=lambda f: f[0], reverse=True):
        row = measured_row(card, path, result, precision)
        if row is not None:
            return row
    return None


def _predicted(
    workload: Workload, precisions: list[str], card: Card, workers: int, progress: TraceProgress
) -> list[ServingRow]:
    """The rows `memprobe predict --mode generate --gpu CARD` gives for these precisions. Raises PredictError when
    the generation cannot be traced."""
    from memprobe.core.cards.cardsize import card_size
    from memprobe.predict.summary import memory_sizes, predict

    nbytes, _how = card_size(card)
    sizes = memory_sizes([(card.name, nbytes)], {card.name: card})
    progress.line(f"[{workload.name}] predicting {', '.join(precisions)} on the {card.name} (fake tensors, no GPU) ...")
    prediction = predict(workload, precisions, sizes, mode="generate", workers=workers, progress=progress)
    rows = []
    for precision in precisions:
        p = prediction.precisions[precision]
        rows.append(
            ServingRow(
                card.name,
                workload.name,
                precision,
                PREDICTED,
                p.max_batch[card.name],
                safe_sequences=p.safe_max_batch.get(card.name),
                origin=f"predicted for the {card.name}: {sizes[0].how}",
            )
        )
    return rows


def build_serving(
    workload: Workload,
    card_name: str,
    precisions: Sequence[str] = ("bf16",),
    results: Sequence[str | Path] = (),
    workers: int = 1,
    progress: TraceProgress | None = None,
    on_skip: Callable[[ResultFileError], None] | None = None,
) -> ServingPlan:
    """The serving plan of a generation workload (core/generation.generation_variant) on the card `card_name`: per
    precision the card runs, measured where `results` holds a finished generate scan of it on the card, else
    predicted. Raises PlanError for an unknown card, a result file that cannot be read or `results` holding none;
    memprobe.predict.trace.PredictError when a precision cannot be predicted."""
    catalog = default_catalog()
    resolved = plan_card(card_name, catalog)
    card = resolved.card
    notes = [resolved.note] if resolved.note else []
    runs = [p for p in precisions if card.supports(p)]
    if len(runs) < len(precisions):
        left = ", ".join(p for p in precisions if p not in runs)
        notes.append(f"the {card.name} cannot run {left} (compute capability {card.compute_capability}): left out")
    loaded = load_plan_results(results, on_skip)
    if not results:
        notes.append(NO_RESULTS_NOTE)
    rows = {p: _measured(workload, p, loaded, card, catalog) for p in runs}
    missing = [p for p, row in rows.items() if row is None]
    if missing:
        for row in _predicted(workload, missing, card, workers, progress or silent()):
            rows[row.precision] = row
    made = [r for r in rows.values() if r is not None]
    notes += [MEASURED_NOTE] if any(r.source == MEASURED for r in made) else []
    notes += [PREDICTED_NOTE] if any(r.source == PREDICTED for r in made) else []
    notes += [f"{r.precision}: measured in {r.origin}" for r in made if r.source == MEASURED]
    return ServingPlan(workload.name, card.name, made, notes)
