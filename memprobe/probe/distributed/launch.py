"""Parent side of a multi-GPU trial (no torch): launch torchrun, bound its time, read the ranks' records.

Every launch is `python -m torch.distributed.run --standalone --nproc-per-node N -m
memprobe.probe.child.rank REQUEST.json`: a fresh process group. torchrun runs in its own
session; past `timeout_s` it gets SIGTERM (it ends its workers), then SIGKILL, and every rank that
wrote a pid file and is still alive is killed, so no rank outlives the trial. The trial's outcome
per batch comes from the ranks' records (child/rank.py): a fit only where every rank committed it,
otherwise the earliest failure any rank recorded (the root cause: a rank that lost its peer fails
later), otherwise a timeout or a crash of the launcher.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.process.child import Child
from memprobe.core.process.child_env import SAFE_ENV, child_env
from memprobe.core.process.outcomes import CRASH, FIT, TIMEOUT
from memprobe.core.process.rank_record import (
    REQUEST_FILE,
    LaunchRequest,
    RankFailure,
    RankRecord,
    RankRequest,
    RankSetup,
    RankTrial,
    StandbyRequest,
    read_rank_records,
    write_rank_request,
)
from memprobe.core.records.records import Timed

TERM_GRACE_S = 15.0
RANK_MODULE = "memprobe.probe.child.rank"


def launch_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for torchrun and `--parallel` scans: core.child_env's (SAFE_ENV set where unset) with
    memprobe's own folder on PYTHONPATH so the ranks import this same code."""
    env = child_env(base)
    root = str(Path(__file__).resolve().parents[3])
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        env["PYTHONPATH"] = os.pathsep.join([root, *paths])
    return env


def nccl_env(env: dict[str, str]) -> dict[str, str]:
    """The NCCL_* variables and the multicast switches in force for the ranks."""
    return {
        k: v for k, v in sorted(env.items()) if k.startswith("NCCL_") or k in SAFE_ENV or k.startswith("TORCH_NCCL_")
    }


@dataclass
class LaunchResult:
    """What one launch showed: an Attempt per batch run (in order, up to the first failure), the group
    measurement (or its failure), what building the model gave on the first rank that built it, and how the
    launcher ended."""

    attempts: list[Attempt]
    measure: Timed | None
    setup: RankSetup | None
    returncode: int | None
    timed_out: bool
    wall_seconds: float
    log_tail: str = ""
    ranks: list[RankRecord | None] = field(default_factory=list)
    timeline: dict[str, Any] | None = None  # where the launch's time went (see timeline())


def timeline(ranks: list[RankRecord | None], launched: float, wall_seconds: float) -> dict[str, Any] | None:
    """Where a launch's time went, by rank 0's clock marks (wall-clock `launched`: the launcher started): torchrun
    until the rank's Python was up, its imports, joining the process group, building the model (CUDA's context
    apart), and the rest (trials, timed steps, ending). None where rank 0 left no marks."""
    record = ranks[0] if ranks else None
    marks, setup = (record.timeline, record.setup) if record else (None, None)
    if marks is None or not marks.started:
        return None
    out: dict[str, Any] = {"to_rank_s": round(marks.started - launched, 2), "wall_s": round(wall_seconds, 2)}
    if marks.prestarted:
        out["prestarted"] = True  # torchrun and the imports ran ahead, while the launch before it did
    if marks.imported:
        out["imports_s"] = round(marks.imported - marks.started, 2)
    if marks.joined and marks.imported:
        out["join_s"] = round(marks.joined - marks.imported, 2)
    if setup is not None and setup.cuda_init_seconds is not None:
        out["cuda_init_s"] = setup.cuda_init_seconds
    if setup is not None and setup.build_seconds is not None:
        out["build_s"] = setup.build_seconds
    return out


def torchrun_command(world_size: int, request_path: str | Path) -> list[str]:
    """The standard elastic launcher, one node, no restarts (a failed rank fails the trial)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        str(world_size),
        "--max-restarts",
        "0",
        "--monitor-interval",
        "0.5",
        "-m",
        RANK_MODULE,
        str(request_path),
    ]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return RANK_MODULE.encode() in handle.read()
    except OSError:
        return False


def kill_survivors(run_dir: Path) -> list[int]:
    """SIGKILL every rank of this launch that is still running (found by its pid file); returns their pids."""
    killed = []
    for pid_file in run_dir.glob("rank*.pid"):
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            continue
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    return killed


def _end(child: Child) -> None:
    """SIGTERM torchrun's session (torchrun then ends its workers), SIGKILL after TERM_GRACE_S."""
    child.end(TERM_GRACE_S, kill_wait_s=5.0)


