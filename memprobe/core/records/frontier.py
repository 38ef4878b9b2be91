"""The batch x sequence-length frontier: its record (a result file's optional `frontier` section) and the ladder walk.

No torch. The frontier is the max batch at each length of a ladder (512, 1024, 2048, ...) and the max length at
batch 1, 2, 4, ...; each point is found and proven by whoever measures it (a scan: fits, one more fails, fresh
processes; or a prediction, labelled). The walk alternates the two ladders so a time budget covers both; a point
is not started when the time spent plus the longest point so far would pass the budget, and the rung it stopped
at is recorded as skipped, never guessed. A ladder ends at its cap, when nothing fits (max batch 0 at a length),
or when the max length at a batch falls below the first length of the other ladder.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Annotated, Any, Callable, Mapping

from memprobe.core.records.fieldtypes import BATCH_MAX, Batch, Precision, Range, Seconds, Words
from memprobe.core.records.generation import frontier_ladder, frontier_point, settings_of
from memprobe.core.workload.registry import Workload
from memprobe.core.workload.variants import LLM_FAMILIES, VariantRequest, apply_variant

BATCH_AT_SEQ, SEQ_AT_BATCH = "batch_at_seq", "seq_at_batch"
MEASURED, PREDICTED, SKIPPED, ERROR = "measured", "predicted", "skipped", "error"
SEQ_START = 512


@dataclass
class FrontierPoint:
    """One point: `kind` BATCH_AT_SEQ (fixed = the length, found = the max batch) or SEQ_AT_BATCH (fixed = the
    batch, found = the max length); `fails` the n one above that failed; status MEASURED, PREDICTED, SKIPPED or
    ERROR; `verified` whether the pair was confirmed in fresh processes; `file` the point's own result file."""

    kind: Annotated[str, Words((BATCH_AT_SEQ, SEQ_AT_BATCH))]
    fixed: Annotated[int, Range(1, BATCH_MAX)]
    status: Annotated[str, Words((MEASURED, PREDICTED, SKIPPED, ERROR))]
    found: Batch | None = None
    fails: Batch | None = None
    verified: bool = False
    seconds: Seconds | None = None
    file: str = ""
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FrontierPoint":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass
class Frontier:
    """The frontier of one workload in one precision, measured or predicted (`source`), within `budget_s`."""

    precision: Precision
    source: Annotated[str, Words((MEASURED, PREDICTED))]
    budget_s: Seconds | None = None
    points: list[FrontierPoint] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "precision": self.precision,
            "source": self.source,
            "budget_s": self.budget_s,
            "points": [p.to_dict() for p in self.points],
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Frontier":
        return cls(
            data["precision"],
            data["source"],
            data.get("budget_s"),
            [FrontierPoint.from_dict(p) for p in data.get("points", [])],
            list(data.get("notes", [])),
        )

    def found(self, kind: str) -> dict[int, int]:
        """fixed -> found for the points of `kind` that were measured or predicted."""
        return {
            p.fixed: p.found
            for p in self.points
            if p.kind == kind and p.status in (MEASURED, PREDICTED) and p.found is not None
        }


def ladder(start: int, cap: int) -> list[int]:
    """start, 2 x start, ... up to `cap` (inclusive)."""
    out, n = [], start
    while n <= cap:
        out.append(n)
        n *= 2
    return out


Measure = Callable[[str, int], FrontierPoint]


def walk(
    measure: Measure,
    budget_s: float | None,
    seq_cap: int,
    batch_cap: int,
    seq_start: int = SEQ_START,
    clock: Callable[[], float] = time.monotonic,
    kinds: tuple[str, ...] = (BATCH_AT_SEQ, SEQ_AT_BATCH),
) -> tuple[list[FrontierPoint], list[str]]:
    """Walk the two ladders (lengths from `seq_start` to `seq_cap`, batches 1, 2, 4 ... to `batch_cap`), alternating,
    calling measure(kind, fixed) for each point. Returns the points (measured, errors and skipped rungs) and notes
    (where the walk is not monotone). A point is skipped, not guessed, when the budget would be passed."""
    rungs = {BATCH_AT_SEQ: ladder(seq_start, seq_cap), SEQ_AT_BATCH: ladder(1, batch_cap)}
    queues = {k: list(rungs[k]) for k in kinds}
    started, longest = clock(), 0.0
    points: list[FrontierPoint] = []
    while any(queues.values()):
        for kind in kinds:
            if not queues[kind]:
                continue
            fixed = queues[kind].pop(0)
            spent = clock() - started
            if budget_s is not None and spent + longest > budget_s:
                points.append(
                    FrontierPoint(
                        kind,
                        fixed,
                        SKIPPED,
                        note=f"time budget {budget_s:g} s: {spent:.0f} s "
                        f"spent and the longest point took {longest:.0f} s; the ladder stops here",
                    )
                )
                queues[kind] = []
                continue
            before = clock()
            point = measure(kind, fixed)
            point.seconds = round(clock() - before, 2)
            longest = max(longest, point.seconds)
            points.append(point)
            if point.status == ERROR or not point.found or (kind == SEQ_AT_BATCH and point.found < seq_start):
                queues[kind] = []  # nothing fits further along this ladder (or it fails as such)
    return points, monotone_notes(points)


