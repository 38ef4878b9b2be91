"""One rank of a multi-GPU trial: run by torchrun, builds and wraps the workload, runs trials, commits.

Launched by launch.py as `python -m torch.distributed.run --standalone --nproc-per-node N -m
memprobe.probe.child.rank REQUEST.json` (the standard elastic launcher): every launch is a
fresh process group. Each rank writes `rank<R>.pid` at start and `rank<R>.json` (atomically) after
every committed step of the protocol:

- the request's batches run in order, each a trial as on one GPU (worker.Session: warm-up + K steps);
- a batch counts as fitting on a rank only once an all_reduce of a status flag (bounded by the process
  group's timeout) shows that every rank completed it: no rank ever records a fit that another rank
  did not reach;
- a rank whose trial fails records the failure at once (outcome, message, wall-clock time, before any
  clean-up that could block on a collective) and exits with FAILED_EXIT; torchrun then ends the other
  ranks, which may be blocked in a collective the failed rank will never join. The parent takes the
  earliest recorded failure as the trial's outcome (a rank that lost its peer fails later).
- with `measure`, the last batch is then timed on every rank (warm-up + timed steps), committed the same way.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import fields
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

from memprobe.core.process.outcomes import described, message_of
from memprobe.core.process.rank_record import (
    GO_FILE,
    RankFailure,
    RankMarks,
    RankRecord,
    RankRequest,
    RankSetup,
    RankTrial,
    StandbyRequest,
    read_rank_request,
)
from memprobe.core.process.wire import MessageError

FAILED_EXIT = 3
MESSAGE_CHARS = 500  # a failure's message as a rank records it (torch's out-of-memory text alone runs longer)
_FAILURE_FIELDS = {f.name for f in fields(RankFailure)} - {"stage", "batch", "outcome", "message", "at", "extra"}
STARTED = time.time()  # this rank's Python is up: where a launch's time goes (timeline), from here on
_COLLECTIVE_MARKERS = (
    "distbackenderror",
    "nccl",
    "gloo",
    "connection closed",
    "connection reset",
    "broken pipe",
    "process group",
    "collective",
    "peer",
)


def collective_outcome(outcome: str, message: str) -> str:
    """The outcome of a failure raised by a collective: a timeout is TIMEOUT, a lost peer is CRASH;
    anything else keeps `outcome`. Never raises."""
    from memprobe.core.process.outcomes import CRASH, ERROR, TIMEOUT

    text = (message or "").lower()
    if outcome not in (ERROR, CRASH) or not any(m in text for m in _COLLECTIVE_MARKERS + ("timed out", "timeout")):
        return outcome
    return TIMEOUT if ("timed out" in text or "timeout" in text) else CRASH


class Rank:
    """This rank's record on disk (a RankRecord, core/process/rank_record.py) and the commit protocol."""

    def __init__(self, run_dir: Path, rank: int, world: int) -> None:
        self.run_dir, self.rank, self.world = run_dir, rank, world
        self.record = RankRecord(rank=rank, world_size=world, pid=os.getpid())
        (run_dir / f"rank{rank}.pid").write_text(str(os.getpid()))

    def save(self) -> None:
        """Write the record atomically: the parent never reads half a record."""
        self.record.save(self.run_dir)

    def failed(self, stage: str, outcome: str, message: str, batch: int | None, **extra: Any) -> None:
        """Record a failure (keeping the first one's time and outcome; `extra` sets RankFailure's other fields, or
        goes to its `extra`) and save at once."""
        if self.record.failure is None:
            outcome = collective_outcome(outcome, message)
            self.record.failure = RankFailure(stage, batch, outcome, message[:MESSAGE_CHARS], at=time.time())
        for key, value in extra.items():
            if key in _FAILURE_FIELDS:
                setattr(self.record.failure, key, value)
            else:
                self.record.failure.extra[key] = value
        self.save()

    def fail_and_exit(self, stage: str, outcome: str, message: str, batch: int | None, **extra: Any) -> NoReturn:
        """Record the failure and end this rank at once with FAILED_EXIT (never returns): no clean-up
        that could wait on a collective the other ranks are stuck in."""
        self.failed(stage, outcome, message, batch, **extra)
        sys.stderr.write(f"rank {self.rank}: {stage} failed at batch {batch}: {outcome}: {message[:200]}\n")
        sys.stderr.flush()
        os._exit(FAILED_EXIT)

    def commit(self, timeout_s: float, device) -> None:
        """all_reduce a status flag: returns once every rank reached this point, else raises."""
        import torch
        import torch.distributed as dist

        flag = torch.ones(1, device=device)
        work = dist.all_reduce(flag, async_op=True)
        work.wait(timeout=timedelta(seconds=timeout_s))
        total = int(flag.item())
        if total != self.world:
            raise RuntimeError(f"status all_reduce: {total} of {self.world} ranks completed")

    def commit_or_exit(self, timeout_s: float, device, stage: str, batch: int | None, **extra: Any) -> None:
        """commit(), or where it raises (a peer lost, the group's timeout) record a CRASH at `stage` and end this
        rank (fail_and_exit: never returns)."""
        from memprobe.core.process.outcomes import CRASH

        try:
            self.commit(timeout_s, device)
        except Exception as exc:  # noqa: BLE001 - whatever the collective raised, the group cannot go on
            self.fail_and_exit(stage, CRASH, described(exc), batch, **extra)


