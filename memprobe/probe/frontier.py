"""`memprobe scan --search frontier`: the batch x sequence-length frontier, each point a scan of its own variant.

A point is the existing per-point scan (probe/scan.py scan_workload: the search, then the fresh-process proof) of
the workload made a variant: "max batch at length L" is the batch search at --seq-len L, "max length at batch b"
the sequence-length search at batch b. Points are timed by nothing else (throughput and the curve are off), and
each writes its own result file under <out>/frontier-points/. The frontier file (the base workload's name
+frontier) holds the `frontier` section, rewritten atomically after every point.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from memprobe.core.frontier import (
    ERROR,
    GENERATION_NOTE,
    MEASURED,
    SEQ_AT_BATCH,
    Frontier,
    FrontierPoint,
    as_context,
    frontier_kinds,
    frontier_name,
    ladder_of,
    point_workload,
    walk,
)
from memprobe.core.records import Proof
from memprobe.core.registry import Workload
from memprobe.core.results import ScanResult, result_filename, write_result
from memprobe.probe.device import host_environment
from memprobe.probe.options import ScanOptions
from memprobe.probe.scan import ScanInterrupted, ScanProgress, scan_workload


def scan_frontier(
    workload: Workload,
    opts: ScanOptions,
    out_dir: str | Path,
    progress: ScanProgress,
    budget_s: float | None,
    checkpointing: bool = False,
    lora: int | None = None,
) -> tuple[ScanResult, Path | None]:
    """Measure the frontier of `workload` in each precision of `opts`, each within `budget_s` seconds (None: no
    limit). Returns the frontier result and its path (None, and no file written, when no point finished). A point
    over the batch starts from `memprobe predict`'s figure where the scan's options ask for it (predicted_start).
    Raises FrontierError for a workload without one; on Ctrl-C the file keeps the points finished (partial; no file
    before the first) and ScanInterrupted is raised."""
    kinds = frontier_kinds(workload)
    start, seq_cap, added = ladder_of(workload, opts.max_batch)
    name = frontier_name(workload, checkpointing, lora)
    record = {
        **workload.to_dict(),
        "name": name,
        "params": {**workload.params, "checkpointing": checkpointing, "lora": lora},
    }
    result = ScanResult(
        workload=record,
        environment=host_environment(),
        settings={**opts.to_dict(), "search": "frontier", "frontier_budget_s": budget_s},
    )
    frontiers: dict[str, Frontier] = {}
    result.frontier = frontiers  # filled in as each precision's points are measured
    points_dir = Path(out_dir) / "frontier-points"
    state: dict[str, Any] = {"path": None, "finished": 0}

    def save() -> None:
        # Nothing before the first point finishes: no GPU seen, no point to keep (a file would be empty and named
        # after the device type, not the GPU).
        if not state["finished"]:
            return
        if state["path"] is None:
            gpu = result.gpu_name(unknown=opts.device)
            state["path"] = Path(out_dir) / result_filename(gpu, name, opts.mode)
        write_result(result, state["path"])

    for precision in opts.precisions:
        frontier = Frontier(precision, MEASURED, budget_s)
        point_opts = replace(opts, precisions=[precision], measure=False, curve=False)

        def measure(
            kind: str,
            fixed: int,
            precision: str = precision,
            frontier: Frontier = frontier,
            point_opts: ScanOptions = point_opts,
        ) -> FrontierPoint:
            variant = point_workload(workload, kind, fixed, checkpointing, lora)
            if kind == SEQ_AT_BATCH:
                # The predicted start predicts a max batch: a point over the length starts from the memory model.
                point_opts = replace(point_opts, predicted_start=False)
                if added:  # a generation's prompt stops where the model's positions do
                    point_opts = replace(point_opts, max_batch=min(point_opts.max_batch, seq_cap - added))
            try:
                scanned, path = scan_workload(variant, point_opts, points_dir, progress)
            except ScanInterrupted as stop:
                result.settings.interrupted = True
                save()
                note = getattr(progress, "note", None)
                if not state["finished"] and stop.path and note is not None:
                    note(f"the point interrupted is in {stop.path} (marked partial)")
                raise ScanInterrupted(state["path"]) from None
            if not result.gpu_name(unknown=""):
                result.environment.merge(scanned.environment.to_dict())
            state["finished"] += 1
            p = scanned.precisions[precision]
            proof = p.proof or Proof()
            point = (
                FrontierPoint(kind, fixed, MEASURED, p.max_batch, proof.fails, bool(proof.verified), file=str(path))
                if p.status == "done"
                else FrontierPoint(kind, fixed, ERROR, file=str(path), note=(p.error or p.stop).splitlines()[0][:200])
            )
            frontier.points.append(as_context(point, added))
            frontiers[precision] = frontier
            save()
            return point

        points, notes = walk(measure, budget_s, seq_cap, opts.max_batch, seq_start=start, kinds=kinds)
        frontier.points, frontier.notes = points, notes + ([GENERATION_NOTE] if added else [])
        if workload.family == "hf" and not added:
            frontier.notes.append("hf: models have no sequence-length search: only the max batch at each length")
        frontiers[precision] = frontier
        save()
    found_any = any(p.status == MEASURED for f in frontiers.values() for p in f.points)
    result.status = "complete" if found_any else "failed"
    save()
    return result, state["path"]  # None when no point finished (nothing written)