def monotone_notes(points: list[FrontierPoint]) -> list[str]:
    """Where the frontier is not monotone: a longer length with a larger max batch, or a larger batch with a longer
    max length (measurement or allocator effects; the points stand as found)."""
    notes = []
    for kind, what in ((BATCH_AT_SEQ, "max batch at length"), (SEQ_AT_BATCH, "max length at batch")):
        found = sorted(
            (p.fixed, p.found)
            for p in points
            if p.kind == kind and p.found is not None and p.status in (MEASURED, PREDICTED)
        )
        for (a, fa), (b, fb) in zip(found, found[1:]):
            if fb > fa:
                notes.append(f"not monotone: {what} {b} is {fb}, above {fa} at {a}")
    return notes


class FrontierError(ValueError):
    """A workload that has no frontier (not an LLM nor an hf: model); one line."""


def point_workload(
    workload: Workload, kind: str, fixed: int, checkpointing: bool = False, lora: int | None = None
) -> Workload:
    """The variant a point scans: the batch search at length `fixed`, or the length search at batch `fixed`.
    An hf: model takes the length as its seq_len param (it has no length search). A generation's frontier
    (core/records/generation.py) takes the length as the context, prompt + new tokens."""
    if settings_of(workload) is not None:
        return frontier_point(workload, kind == SEQ_AT_BATCH, fixed)
    if workload.family == "hf":
        return replace(workload, name=f"{workload.name}+seq{fixed}", params={**workload.params, "seq_len": fixed})
    if kind == BATCH_AT_SEQ:
        request = VariantRequest(seq_len=fixed, checkpointing=checkpointing, lora=lora)
    else:
        request = VariantRequest(search="seq-len", batch=fixed, checkpointing=checkpointing, lora=lora)
    return apply_variant(workload, request)


def ladder_of(workload: Workload, cap: int) -> tuple[int, int, int]:
    """(first length, last length, what a point's found length adds) of a workload's frontier: a generation's
    lengths are contexts (its ladder from core/records/generation.py, a found prompt length plus the N new tokens), the
    others' sequence lengths from SEQ_START up to `cap`, as found."""
    settings = settings_of(workload)
    if settings is None:
        return SEQ_START, cap, 0
    first, last = frontier_ladder(workload, cap)
    return first, last, int(settings["new_tokens"])


def as_context(point: FrontierPoint, added: int) -> FrontierPoint:
    """A max-length point of a generation's frontier with its prompt lengths made contexts (+ `added`, N)."""
    if added and point.kind == SEQ_AT_BATCH:
        point.found = None if point.found is None else point.found + added
        point.fails = None if point.fails is None else point.fails + added
    return point


GENERATION_NOTE = "generation: lengths are contexts, prompt + new tokens, the static KV cache's length"


def frontier_kinds(workload: Workload) -> tuple[str, ...]:
    """The ladders a workload has: both for LLM families and generations; hf: models only the max batch at each
    length. Raises FrontierError for other families."""
    if workload.family in LLM_FAMILIES or settings_of(workload) is not None:
        return (BATCH_AT_SEQ, SEQ_AT_BATCH)
    if workload.family == "hf":
        return (BATCH_AT_SEQ,)
    raise FrontierError(
        f"--search frontier applies to LLM workloads (family {', '.join(LLM_FAMILIES)}) and hf: "
        f"models; {workload.name} is {workload.family}"
    )


def frontier_name(workload: Workload, checkpointing: bool, lora: int | None) -> str:
    return workload.name + VariantRequest(checkpointing=checkpointing, lora=lora).suffix() + "+frontier"