def launch_tail(child: Child) -> str:
    """The last lines of a launch's log (torchrun's and its ranks' output), its banners of stars left out."""
    return child.log_tail(6, skip_prefix="*", chars=1500)


def start_torchrun(
    world_size: int,
    device: str,
    request: Callable[[Path], RankRequest | StandbyRequest],
    env: dict[str, str] | None = None,
) -> tuple[Child, Path]:
    """Start torchrun on `request(folder)` (written to REQUEST_FILE in a new launch folder) in its own session, its
    output logged in the folder: (the launcher, the folder), the caller's to wait for and end. A Child that does
    not talk: the ranks' answers are files (core/process/rank_record.py), not lines.
    Raises OSError when torchrun cannot be started (the folder is removed)."""
    base = launch_env(env)
    if device == "cpu":
        base.setdefault("OMP_NUM_THREADS", "1")
    run_dir = Path(tempfile.mkdtemp(prefix="memprobe-dist-"))
    try:
        write_rank_request(run_dir / REQUEST_FILE, request(run_dir))
        child = Child.start(
            torchrun_command(world_size, run_dir / REQUEST_FILE), base=base, talk=False, log=run_dir / "launcher.log"
        )
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return child, run_dir


def start_launch(req: LaunchRequest, env: dict[str, str] | None = None) -> tuple[Child, Path]:
    """Start torchrun for `req` (start_torchrun): (the launcher, the launch's folder)."""
    return start_torchrun(req.world_size, req.device, lambda run_dir: RankRequest(req, str(run_dir), os.getpid()), env)


def launch(req: LaunchRequest, env: dict[str, str] | None = None, standby: Any = None) -> LaunchResult:
    """Run one launch to its end (or its timeout) and read what the ranks recorded; on `standby`
    (standby.Standby: a launch started ahead whose ranks wait for a request) where it fits. Never raises for
    what happens in the ranks; KeyboardInterrupt ends every process of the launch and is re-raised."""
    if standby is not None and standby.fits(req):
        child, run_dir = standby.take(req)
    else:
        child, run_dir = start_launch(req, env)
    launched = time.time()
    started = time.perf_counter()
    timed_out = False
    try:
        if not child.wait(req.timeout_s):
            timed_out = True
            _end(child)
    except BaseException:
        _end(child)
        kill_survivors(run_dir)
        child.close()
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    finally:
        kill_survivors(run_dir)
    child.close()
    wall = time.perf_counter() - started
    records = read_rank_records(run_dir, req.world_size)
    tail = launch_tail(child)
    shutil.rmtree(run_dir, ignore_errors=True)
    attempts, measure = aggregate(records, req, child.returncode, timed_out, tail)
    for attempt in attempts:
        attempt.wall_seconds = round(wall, 3)
    setup = next((r.setup for r in records if r and r.setup), None)
    return LaunchResult(
        attempts,
        measure,
        setup,
        child.returncode,
        timed_out,
        round(wall, 3),
        tail,
        records,
        timeline(records, launched, wall),
    )


def _root_failure(records: list[RankRecord | None], batch: int | None) -> tuple[int, RankFailure] | None:
    """(rank, failure) of the earliest failure recorded for `batch` (setup failures count for any)."""
    found = [(r.failure.at, r.rank, r.failure) for r in records if r and r.failure and r.failure.batch in (batch, None)]
    if not found:
        return None
    _at, rank, failure = min(found, key=lambda item: (item[0], item[1]))
    return rank, failure


def _lost(
    req: LaunchRequest, records: list[RankRecord | None], returncode: int | None, timed_out: bool, tail: str
) -> tuple[str, str]:
    silent = [r for r, record in enumerate(records) if record is None or not record.done]
    if timed_out:
        return TIMEOUT, f"no result within {req.timeout_s:.0f} s (ranks {silent} unfinished); launcher killed"
    return CRASH, f"launcher exit {returncode}, ranks {silent} left no result: {tail or 'no output'}"