def watch_steps(task, rank: Rank, where: dict[str, Any]) -> None:
    """Record a step's failure the moment it is raised, before run_trial's clean-up (which
    synchronizes the device and could block on a collective that a peer will never join)."""
    from memprobe.core.process.outcomes import classify_error

    step = task.train_step

    def watched(batch, amp):
        try:
            return step(batch, amp)
        except Exception as exc:
            text = described(exc).splitlines()[0]
            extra = {"command": where["command"]} if "command" in where else {}
            rank.failed(
                where["stage"], classify_error(type(exc).__name__, message_of(exc)), text, where["batch"], **extra
            )
            raise

    task.train_step = watched


def build(req: RankRequest, rank: Rank, device: Any, mesh: Any = None) -> tuple[Any, RankSetup]:
    """Build the workload on this rank and wrap it for the request's strategy: (worker.Session, what the build
    gave). Ends the rank (Rank.fail_and_exit) where the workload cannot be built or wrapped."""
    import torch

    from memprobe.core.process.outcomes import ERROR
    from memprobe.core.process.protocol import Failure, SetupRequest
    from memprobe.probe.child.worker import Session
    from memprobe.training.wrap import wrap_model

    cuda = device.type == "cuda"
    launch = req.launch
    session = Session()
    info = session.setup(
        SetupRequest(
            launch.workload, launch.precision, "train", str(device), launch.cpu_budget(rank.rank), launch.settings
        )
    )
    if isinstance(info, Failure):
        rank.fail_and_exit("setup", info.kind or ERROR, info.message, None)
    task, _memory = session.built()
    wrapped = wrap_model(task.model, launch.strategy, launch.precision, device, mesh)
    task.model = wrapped.module
    task.scaler_class = wrapped.scaler_class
    environment = info.environment
    if cuda:
        version = torch.cuda.nccl.version()
        environment["nccl_version"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    return session, RankSetup(
        environment=environment,
        capacity_bytes=info.capacity_bytes,
        weights_bytes=info.weights_bytes,
        task=info.task,
        unit=info.unit,
        build_seconds=info.build_seconds,
        cuda_init_seconds=info.cuda_init_seconds,
        wrap=wrapped.describe,
        weights_after_wrap_bytes=torch.cuda.memory_allocated(device) if cuda else None,
    )


def start(req: RankRequest) -> tuple[Rank, Any, Any, float]:
    """Join the process group (NCCL on CUDA, gloo on the CPU): (this rank's Rank, its device, the mesh FSDP
    shards over or None, the process group's timeout in seconds). Ends the rank where it cannot join."""
    import torch
    import torch.distributed as dist

    from memprobe.core.process.outcomes import classify_error

    imported = time.time()
    rank_id, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank_id))
    rank = Rank(Path(req.run_dir), rank_id, world)
    marks = rank.record.timeline = RankMarks(STARTED, imported, prestarted=req.prestarted)
    timeout_s = req.launch.pg_timeout_s
    try:
        if req.launch.device == "cuda":
            torch.cuda.set_device(local)
            device = torch.device("cuda", local)
            dist.init_process_group("nccl", timeout=timedelta(seconds=timeout_s), device_id=device)
        else:
            device = torch.device("cpu")
            dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s))
        mesh = None
        if req.launch.strategy == "fsdp":
            from torch.distributed.device_mesh import init_device_mesh

            # One mesh for the life of the group: a served group builds the model again after a failure.
            mesh = init_device_mesh(device.type, (world,))
        marks.joined = time.time()
    except Exception as exc:  # noqa: BLE001 - a rank that cannot join fits no batch
        rank.fail_and_exit("setup", classify_error(type(exc).__name__, message_of(exc)), described(exc), None)
    return rank, device, mesh, timeout_s


