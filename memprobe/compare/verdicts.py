"""The verdict per catalog card for `memprobe guide`: does it train the workloads, and roomily, by one stated rule."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from memprobe.compare.card_predictions import Prediction
from memprobe.core.cards.catalog import Card

# A batch is "roomy" on a card when it is at least this fraction of the largest batch any catalog card reaches for
# that workload (1/8: three halvings below the biggest card). Relative, so that a workload that trains at batch 1-2
# even on 80 GB cards (Pix2PixHD) and one that reaches hundreds (ResNet-50) are judged alike.
ROOMY_FRACTION = 1 / 8
VERDICT_ALL = "trains all the large models"
VERDICT_MOST = "trains most, with small batches"
VERDICT_NO = "not a good fit"
VERDICT_RULE = (
    "Verdict rule: for each workload, take the card's largest batch over the precisions it supports (measured on the "
    "card the file comes from, predicted elsewhere). The workload trains when that batch >= 1, and trains roomily when "
    "it is >= 1/8 of the largest batch any catalog card reaches for it (at least 1). "
    f"'{VERDICT_ALL}': every workload trains roomily; '{VERDICT_MOST}': at least half of the workloads train; "
    f"'{VERDICT_NO}': fewer than half train."
)


@dataclass
class Verdict:
    """A card's verdict, and the best batch per workload it rests on: workload -> (batch, precision, origin)."""

    card: Card
    verdict: str
    trains: int
    roomy: int
    total: int
    best: dict[str, tuple[int, str, str]] = field(default_factory=dict)


def verdicts(preds: Sequence[Prediction], cards: Sequence[Card]) -> list[Verdict]:
    """One verdict per card by VERDICT_RULE. `preds` must cover the whole catalog (the roomy threshold uses it)."""
    workloads = list(dict.fromkeys(p.workload for p in preds))
    best: dict[tuple[str, str], tuple[int, str, str]] = {}
    for p in preds:
        if p.batch is None:
            continue
        key = (p.card.name, p.workload)
        if key not in best or p.batch > best[key][0]:
            best[key] = (p.batch, p.precision, p.origin)
    largest = {w: max((b[0] for (c, ww), b in best.items() if ww == w), default=0) for w in workloads}
    threshold = {w: max(1, math.ceil(largest[w] * ROOMY_FRACTION)) for w in workloads}
    out = []
    for card in cards:
        mine = {w: best[(card.name, w)] for w in workloads if (card.name, w) in best}
        trains = sum(1 for w, b in mine.items() if b[0] >= 1)
        roomy = sum(1 for w, b in mine.items() if b[0] >= threshold[w])
        total = len(workloads)
        if total and roomy == total:
            verdict = VERDICT_ALL
        elif total and trains * 2 >= total and trains > 0:
            verdict = VERDICT_MOST
        else:
            verdict = VERDICT_NO
        out.append(Verdict(card, verdict, trains, roomy, total, mine))
    return out


def roomy_thresholds(preds: Sequence[Prediction]) -> dict[str, int]:
    """Per workload, the batch from which a card counts as roomy (printed with the rule)."""
    best: dict[str, int] = {}
    for p in preds:
        if p.batch is not None:
            best[p.workload] = max(best.get(p.workload, 0), p.batch)
    return {w: max(1, math.ceil(b * ROOMY_FRACTION)) for w, b in best.items()}
