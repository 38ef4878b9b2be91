"""Serving capacity records: the concurrent sequences of a generation that fit on a card, per precision, measured or
predicted (labelled), with the measured tokens/s and KV capacity beside them. No torch.

`memprobe plan --mode generate` gives one card's rows (measured from a result file of that card, model, P, N, chunk
and precision where there is one, else predicted by `memprobe predict --mode generate`); `memprobe guide --mode
generate` gives every catalog card's (measured on the scanned card, predicted elsewhere from its memory line).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memprobe.core.estimates.plan import MEASURED, PREDICTED

if TYPE_CHECKING:
    from memprobe.core.cards.catalog import Card
    from memprobe.core.records.results import ScanResult

__all__ = ["MEASURED", "PREDICTED", "ServingPlan", "ServingRow"]


@dataclass
class ServingRow:
    """One precision of a generation on one card: the concurrent sequences that fit (`source` MEASURED or
    PREDICTED), the safe figure of a prediction, and what only a measurement gives (tokens/s, the KV capacity)."""

    card: str
    workload: str
    precision: str
    source: str
    sequences: int | None  # None: the card cannot run the precision
    safe_sequences: int | None = None  # predicted: the batch that leaves the prediction's margin unused
    decode_tokens_per_s: float | None = None
    prefill_tokens_per_s: float | None = None
    kv_bytes_per_token: int | None = None
    kv_capacity_sequences: int | None = None
    vllm_formula_tokens: int | None = None
    origin: str = ""  # the result file, or how it was predicted
    note: str = ""


@dataclass
class ServingPlan:
    """The rows of a serving question (one card's, or every catalog card's) and the notes that say what they are."""

    workload: str
    card: str
    rows: list[ServingRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data (raw numbers)."""
        return {
            "workload": self.workload,
            "card": self.card,
            "rows": [asdict(r) for r in self.rows],
            "notes": self.notes,
        }


def measured_row(
    card: Card, path: Path, result: ScanResult, precision: str, label: str | None = None
) -> ServingRow | None:
    """The measured ServingRow of one precision of a generate result, None where it did not finish or recorded no
    generation. `label`: the workload's name in the table (default: the result's workload name)."""
    p = result.precisions.get(precision)
    g = p.generation if p is not None else None
    if p is None or g is None or p.status != "done" or g.sequences is None:
        return None
    return ServingRow(
        card.name,
        label or result.workload.name,
        precision,
        MEASURED,
        int(g.sequences),
        decode_tokens_per_s=g.decode_tokens_per_s,
        prefill_tokens_per_s=g.prefill_tokens_per_s,
        kv_bytes_per_token=g.kv_bytes_per_token,
        kv_capacity_sequences=g.kv_capacity_sequences,
        vllm_formula_tokens=g.vllm_formula_tokens,
        origin=str(path),
    )