def run(req: RankRequest) -> int:
    """Run this rank's part of the request. Returns the exit code (0: every step committed)."""
    import torch.distributed as dist

    from memprobe.core.process.outcomes import ERROR, FIT, classify_error
    from memprobe.core.process.protocol import MeasureRequest, TrialRequest

    rank, device, mesh, timeout_s = start(req)
    if req.launch.serve:
        from memprobe.probe.child.served_rank import serve

        return serve(req, rank, device, mesh, timeout_s)
    where: dict[str, Any] = {"stage": "setup", "batch": None}
    try:
        session, rank.record.setup = build(req, rank, device, mesh)
        rank.commit(timeout_s, device)
        rank.save()
    except Exception as exc:  # noqa: BLE001 - a rank that cannot start fits no batch
        text = described(exc)
        rank.fail_and_exit("setup", classify_error(type(exc).__name__, message_of(exc)), text, None)

    watch_steps(session.task, rank, where)
    batches = req.launch.batches
    for batch in batches:
        where.update(stage="trial", batch=batch)
        attempt = session.trial(TrialRequest(batch, req.launch.steps))
        if attempt.outcome != FIT:
            rank.fail_and_exit(
                "trial",
                attempt.outcome,
                attempt.message,
                batch,
                peak_allocated=attempt.peak_allocated,
                peak_reserved=attempt.peak_reserved,
                seconds=attempt.seconds,
            )
        rank.commit_or_exit(timeout_s, device, "trial", batch)
        rank.record.batches.append(RankTrial.of(attempt))
        rank.save()
    measure = req.launch.measure
    if measure:
        batch = batches[-1]
        where.update(stage="measure", batch=batch)
        measured = session.measure(MeasureRequest(batch, measure.warmup, measure.steps, sample_interval=0.1))
        if measured.outcome != FIT:
            rank.fail_and_exit(
                "measure",
                measured.outcome or ERROR,
                measured.error or "",
                batch,
                failed_at_step=measured.failed_at_step,
                peak_allocated=measured.peak_allocated,
                peak_reserved=measured.peak_reserved,
            )
        rank.commit_or_exit(timeout_s, device, "measure", batch)
        rank.record.measure = measured
    rank.record.done = True
    rank.save()
    dist.destroy_process_group()
    return 0


def standby(req: StandbyRequest) -> RankRequest | None:
    """A launch started ahead (standby.py): import torch, the distributed package and the workload's code, touching
    no GPU, then wait for the request (GO_FILE). Returns it, or None when the scan that started this is gone.
    Raises MessageError where what comes is not a RankRequest, OSError where it cannot be read."""
    global STARTED
    run_dir = Path(req.run_dir)
    (run_dir / f"rank{os.environ.get('RANK', '0')}.pid").write_text(str(os.getpid()))
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401

    import memprobe.probe.child.worker  # noqa: F401
    import memprobe.training.wrap  # noqa: F401

    try:
        from memprobe.workloads.families import family_builder

        family_builder(req.family)  # imports the family's module (transformers, timm)
    except Exception:  # noqa: BLE001 - the launch itself will say what cannot be imported
        pass
    from memprobe.probe.child.served_rank import _parent_gone

    go = run_dir / GO_FILE
    checked = time.monotonic()
    while not go.exists():
        if time.monotonic() - checked > 1.0:
            checked = time.monotonic()
            if _parent_gone(req.parent_pid):
                return None
        time.sleep(0.02)
    STARTED = time.time()  # the launch starts now: what came before was done ahead
    request = read_rank_request(go)
    if not isinstance(request, RankRequest):
        raise MessageError(f"{go}: a standby's second request is not a launch")
    return request


def main(argv: list[str] | None = None) -> int:
    """Entry point under torchrun: one argument, the request file. Returns the exit code."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: torchrun ... -m memprobe.probe.child.rank REQUEST.json\n")
        return 2
    try:
        read = read_rank_request(Path(args[0]))
        req = standby(read) if isinstance(read, StandbyRequest) else read
    except (OSError, MessageError) as exc:
        sys.stderr.write(f"rank: cannot run the launch's request: {exc}\n")
        return 2
    return 0 if req is None else run(req)


if __name__ == "__main__":
    sys.exit(main())
