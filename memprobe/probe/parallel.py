"""`scan --parallel`: different workloads and precisions on different GPUs at once, same result files.

Each job (one workload in one precision) is a child `memprobe scan` process pinned to one GPU with
CUDA_VISIBLE_DEVICES; a GPU takes the next job as soon as its last one ends. When every precision of
a workload has finished, the per-precision files are merged into the one file a serial scan of that
workload writes (precisions in the order asked, each recording the GPU it ran on). Logs and a
summary (wall time against the serial estimate: the sum of the jobs' own wall times) go to
`<out>/parallel_<time>/`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from memprobe.core.child import Child
from memprobe.core.registry import Workload
from memprobe.core.results import ResultFileError, ScanResult, read_result, result_filename, write_result
from memprobe.core.textlists import visible_devices
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


def scan_args(opts: ScanOptions, models_file: str | None) -> list[str]:
    """The `memprobe scan` options that reproduce `opts` in a child (model, precision and --out apart)."""
    args = [
        "--mode",
        opts.mode,
        "--steps",
        str(opts.steps),
        "--warmup",
        str(opts.warmup),
        "--timed-steps",
        str(opts.timed_steps),
        "--max-batch",
        str(opts.max_batch),
        "--max-trials",
        str(opts.max_trials),
        "--repeat",
        str(opts.repeat),
        "--device",
        opts.device,
    ]
    if opts.batches:
        args += ["--batch", ",".join(map(str, opts.batches))]
    if not opts.measure:
        args.append("--no-throughput")
    if opts.cudnn_benchmark:
        args.append("--cudnn-benchmark")
    if opts.compile:
        args.append("--compile")
    if opts.predicted_start is not None:
        args.append("--predicted-start" if opts.predicted_start else "--no-predicted-start")
    if opts.breakdown is not None:
        args.append("--breakdown" if opts.breakdown else "--no-breakdown")
    if not opts.curve:
        args.append("--no-curve")
    elif opts.curve_batches:
        args += ["--curve", ",".join(map(str, opts.curve_batches))]
    if opts.curve_budget_s is not None:
        args += ["--curve-budget", repr(opts.curve_budget_s)]
    if opts.cpu_budget_bytes is not None:
        args += ["--cpu-memory-budget", str(opts.cpu_budget_bytes)]
    if opts.memory_cap_bytes is not None:
        args += ["--memory-cap", str(opts.memory_cap_bytes)]
    if models_file:
        args += ["--models", str(models_file)]
    return args


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
    models_file: str | None = None,
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
    common = scan_args(opts, models_file)
    started = time.perf_counter()
    try:
        while pending or running:
            while pending and free:
                job = pending.pop(0)
                job.slot = free.pop(0)
                job.part_dir = folder / "parts" / f"{job.workload.name}_{job.precision}"
                job.log = folder / f"{job.workload.name}_{job.precision}.log"
                pinned = {"CUDA_VISIBLE_DEVICES": job.slot} if opts.device == "cuda" else {}
                cmd = [
                    python or sys.executable,
                    "-m",
                    "memprobe",
                    "scan",
                    "--model",
                    job.workload.name,
                    "--precision",
                    job.precision,
                    "--out",
                    str(job.part_dir),
                    *common,
                ]
                # A Child that does not talk: a child scan's answer is its result file.
                job.child = Child.start(cmd, base=base_env, env=pinned, talk=False, log=job.log)
                job.started = time.perf_counter()
                running.append(job)
                on_event(f"started {job.workload.name} {job.precision} on GPU {job.slot}")
            time.sleep(POLL_S)
            for job in [j for j in running if j.child is not None and not j.child.alive()]:
                job.returncode, job.seconds = job.child.returncode, round(time.perf_counter() - job.started, 2)
                running.remove(job)
                free.append(job.slot)
                on_event(
                    f"finished {job.workload.name} {job.precision} on GPU {job.slot} in {job.seconds:.0f} s "
                    f"(exit {job.returncode})"
                )
    except KeyboardInterrupt:
        children = [job.child for job in running if job.child is not None]
        for child in children:
            child.send_signal(signal.SIGINT)  # each child scan writes what finished, marked partial: all at once
        for child in children:
            if not child.wait(60):
                child.kill()
        for job in running:
            job.returncode = job.child.returncode if job.child is not None else None
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
    with open(folder / "summary.jsonl", "w", encoding="utf-8") as handle:
        for job in summary.jobs:
            handle.write(json.dumps(job) + "\n")
        handle.write(
            json.dumps(
                {
                    "wall_seconds": summary.wall_seconds,
                    "serial_estimate_seconds": summary.serial_estimate_seconds,
                    "gpus": slots,
                    "speedup": summary.speedup,
                    "files": [str(p) for _r, p in written],
                }
            )
            + "\n"
        )
    return written, summary


def _merge_all(
    workloads: list[Workload], opts: ScanOptions, jobs: list[Job], out_dir: Path
) -> list[tuple[ScanResult, Path]]:
    written = []
    for workload in workloads:
        parts: dict[str, tuple[Path | None, Job]] = {}
        for job in (j for j in jobs if j.workload.name == workload.name and j.part_dir is not None):
            files = sorted(job.part_dir.glob("*.json")) if job.part_dir.is_dir() else []
            parts[job.precision] = (files[-1] if files else None, job)
        merged = merge_parts(workload, opts.precisions, parts, out_dir, opts.mode)
        if merged is not None:
            written.append(merged)
            for _path, job in parts.values():
                shutil.rmtree(job.part_dir, ignore_errors=True)
    for job in jobs[:1]:
        if job.part_dir is not None:
            try:
                job.part_dir.parent.rmdir()  # only when every part was merged away
            except OSError:
                pass
    return written
