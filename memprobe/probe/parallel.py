"""`scan --parallel`: different workloads and precisions on different GPUs at once, same result files.

Each job (one workload in one precision) is a child process (`memprobe scan-part`) pinned to one GPU with
CUDA_VISIBLE_DEVICES, given its workload and ScanOptions as data (PartRequest); a GPU takes the next job as soon as
its last one ends. When every precision of
a workload has finished, the per-precision files are merged into the one file a serial scan of that
workload writes (precisions in the order asked, each recording the GPU it ran on). Logs and a
summary (wall time against the serial estimate: the sum of the jobs' own wall times) go to
`<out>/parallel_<time>/`, beside each child's request.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from memprobe.core.process.child import Child
from memprobe.core.process.wire import from_json, to_wire
from memprobe.core.records.results import ResultFileError, ScanResult, read_result, result_filename, write_result
from memprobe.core.text.textlists import visible_devices
from memprobe.core.workload.registry import Workload
from memprobe.probe.distributed.launch import launch_env
from memprobe.probe.scan import ScanOptions

POLL_S = 0.5


@dataclass
class Job:
    """One child scan: a workload in one precision, the GPU slot it ran on and how it ended."""

    workload: Workload
    precision: str
    slot: str | None = None
    child: Child | None = None
    started: float = 0.0
    seconds: float | None = None
    returncode: int | None = None
    part_dir: Path | None = None
    log: Path | None = None


@dataclass
class ParallelSummary:
    """Wall time of the parallel scan against the serial estimate (sum of the jobs' wall times)."""

    wall_seconds: float
    serial_estimate_seconds: float
    slots: list[str]
    jobs: list[dict[str, Any]] = field(default_factory=list)
    folder: Path | None = None

    @property
    def speedup(self) -> float | None:
        return self.serial_estimate_seconds / self.wall_seconds if self.wall_seconds > 0 else None


@dataclass(frozen=True)
class PartRequest:
    """What one child scan runs: a workload as the parent resolved it (a variant, a model given by name with its
    options applied), in the one precision of `options` (the parent's ScanOptions, as to_dict() writes them: the
    environment of its processes stays the parent's), into `out_dir`. The parent writes it as a JSON file; the child
    (`memprobe scan-part FILE`) reads it back whole, every field checked (core/process/wire.py), so every option of
    the parent's scan reaches the child as it was, with nothing rebuilt as a command line."""

    workload: Workload
    options: ScanOptions
    out_dir: str

    @classmethod
    def of(cls, workload: Workload, opts: ScanOptions, precision: str, out_dir: Path) -> "PartRequest":
        """The request of the child that scans `workload` in `precision` with the parent's `opts`."""
        return cls(workload, replace(opts, precisions=[precision]), str(out_dir))

    def write(self, path: Path) -> Path:
        """Write the request to `path` (JSON) for the child to read."""
        path.write_text(json.dumps(to_wire(self), indent=1), encoding="utf-8")
        return path

    @classmethod
    def read(cls, path: str | Path) -> "PartRequest":
        """The request a parent wrote to `path`. Raises OSError where it cannot be read, ValueError where it is not
        a request (MessageError: not JSON, a field missing or of another type; an option ScanOptions refuses)."""
        return from_json(cls, Path(path).read_text(encoding="utf-8"))

    def scan(self) -> tuple[Workload, ScanOptions]:
        """The workload and ScanOptions the child scans."""
        return self.workload, self.options


def gpu_slots(count: int | None, device: str, visible: str | None = None) -> list[str]:
    """The GPUs to spread jobs over: the first `count` (None: all) of CUDA_VISIBLE_DEVICES's entries, or
    of NVML's indices. On the CPU (tests, demos) `count` numbered slots. Raises ValueError for none."""
    if device == "cpu":
        return [str(i) for i in range(count or 1)]
    ids = visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible)
    if ids is None:
        from memprobe.probe.device import gpus

        ids = [str(g.index) for g in gpus()]
    if count is not None:
        if count > len(ids):
            raise ValueError(f"--gpus {count}: only {len(ids)} GPU(s) visible")
        ids = ids[:count]
    if not ids:
        raise ValueError("no GPU to run on")
    return ids


def merge_parts(
    workload: Workload, precisions: list[str], parts: dict[str, tuple[Path | None, Job]], out_dir: Path, mode: str
) -> tuple[ScanResult, Path] | None:
    """One result file for `workload` from its per-precision files (as a serial scan writes it);
    None when no part left a file. The merged file says which GPU ran each precision."""
    read: dict[str, ScanResult] = {}
    for precision, (path, _job) in parts.items():
        if path is not None:
            try:
                read[precision] = read_result(path)
            except ResultFileError:
                continue
    if not read:
        return None
    first = read[next(p for p in precisions if p in read)]
    merged = ScanResult(workload=first.workload, environment=first.environment.copy(), settings=first.settings.copy())
    merged.settings.precisions = [p for p in precisions if p in read]
    merged.environment.CUDA_VISIBLE_DEVICES = None  # each precision ran on its own GPU: see its settings
    for precision in precisions:
        if precision not in read:
            continue
        part = read[precision].precisions.get(precision)
        if part is None:
            continue
        job = parts[precision][1]
        part.settings = part.settings.copy()
        part.settings.parallel = {"gpu": job.slot, "job_seconds": job.seconds, "gpu_name": read[precision].gpu_name()}
        merged.precisions[precision] = part
    merged.settings.parallel = {"gpus": sorted({j.slot for _p, j in parts.values() if j.slot is not None})}
    complete = all(read.get(p) is not None and read[p].status == "complete" for p in precisions)
    merged.status = "complete" if complete else "partial"
    gpu = merged.gpu_name(unknown="unknown-gpu")
    path = write_result(merged, out_dir / result_filename(gpu, workload.name, mode))
    return merged, path