def aggregate(
    records: list[RankRecord | None], req: LaunchRequest, returncode: int | None, timed_out: bool, tail: str = ""
) -> tuple[list[Attempt], Timed | None]:
    """An Attempt per batch run (a fit only where every rank committed it) and the group measurement."""
    attempts: list[Attempt] = []
    for batch in req.batches:
        done = [_trial_at(r, batch) for r in records]
        fitted = [d for d in done if d is not None and d.outcome == FIT]
        if len(fitted) == len(done):  # every rank committed the batch
            attempts.append(
                Attempt(
                    batch,
                    FIT,
                    max(d.peak_allocated or 0 for d in fitted) or None,
                    max(d.peak_reserved or 0 for d in fitted) or None,
                    max(d.seconds for d in fitted),
                    steps=max(d.steps or 0 for d in fitted),
                    loss_scale=fitted[0].loss_scale,
                    fresh=not attempts,
                )
            )
            continue
        root = _root_failure(records, batch)
        if root is not None and root[1].stage != "measure":
            rank, failure = root
            others = sorted({(r.rank, r.failure.outcome) for r in records if r and r.failure and r.rank != rank})
            then = "; then " + ", ".join(f"rank {r}: {o}" for r, o in others) if others else ""
            attempts.append(
                Attempt(
                    batch,
                    failure.outcome,
                    failure.peak_allocated,
                    failure.peak_reserved,
                    failure.seconds or 0.0,
                    f"rank {rank}: {failure.message}{then}",
                    fresh=not attempts,
                )
            )
        else:
            outcome, message = _lost(req, records, returncode, timed_out, tail)
            attempts.append(Attempt(batch, outcome, message=message, fresh=not attempts))
        return attempts, None
    if not req.measure:
        return attempts, None
    measures = [r.measure for r in records if r and r.measure and r.measure.outcome == FIT]
    if len(measures) == len(records):
        return attempts, group_measurement(measures, req.world_size, req.batches[-1])
    root = _root_failure(records, req.batches[-1])
    if root is not None:
        rank, failure = root
        return attempts, Timed(
            batch=req.batches[-1],
            outcome=failure.outcome,
            error=f"rank {rank}: {failure.message}",
            failed_at_step=failure.failed_at_step,
            peak_allocated=failure.peak_allocated,
            peak_reserved=failure.peak_reserved,
        )
    outcome, message = _lost(req, records, returncode, timed_out, tail)
    return attempts, Timed(batch=req.batches[-1], outcome=outcome, error=message)


def _trial_at(record: RankRecord | None, batch: int) -> RankTrial | None:
    """The trial `record`'s rank ran at `batch`, or None (no record, or it did not get there)."""
    return next((b for b in record.batches if b.batch == batch), None) if record else None


def group_measurement(measures: list[Timed], world_size: int, batch: int) -> Timed:
    """Throughput of the whole group: world_size x batch samples per step of the slowest rank's median (the ranks'
    own figures under `per_rank`, with the group's size, in `extra`)."""

    def median(m: Timed) -> float:
        # Only fitting runs are aggregated here, and every one of them has its step times.
        return m.step_time["median_s"] if m.step_time else 0.0

    slowest = max(measures, key=median)
    units_per_sample = (slowest.units_per_s or 0.0) / slowest.samples_per_s if slowest.samples_per_s else 1.0
    samples = world_size * batch / median(slowest)
    return Timed(
        batch=batch,
        outcome=FIT,
        samples_per_s=samples,
        units_per_s=samples * units_per_sample,
        unit=slowest.unit,
        step_time=slowest.step_time,
        warmup_steps=slowest.warmup_steps,
        peak_allocated=max(m.peak_allocated or 0 for m in measures) or None,
        peak_reserved=max(m.peak_reserved or 0 for m in measures) or None,
        utilization=measures[0].utilization,
        extra={
            "per_gpu_batch": batch,
            "world_size": world_size,
            "global_batch": world_size * batch,
            "per_rank": [
                {
                    "rank": i,
                    "median_s": median(m),
                    "peak_allocated": m.peak_allocated,
                    "peak_reserved": m.peak_reserved,
                    "utilization": m.utilization,
                }
                for i, m in enumerate(measures)
            ],
        },
    )
