"""One rank of a served process group: search trials in turn in one torchrun launch, until told to stop.

Started like every launch (trial.py, `serve` in the request). The parent (group.py) writes one command file
after another into the launch's folder, `cmd<K>.json`: a trial at a batch, or stop. Every rank runs the trial
(worker.Session, as in a launch of its own), then votes: it writes `vote<K>.r<R>.json` with its outcome and how
many collectives it has issued on each process group, and reads every rank's vote. All ranks decide alike:

- every rank fitted: the batch fits once the status all_reduce (trial.Rank.commit) completes; the group goes on;
- every rank fitted or ran out of memory (not in the communication library), and every rank issued the same
  collectives: no collective is left waiting for a peer, so the group is sound. The batch is an out-of-memory failure; every rank drops its model
  and builds and wraps it again (a DDP reducer or an FSDP2 state caught mid-step is not reused), commits, and
  the group goes on;
- anything else (another outcome, collectives that differ, a vote that does not come within `vote_wait_s` of
  a failed rank's own, or the pg timeout of a fitted one's): the rank records its failure and exits, and
  torchrun ends the others. The parent starts a new group for the next trial. So does a model built again that
  leaves less memory than the first build (memory_lost): the next trials would not see a fresh group's memory.

Each rank writes its record (`rank<R>.json`) after every decision; `answered` is the last command it finished
and goes on from, `committed` the last whose commit completed (a rank rebuilding after a shared out-of-memory
failure has committed, not yet answered). A failed rank records its failure the moment the step raises (trial.watch_steps), so the
outcome is known even where its clean-up then blocks on a collective a peer never joins. A rank whose scan
died (MEMPROBE_PARENT_PID gone) exits.
"""

from __future__ import annotations

import gc
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from memprobe.core.process.outcomes import described, message_of
from memprobe.core.process.rank_record import (
    Command,
    RankRequest,
    RankSetup,
    RankTrial,
    Rebuild,
    Vote,
    read_command,
    read_vote,
    write_vote,
)
from memprobe.probe.child.rank import FAILED_EXIT, MESSAGE_CHARS, Rank, build, watch_steps

POLL_S = 0.02
FIT_DECISION, RECOVER, END = "fit", "recover", "end"