def run_parallel(
    workloads: list[Workload],
    opts: ScanOptions,
    slots: list[str],
    out_dir: str | Path,
    on_event: Callable[[str], None] = lambda _text: None,
    python: str | None = None,
) -> tuple[list[tuple[ScanResult, Path]], ParallelSummary]:
    """Run every (workload, precision) as its own child scan, at most one per GPU slot at a time, and
    merge each workload's parts into one result file. KeyboardInterrupt interrupts the children (they
    write what finished), merges what exists, and is re-raised."""
    out_dir = Path(out_dir)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    folder = out_dir / f"parallel_{stamp}"
    folder.mkdir(parents=True, exist_ok=True)
    pending = [Job(w, p) for w in workloads for p in opts.precisions]
    jobs = list(pending)
    free = list(slots)
    running: list[Job] = []
    base_env = launch_env()
    started = time.perf_counter()
    try:
        while pending or running:
            while pending and free:
                job = pending.pop(0)
                _start(job, free.pop(0), folder, opts, base_env, python)
                running.append(job)
                on_event(f"started {job.workload.name} {job.precision} on GPU {job.slot}")
            time.sleep(POLL_S)
            for job, child in [(j, j.child) for j in running if j.child is not None and not j.child.alive()]:
                job.returncode, job.seconds = child.returncode, round(time.perf_counter() - job.started, 2)
                running.remove(job)
                if job.slot is not None:
                    free.append(job.slot)
                on_event(
                    f"finished {job.workload.name} {job.precision} on GPU {job.slot} in {job.seconds:.0f} s "
                    f"(exit {job.returncode})"
                )
    except KeyboardInterrupt:
        _interrupt(running)
        _merge_all(workloads, opts, jobs, out_dir)
        raise
    wall = time.perf_counter() - started
    written = _merge_all(workloads, opts, jobs, out_dir)
    summary = ParallelSummary(
        round(wall, 2),
        round(sum(j.seconds or 0.0 for j in jobs), 2),
        list(slots),
        [
            {
                "workload": j.workload.name,
                "precision": j.precision,
                "gpu": j.slot,
                "seconds": j.seconds,
                "returncode": j.returncode,
            }
            for j in jobs
        ],
        folder,
    )
    _write_summary(folder, summary, written)
    return written, summary


def _start(job: Job, slot: str, folder: Path, opts: ScanOptions, base_env: dict[str, str], python: str | None) -> None:
    """Start `job`'s child scan on GPU `slot`: its request written to `folder`, its part file and log there."""
    job.slot = slot
    job.part_dir = folder / "parts" / f"{job.workload.name}_{job.precision}"
    job.log = folder / f"{job.workload.name}_{job.precision}.log"
    pinned = {"CUDA_VISIBLE_DEVICES": slot} if opts.device == "cuda" else {}
    part = PartRequest.of(job.workload, opts, job.precision, job.part_dir)
    # not .json: a report over --out reads every .json below it as a result file
    asked = part.write(folder / f"{job.workload.name}_{job.precision}.request")
    cmd = [python or sys.executable, "-m", "memprobe", "scan-part", str(asked)]
    # A Child that does not talk: a child scan's answer is its result file.
    job.child = Child.start(cmd, base=base_env, env=pinned, talk=False, log=job.log)
    job.started = time.perf_counter()


def _interrupt(running: list[Job]) -> None:
    """Ctrl-C: every running child scan interrupted at once (each writes what finished, marked partial), killed
    where it has not ended within 60 s."""
    children = [job.child for job in running if job.child is not None]
    for child in children:
        child.send_signal(signal.SIGINT)
    for child in children:
        if not child.wait(60):
            child.kill()
    for job in running:
        job.returncode = job.child.returncode if job.child is not None else None


def _write_summary(folder: Path, summary: ParallelSummary, written: list[tuple[ScanResult, Path]]) -> None:
    """summary.jsonl in the run's folder: a line per child scan, then the totals and the files written."""
    with open(folder / "summary.jsonl", "w", encoding="utf-8") as handle:
        for line in summary.jobs:
            handle.write(json.dumps(line) + "\n")
        totals = {
            "wall_seconds": summary.wall_seconds,
            "serial_estimate_seconds": summary.serial_estimate_seconds,
            "gpus": summary.slots,
            "speedup": summary.speedup,
            "files": [str(p) for _r, p in written],
        }
        handle.write(json.dumps(totals) + "\n")


def _merge_all(
    workloads: list[Workload], opts: ScanOptions, jobs: list[Job], out_dir: Path
) -> list[tuple[ScanResult, Path]]:
    written = []
    for workload in workloads:
        parts: dict[str, tuple[Path | None, Job]] = {}
        for job, part_dir in [(j, j.part_dir) for j in jobs if j.workload.name == workload.name and j.part_dir]:
            files = sorted(part_dir.glob("*.json")) if part_dir.is_dir() else []
            parts[job.precision] = (files[-1] if files else None, job)
        merged = merge_parts(workload, opts.precisions, parts, out_dir, opts.mode)
        if merged is not None:
            written.append(merged)
            for _path, job in parts.values():
                if job.part_dir is not None:
                    shutil.rmtree(job.part_dir, ignore_errors=True)
    for job in jobs[:1]:
        if job.part_dir is not None:
            try:
                job.part_dir.parent.rmdir()  # only when every part was merged away
            except OSError:
                pass
    return written
