"""Predicted capacities for a plan: the predict layer's max batch on the card for the settings nothing measured."""

from __future__ import annotations

from typing import Sequence

from memprobe.core.cards.cardsize import card_size
from memprobe.core.cards.catalog import Card
from memprobe.core.estimates.plan import PREDICTED, Capacity
from memprobe.core.text.units import gib
from memprobe.planning.levers import Setting
from memprobe.predict.progress import TraceProgress, silent


def _no_edge_note(p, label: str, capacity: int) -> str:
    """What a predicted B that is not an edge must say: the search's cap (the real B is that or more), or, where
    batch 1 does not fit, the memory its trial needs; "" for an edge."""
    from memprobe.predict.edge_search import MAX_SEARCH_BATCH

    if label in p.capped:
        return f"B {MAX_SEARCH_BATCH} is where predict's search stops: every batch up to it fits, so B is that or more"
    if p.max_batch[label] == 0 and 1 in p.needs:
        return f"batch 1 needs {gib(p.needs[1], 2)} GiB, the card {gib(capacity, 2)} GiB usable (predicted)"
    return ""


def predicted(
    settings: Sequence[Setting],
    card: Card,
    workers: int = 1,
    progress: TraceProgress | None = None,
    gpus: int = 1,
    how: str = "ddp",
) -> list[Capacity]:
    """Each setting's Capacity predicted for `card` as `memprobe predict --gpu CARD` does (the card's driver total,
    the shipped overhead), one trace session per workload variant covering its precisions; with `gpus` > 1 per GPU
    of that many under the strategy `how` (`predict --gpus N --strategy S`). `progress` says what is traced, as
    predict does. Raises memprobe.predict.trace.PredictError when a variant cannot be traced, StrategyError when
    `how` cannot wrap it."""
    from memprobe.predict.data_parallel import World
    from memprobe.predict.summary import memory_sizes, predict

    nbytes, _how = card_size(card)
    sizes = memory_sizes([(card.name, nbytes)], {card.name: card}, group=gpus > 1)
    by_variant: dict[str, list[Setting]] = {}
    for s in settings:
        by_variant.setdefault(s.workload.name + repr(s.workload.optimizer), []).append(s)
    progress = progress or silent()
    out: list[Capacity] = []
    for group in by_variant.values():
        workload = group[0].workload
        progress.line(
            f"[{workload.name}] predicting {', '.join(s.levers.precision for s in group)} on the {card.name} "
            "(fake tensors, no GPU) ..."
        )
        precisions = [s.levers.precision for s in group]
        world = World(gpus, how) if gpus > 1 else None
        prediction = predict(workload, precisions, sizes, world=world, workers=workers, progress=progress)
        for s in group:
            p = prediction.precisions[s.levers.precision]
            line = p.model_reserved
            out.append(
                Capacity(
                    s.levers,
                    workload.name,
                    PREDICTED,
                    p.max_batch[card.name],
                    sizes[0].capacity_bytes,
                    peaks={b: r for b, (_a, r) in p.peaks.items()},
                    static_bytes=line.static_bytes if line else None,
                    per_sample_bytes=line.per_sample_bytes if line else None,
                    unit=workload.unit,
                    origin=f"predicted for the {card.name}"
                    + (f", per GPU of {world.label}" if world else "")
                    + f": {sizes[0].how}",
                    note=_no_edge_note(p, card.name, sizes[0].capacity_bytes),
                    safe_batch=p.safe_max_batch.get(card.name),
                    safe_how=f"{prediction.safe_margin:.0%} of the usable memory left",
                )
            )
    return out