def _parent_gone(parent: int | None) -> bool:
    if parent is None:
        return False
    try:
        os.kill(parent, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def wait_command(run_dir: Path, index: int, parent: int | None) -> Command:
    """Command `index`, once the parent wrote it; a stop command when the scan that started the group is gone."""
    checked = time.monotonic()
    while True:
        command = read_command(run_dir, index)
        if command is not None:
            return command
        if time.monotonic() - checked > 1.0:
            checked = time.monotonic()
            if _parent_gone(parent):
                return Command("stop", why="the scan that started this group is gone")
        time.sleep(POLL_S)


def collective_counts() -> list[int] | None:
    """How many collectives this rank issued on each process group (by the group's name), or None where torch
    does not say: equal counts on every rank mean no collective waits for a rank that will not join it."""
    try:
        import torch.distributed.distributed_c10d as c10d

        groups = sorted(c10d._world.pg_map, key=lambda pg: c10d._world.pg_names.get(pg, ""))
        # a private method torch's own type hints leave out; the except below covers a torch without it
        return [int(pg._get_sequence_number_for_group()) for pg in groups]  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a private API: without it, no failure is taken as sound
        return None


def raised_by_collective(message: str) -> bool:
    """Whether a trial's failure was raised by the communication library (NCCL, gloo) rather than a step's op."""
    text = (message or "").lower()
    return any(marker in text for marker in ("distbackenderror", "nccl", "gloo", "process group"))


def decide(votes: list[Vote | None]) -> str:
    """What every rank does after a trial, from every rank's vote (None: a vote that did not come). Pure."""
    from memprobe.core.process.outcomes import FIT, OOM

    if any(v is None for v in votes):
        return END
    counts = [v.collectives for v in votes if v]
    same = counts[0] is not None and all(c == counts[0] for c in counts)
    outcomes = {v.outcome for v in votes if v}
    if any(v.in_collective for v in votes if v):
        return END  # a communicator that failed (NCCL's own allocation too) is not trusted again
    if outcomes == {FIT}:
        return FIT_DECISION if same else END
    if outcomes <= {FIT, OOM} and same:
        return RECOVER
    return END


def wait_votes(run_dir: Path, index: int, world: int, wait_s: float) -> list[Vote | None]:
    """Every rank's vote on command `index`, waiting at most `wait_s` for the last; None for a missing one."""
    deadline = time.monotonic() + wait_s
    votes: list[Vote | None] = [None] * world
    while True:
        for r in range(world):
            if votes[r] is None:
                votes[r] = read_vote(run_dir, index, r)
        if all(v is not None for v in votes) or time.monotonic() > deadline:
            return votes
        time.sleep(POLL_S)


def serve(req: RankRequest, rank: Rank, device: Any, mesh: Any, timeout_s: float) -> int:
    """Serve commands until a stop command (exit 0) or a failure the group cannot go on from (the rank exits
    with FAILED_EXIT, its failure recorded). Returns the exit code."""
    from memprobe.core.process.outcomes import FIT, classify_error
    from memprobe.core.process.protocol import TrialRequest

    run_dir = Path(req.run_dir)
    parent = req.parent_pid
    where: dict[str, Any] = {"stage": "setup", "batch": None}
    try:
        session, rank.record.setup = build(req, rank, device, mesh)
        rank.commit(timeout_s, device)
    except Exception as exc:  # noqa: BLE001 - a rank that cannot start fits no batch
        rank.fail_and_exit("setup", classify_error(type(exc).__name__, message_of(exc)), described(exc), None)
    rank.save()
    watch_steps(session.task, rank, where)
    loss_scale = None
    index = 0
    while True:
        command = wait_command(run_dir, index, parent)
        if command.op != "trial" or command.batch is None:
            break
        batch = int(command.batch)
        where.update(stage="trial", batch=batch, command=index)
        attempt = session.trial(TrialRequest(batch, req.launch.steps, loss_scale=loss_scale))
        entry = RankTrial.of(attempt, command=index, at=time.time())
        failed_in_collective = attempt.outcome != FIT and raised_by_collective(attempt.message)
        vote = Vote(attempt.outcome, collective_counts(), batch, failed_in_collective)
        write_vote(run_dir, index, rank.rank, vote)
        # A fitted rank's peers completed the same collectives, so they are at most a trial's clean-up behind;
        # a failed rank's peer may be stuck in a collective this rank never joins: wait for it only so long.
        wait = timeout_s if attempt.outcome == FIT else float(command.vote_wait_s)
        votes = wait_votes(run_dir, index, rank.world, wait)
        decision = decide(votes)
        if decision == END:
            _end_group(rank, attempt, votes, wait, index)
        rank.commit_or_exit(timeout_s, device, "trial", batch, command=index)
        # Past the commit: the parent no longer counts this rank as stuck in the trial (group.py), however
        # long the rebuild below takes.
        rank.record.committed = index
        if decision == FIT_DECISION:
            loss_scale = attempt.loss_scale or loss_scale
            rank.record.batches.append(entry)
        else:
            failure = rank.record.failure
            rank.record.batches.append(replace(entry, at=failure.at) if failure else entry)
            rank.record.failure = None
            rank.save()  # the failure's record first: a rebuild that fails ends the rank
            where.update(stage="setup", batch=None)
            session = _recover(session, req, rank, device, mesh, timeout_s, index)
            watch_steps(session.task, rank, where)
        rank.record.answered = index
        rank.save()
        index += 1
    rank.record.done = True
    rank.save()
    # Exit at once: the next fresh group waits for this one's memory, and leaving the process group and Python's
    # own shutdown (torch's, NCCL's) only cost seconds; the system frees what the process holds.
    os._exit(0)


def _end_group(rank: Rank, attempt: Any, votes: list[Vote | None], wait: float, index: int) -> NoReturn:
    """Record why the group cannot go on after command `index` (this rank's failure, a vote that did not come
    within `wait` seconds, or peers that failed) and end this rank with FAILED_EXIT."""
    from memprobe.core.process.outcomes import CRASH, FIT, TIMEOUT

    batch, missing = attempt.batch, [r for r, v in enumerate(votes) if v is None]
    if attempt.outcome != FIT:
        why = f"; no vote from rank(s) {missing} within {wait:.0f} s" if missing else ""
        text = with_reason(attempt.message, why)
        rank.failed("trial", attempt.outcome, text, batch, command=index, **_peaks(attempt))
    elif missing:
        rank.failed("trial", TIMEOUT, f"no vote from rank(s) {missing} within {wait:.0f} s", batch, command=index)
    else:
        others = sorted({v.outcome for v in votes if v and v.outcome != FIT})
        rank.failed("trial", CRASH, f"the group ends: peers {', '.join(others) or 'disagree'}", batch, command=index)
    os._exit(FAILED_EXIT)


def _recover(session: Any, req: RankRequest, rank: Rank, device: Any, mesh: Any, timeout_s: float, index: int) -> Any:
    """After an out-of-memory failure every rank shared (command `index`): the model built again (_rebuild) and
    recorded under `rebuilds`. Returns the new session; ends this rank where the new model leaves less memory than
    the group's first build (memory_lost)."""
    started = time.perf_counter()
    session, setup = _rebuild(session, req, rank, device, mesh, timeout_s)
    rank.record.rebuilds.append(Rebuild(index, round(time.perf_counter() - started, 3), setup.capacity_bytes))
    lost = memory_lost(rank.record.setup, setup)
    if lost:
        # Something of the old model outlived it: later trials would see less memory than a fresh group.
        rank.record.ended = lost
        rank.save()
        os._exit(FAILED_EXIT)
    return session


def with_reason(message: str, why: str) -> str:
    """`message` then `why`, the message cut so that `why` survives the record's cut to MESSAGE_CHARS (torch's
    out-of-memory text alone runs longer, and the reason a group ended is what the parent's answer needs)."""
    return message[: max(0, MESSAGE_CHARS - len(why))] + why


def memory_lost(first: RankSetup | None, again: RankSetup) -> str:
    """Why a model built again leaves less memory than the group's first build did (a leak: half the model's
    weights or 1 GiB, whichever is more; CUDA's lazily loaded kernels take less), or "" where it does not (or the
    first build is not known)."""
    if first is None or not first.capacity_bytes or not again.capacity_bytes:
        return ""
    before, after = first.capacity_bytes, again.capacity_bytes
    allowed = max(2**30, (first.weights_bytes or 0) // 2)
    if before - after <= allowed:
        return ""
    return f"built again with {(before - after) / 2**30:.2f} GiB less memory than at the group's start"


def _peaks(attempt: Any) -> dict[str, Any]:
    return {
        "peak_allocated": attempt.peak_allocated,
        "peak_reserved": attempt.peak_reserved,
        "seconds": attempt.seconds,
    }


def _rebuild(
    session: Any, req: RankRequest, rank: Rank, device: Any, mesh: Any, timeout_s: float
) -> tuple[Any, RankSetup]:
    """Drop this rank's model, optimizer and wrapper and build them again in the same process group: (the new
    session, its setup record). The allocator's cache is emptied between, so the new model starts from the
    memory a fresh one would. Ends the rank where the model cannot be built again."""
    from memprobe.core.process.outcomes import classify_error

    session.close()  # unfreezes what setup froze, so the old model's reference cycles can be collected
    del session
    gc.collect()
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
    try:
        session, setup = build(req, rank, device, mesh)
        rank.commit(timeout_s, device)
    except Exception as exc:  # noqa: BLE001 - a rank that cannot build again ends the group
        rank.fail_and_exit("setup", classify_error(type(exc).__name__, message_of(exc)), described(exc), None)
    return session, setup
