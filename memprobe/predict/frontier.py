"""`memprobe predict --search frontier`: the batch x sequence-length frontier predicted point by point (labelled).

Each point is the prediction of the same variant a measured point scans (core/records/frontier.py point_workload), at one
memory size: the max batch at length L, or the max length at batch b (the sequence-length model). The ladder walk
and the time budget are the measured frontier's (core/records/frontier.py walk).
"""

from __future__ import annotations

from memprobe.core.records.frontier import (
    ERROR,
    GENERATION_NOTE,
    PREDICTED,
    SEQ_AT_BATCH,
    Frontier,
    FrontierPoint,
    as_context,
    frontier_kinds,
    ladder_of,
    point_workload,
    walk,
)
from memprobe.core.workload.registry import Workload
from memprobe.predict.progress import TraceProgress, silent
from memprobe.predict.summary import MemorySize, predict
from memprobe.predict.trace import PredictError

PREDICT_CAP = 65536  # the scan's default cap on n (batch or length), so both walk the same ladders


def predict_frontier(
    workload: Workload,
    precision: str,
    size: MemorySize,
    budget_s: float | None,
    checkpointing: bool = False,
    lora: int | None = None,
    steps: int = 3,
    workers: int = 1,
    progress: TraceProgress | None = None,
) -> Frontier:
    """The predicted frontier of `workload` in `precision` for the memory `size`, within `budget_s` seconds (None:
    no limit). A point that cannot be traced is an ERROR point (its ladder stops). Raises core.frontier.FrontierError
    for a workload without a frontier."""
    kinds = frontier_kinds(workload)
    start, seq_cap, added = ladder_of(workload, PREDICT_CAP)
    mode = "generate" if added else "train"
    progress = progress or silent()

    def measure(kind: str, fixed: int) -> FrontierPoint:
        variant = point_workload(workload, kind, fixed, checkpointing, lora)
        progress.phase(f"frontier point {variant.name} {precision}")
        try:
            found = predict(variant, [precision], [size], steps=steps, workers=workers, progress=progress, mode=mode)
        except PredictError as exc:
            return FrontierPoint(kind, fixed, ERROR, note=str(exc).splitlines()[0][:200])
        n = found.precisions[precision].max_batch[size.label]
        if added and kind == SEQ_AT_BATCH:  # a generation's prompt stops where the model's positions do
            n = min(n, seq_cap - added)
        return as_context(FrontierPoint(kind, fixed, PREDICTED, n, n + 1, note=f"predicted for {size.label}"), added)

    points, notes = walk(measure, budget_s, seq_cap, PREDICT_CAP, seq_start=start, kinds=kinds)
    return Frontier(precision, PREDICTED, budget_s, points, notes + ([GENERATION_NOTE] if added else []))
