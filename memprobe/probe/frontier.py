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

from memprobe.core.records.frontier import (
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
from memprobe.core.records.records import Proof
from memprobe.core.records.results import ScanResult, result_filename, write_result
from memprobe.core.workload.registry import Workload
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
    scan = _FrontierScan(workload, opts, Path(out_dir), progress, budget_s, checkpointing, lora)
    for precision in opts.precisions:
        scan.precision(precision)
    found_any = any(p.status == MEASURED for f in scan.frontiers.values() for p in f.points)
    scan.result.status = "complete" if found_any else "failed"
    scan.save()
    return scan.result, scan.path  # None when no point finished (nothing written)


class _FrontierScan:
    """One frontier scan: its result (the frontier of each precision so far), where it is written (`path`, once
    the first point finished) and how many points finished."""

    def __init__(
        self,
        workload: Workload,
        opts: ScanOptions,
        out_dir: Path,
        progress: ScanProgress,
        budget_s: float | None,
        checkpointing: bool,
        lora: int | None,
    ) -> None:
        self.workload, self.opts, self.out_dir, self.progress, self.budget_s = (
            workload,
            opts,
            out_dir,
            progress,
            budget_s,
        )
        self.checkpointing, self.lora = checkpointing, lora
        self.kinds = frontier_kinds(workload)
        self.start, self.seq_cap, self.added = ladder_of(workload, opts.max_batch)
        self.name = frontier_name(workload, checkpointing, lora)
        record = {
            **workload.to_dict(),
            "name": self.name,
            "params": {**workload.params, "checkpointing": checkpointing, "lora": lora},
        }
        self.result = ScanResult(
            workload=record,
            environment=host_environment(),
            settings={**opts.to_dict(), "search": "frontier", "frontier_budget_s": budget_s},
        )
        self.frontiers: dict[str, Frontier] = {}
        self.result.frontier = self.frontiers  # filled in as each precision's points are measured
        self.points_dir = out_dir / "frontier-points"
        self.path: Path | None = None
        self.finished = 0

    def save(self) -> None:
        """Write the frontier file, once a point finished."""
        # Nothing before the first point finishes: no GPU seen, no point to keep (a file would be empty and named
        # after the device type, not the GPU).
        if not self.finished:
            return
        if self.path is None:
            gpu = self.result.gpu_name(unknown=self.opts.device)
            self.path = self.out_dir / result_filename(gpu, self.name, self.opts.mode)
        write_result(self.result, self.path)

    def precision(self, precision: str) -> None:
        """Walk the frontier of one precision, point by point (core/frontier.walk), within the budget."""
        frontier = Frontier(precision, MEASURED, self.budget_s)
        point_opts = replace(self.opts, precisions=[precision], measure=False, curve=False)

        def measure(kind: str, fixed: int) -> FrontierPoint:
            return self.point(frontier, point_opts, kind, fixed)

        points, notes = walk(
            measure, self.budget_s, self.seq_cap, self.opts.max_batch, seq_start=self.start, kinds=self.kinds
        )
        frontier.points, frontier.notes = points, notes + ([GENERATION_NOTE] if self.added else [])
        if self.workload.family == "hf" and not self.added:
            frontier.notes.append("hf: models have no sequence-length search: only the max batch at each length")
        self.frontiers[precision] = frontier
        self.save()

    def point(self, frontier: Frontier, point_opts: ScanOptions, kind: str, fixed: int) -> FrontierPoint:
        """Scan one point (a variant of the workload at `fixed` batch or length) and add it to `frontier`. Raises
        ScanInterrupted (after saving what finished) on Ctrl-C."""
        precision = frontier.precision
        variant = point_workload(self.workload, kind, fixed, self.checkpointing, self.lora)
        if kind == SEQ_AT_BATCH:
            # The predicted start predicts a max batch: a point over the length starts from the memory model.
            point_opts = replace(point_opts, predicted_start=False)
            if self.added:  # a generation's prompt stops where the model's positions do
                point_opts = replace(point_opts, max_batch=min(point_opts.max_batch, self.seq_cap - self.added))
        try:
            scanned, path = scan_workload(variant, point_opts, self.points_dir, self.progress)
        except ScanInterrupted as stop:
            self.result.settings.interrupted = True
            self.save()
            note = getattr(self.progress, "note", None)
            if not self.finished and stop.path and note is not None:
                note(f"the point interrupted is in {stop.path} (marked partial)")
            raise ScanInterrupted(self.path) from None
        if not self.result.gpu_name(unknown=""):
            self.result.environment.merge(scanned.environment.to_dict())
        self.finished += 1
        p = scanned.precisions[precision]
        proof = p.proof or Proof()
        point = (
            FrontierPoint(kind, fixed, MEASURED, p.max_batch, proof.fails, bool(proof.verified), file=str(path))
            if p.status == "done"
            else FrontierPoint(kind, fixed, ERROR, file=str(path), note=(p.error or p.stop).splitlines()[0][:200])
        )
        frontier.points.append(as_context(point, self.added))
        self.frontiers[precision] = frontier
        self.save()
        return point
