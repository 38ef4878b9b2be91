"""Parent side of a served process group (no torch): one torchrun launch that runs search trials in turn.

A fresh process group costs what a torchrun launch costs (23-33 s on 2x H200 for bert-large: the launcher,
imports, NCCL, the model), and the search only needs one where a trial's answer depends on it. So the search's
trials run in one served group (child/served_rank.py) while it stays sound: after a fit, and after an out-of-memory failure
that every rank cleaned up from with the same collectives issued (the ranks then build the model again). Any
other failure ends the group, and the next trial starts a new one. The first trial of a group ran in a fresh
process group (Attempt.fresh); the rest did not. The proof's checks are launches of their own (launch.py).

Commands are files in the launch's folder (child/served_rank.py); the answer to one is read from the ranks' records once
every rank has finished it, or the launcher has ended, or `timeout_s` has passed (then every process of the
launch is ended). MEMPROBE_SERVED_GROUPS=0 turns served groups off: every search trial is a launch of its own.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import replace
from typing import Any, Callable, Protocol

from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.process.outcomes import CRASH, FIT, TIMEOUT
from memprobe.core.process.rank_record import (
    Command,
    RankFailure,
    RankRecord,
    RankSetup,
    RankTrial,
    read_rank_records,
    read_vote,
    vote_path,
    write_command,
)
from memprobe.probe.distributed.launch import (
    LaunchRequest,
    _end,
    kill_survivors,
    launch_tail,
    start_launch,
    timeline,
)

SERVED_ENV = "MEMPROBE_SERVED_GROUPS"
POLL_S = 0.05
STOP_WAIT_S = 30.0
# How long a rank whose trial failed waits for its peers' votes: at least this, plus twice the time a trial at this
# batch should take (vote_wait_s), at most VOTE_MAX_S. A peer stuck in a collective the failed rank never joins
# votes never, and ending the group then costs one fresh group's start (20-33 s), not a wrong answer. Unbounded
# and scaled from batch 1's fit (whose seconds are the first steps' set-up, not its one sample), the wait was
# 725 s for bert-large-squad DDP at batch 189 on 4x H100, and the trial sat 243 s until the pg timeout.
VOTE_MIN_S = 10.0
VOTE_MAX_S = 60.0
# Once a rank has recorded a failure, every rank votes within the failed rank's vote wait, then commits (the
# status all_reduce) at once: the group goes on, or ends (the failed rank exits, torchrun ends the rest) within
# torchrun's stop grace. A rank stuck in a collective or a device sync that a peer never joins can outlive all
# of it (it votes only when the process-group timeout ends its collective), and so can a commit's all_reduce
# that never completes. So a rank that has neither committed nor ended this long after the vote wait makes the
# parent end the group itself and answer from the failure recorded. (A rank rebuilding its model after the
# commit has committed: the rebuild's time is not limited here.)
FAILED_GRACE_S = 30.0


def served_groups_on(env: dict[str, str] | None = None) -> bool:
    """Whether search trials share a served group (the default), or each is a launch (MEMPROBE_SERVED_GROUPS=0)."""
    return (os.environ if env is None else env).get(SERVED_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def vote_wait_s(fits: list[Attempt], batch: int) -> float:
    """How long a rank whose trial at `batch` failed waits for its peers' votes: VOTE_MIN_S plus twice the time
    the largest fit so far scaled to `batch` (step time grows no faster than the batch, so this bounds it from
    above; small batches' seconds are mostly fixed set-up and would inflate a per-sample figure), at most
    VOTE_MAX_S. Pure."""
    sized = [a for a in fits if a.batch and a.seconds]
    if not sized:
        return VOTE_MIN_S
    largest = max(sized, key=lambda a: a.batch)
    expected = largest.seconds * max(1.0, batch / largest.batch)
    return min(VOTE_MAX_S, VOTE_MIN_S + 2.0 * expected)


class ServedGroup:
    """One served launch of `req.world_size` ranks. trial(n) runs batch n in it; close() stops it, kill() ends
    it at once. Once a trial ends the group (`alive` False) the launch is over and its folder removed."""

    def __init__(self, req: LaunchRequest, env: dict[str, str] | None = None, standby: Any = None) -> None:
        self.req = req
        self.started = time.perf_counter()
        self.launched = time.time()
        self.index = 0
        self.records: list[RankRecord | None] = [None] * req.world_size
        self.timed_out = False
        served = replace(req, serve=True)
        if standby is not None and standby.fits(req):
            self.child, self.run_dir = standby.take(served)
        else:
            self.child, self.run_dir = start_launch(served, env)
        self.tail = ""
        self.closed = False
        self.timeline: dict[str, Any] | None = None  # where the start and first trial's time went (launch.timeline)

    @property
    def alive(self) -> bool:
        return not self.closed and self.child.alive()

    @property
    def setup(self) -> RankSetup | None:
        """What building the model gave on rank 0 (the first rank that built it), once a trial has been answered."""
        return next((r.setup for r in self.records if r and r.setup), None)

    def _read_records(self) -> list[RankRecord | None]:
        return read_rank_records(self.run_dir, self.req.world_size)

    def trial(self, batch: int, vote_wait_s: float) -> Attempt:
        """Batch `batch` on every rank of the group: the group's Attempt (`fresh` for the group's first trial).
        Never raises for what happens in the ranks; KeyboardInterrupt ends every process of the group."""
        if not self.alive:
            raise RuntimeError("the served group has ended")
        index, self.index = self.index, self.index + 1
        started = time.perf_counter() if index else self.started
        write_command(self.run_dir, index, Command("trial", batch, vote_wait_s))
        deadline = time.perf_counter() + self.req.timeout_s
        failed_at: float | None = None  # when a rank's failure of this trial was first seen
        stuck = ""
        try:
            while True:
                records = self._read_records()
                if all(r is not None and r.answered >= index for r in records):
                    break
                if not self.child.alive():
                    break
                now = time.perf_counter()
                if now > deadline:
                    self.timed_out = True
                    _end(self.child)
                    break
                if failed_at is None and (_failures(records, index) or self._failed_vote(index)):
                    failed_at = now
                elif failed_at is not None and now - failed_at > vote_wait_s + FAILED_GRACE_S:
                    stuck = self._stuck(records, index, now - failed_at)
                    if stuck:
                        _end(self.child)
                        break
                time.sleep(POLL_S)
        except BaseException:
            self.kill()
            raise
        if not self.child.alive():
            kill_survivors(self.run_dir)
            self.tail = launch_tail(self.child)
        self.records = self._read_records()
        attempt = command_attempt(self.records, index, batch, self.child.returncode, self.timed_out, self.tail)
        ended = sorted({r.ended for r in self.records if r and r.ended})
        if ended:  # the ranks went on from the failure, then found the model built again short of memory
            attempt.message += f"; the group then ended: {'; '.join(ended)}"
        if stuck:
            attempt.message += f"; {stuck}: the group was ended"
        attempt.fresh = index == 0
        attempt.wall_seconds = round(time.perf_counter() - started, 3)
        if index == 0:
            self.timeline = timeline(self.records, self.launched, attempt.wall_seconds)
        if not self.child.alive():
            self._cleanup()
        return attempt

    def _failed_vote(self, index: int) -> bool:
        """Whether a rank voted a failure of command `index`: one that failed outside the step (making the batch),
        which records no failure of its own until the group decides."""
        votes = (read_vote(self.run_dir, index, r) for r in range(self.req.world_size))
        return any(v is not None and v.outcome != FIT for v in votes)

    def _stuck(self, records: list[RankRecord | None], index: int, since_s: float) -> str:
        """Why the group is stuck in command `index` `since_s` after a rank's failure: the ranks that have not
        voted, else those that voted but never completed the commit (child/served_rank.py); "" where every rank has."""
        missing = [r for r in range(self.req.world_size) if not vote_path(self.run_dir, index, r).exists()]
        if missing:
            return f"ranks {missing} neither voted nor ended {since_s:.0f} s after the failure"
        behind = [
            r for r, record in enumerate(records) if record is None or max(record.committed, record.answered) < index
        ]
        if behind:
            return f"ranks {behind} voted but neither committed nor ended {since_s:.0f} s after the failure"
        return ""

    def close(self) -> None:
        """Stop the group: every rank leaves the process group and exits (ended after STOP_WAIT_S otherwise)."""
        if self.closed:
            return
        if self.child.alive():
            write_command(self.run_dir, self.index, Command("stop"))
            try:
                if not self.child.wait(STOP_WAIT_S):
                    _end(self.child)
            except BaseException:
                self.kill()
                raise
        self._cleanup()

    def kill(self) -> None:
        """End every process of the group now (Ctrl-C, SIGTERM): SIGTERM to the launcher's session, then SIGKILL,
        then any rank still alive."""
        if self.closed:
            return
        _end(self.child)
        self._cleanup()

    def _cleanup(self) -> None:
        kill_survivors(self.run_dir)
        self.child.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self.closed = True


def _entries(records: list[RankRecord | None], index: int) -> list[RankTrial | None]:
    return [r.entry(index) if r else None for r in records]


def _failures(records: list[RankRecord | None], index: int) -> list[tuple[float, int, RankTrial | RankFailure]]:
    """(time, rank, failure) of every failure recorded for command `index`: trials that failed (kept or not), and
    for a group's first command, a rank that could not start."""
    found: list[tuple[float, int, RankTrial | RankFailure]] = []
    for r, (record, entry) in enumerate(zip(records, _entries(records, index))):
        if entry is not None and entry.outcome != FIT:
            found.append((entry.at or 0.0, r, entry))
        failure = record.failure if record else None
        if failure and (failure.command == index or (failure.stage == "setup" and index == 0)):
            found.append((failure.at or 0.0, r, failure))
    return sorted(found, key=lambda item: (item[0], item[1]))


def command_attempt(
    records: list[RankRecord | None],
    index: int,
    batch: int,
    returncode: int | None,
    timed_out: bool,
    tail: str = "",
) -> Attempt:
    """The group's Attempt for command `index`: a fit only where every rank recorded one; else the earliest
    failure any rank recorded (the root cause: a rank that lost its peer fails later), with what the other
    ranks then recorded; else a timeout or a crash of the launcher."""
    entries = _entries(records, index)
    done = [e for e in entries if e is not None and e.outcome == FIT]
    if entries and len(done) == len(entries):
        return Attempt(
            batch,
            FIT,
            max(d.peak_allocated or 0 for d in done) or None,
            max(d.peak_reserved or 0 for d in done) or None,
            max(d.seconds or 0.0 for d in done),
            steps=max(d.steps or 0 for d in done) or None,
            loss_scale=done[0].loss_scale,
        )
    failures = _failures(records, index)
    if failures:
        _at, rank, root = failures[0]
        others = sorted({(r, f.outcome) for _a, r, f in failures if r != rank})
        then = "; then " + ", ".join(f"rank {r}: {o}" for r, o in others) if others else ""
        return Attempt(
            batch,
            root.outcome,
            root.peak_allocated,
            root.peak_reserved,
            root.seconds or 0.0,
            f"rank {rank}: {root.message}{then}",
        )
    silent = [r for r, e in enumerate(entries) if e is None]
    if timed_out:
        return Attempt(batch, TIMEOUT, message=f"no answer within the trial's time limit (ranks {silent}); ended")
    return Attempt(
        batch, CRASH, message=f"launcher exit {returncode}, ranks {silent} left no result: {tail or 'no output'}"
    )


class Group(Protocol):
    """A served group as ServedSearch uses it (ServedGroup; tests give fakes)."""

    index: int
    records: list[RankRecord | None]

    @property
    def alive(self) -> bool: ...
    @property
    def setup(self) -> RankSetup | None: ...
    def trial(self, batch: int, vote_wait_s: float) -> Attempt: ...
    def close(self) -> None: ...
    def kill(self) -> None: ...


class Announcer(Protocol):
    """What ServedSearch needs of backend.Launches: a request for the search's launches, and the announcements."""

    def request(self, batches: list[int]) -> LaunchRequest: ...
    def started_group(self) -> None: ...
    def announce(self, batch: int, fresh: bool) -> None: ...
    def answered(self, attempt: Attempt) -> None: ...
    def timed_launch(self, marks: dict[str, Any] | None, what: str) -> None: ...


class SearchTrials:
    """try_batch for an N-GPU search, what its two forms share (ServedSearch here, backend.SearchLaunches with served
    groups off): the first trials (batch 1 and 2) run up front and are answered from `cached` when the search asks
    for them, and the capacity is the smallest any rank reported at setup. A subclass runs a trial in `_run`."""

    def __init__(self) -> None:
        self.cached: dict[int, Attempt] = {}
        self.first_attempts: list[Attempt] = []
        self.ranks: list[RankRecord | None] = []
        self.predicted: int | None = None  # the predicted max batch changes nothing: no trial picks its group by it

    def _keep_first(self, attempts: list[Attempt]) -> None:
        """Keep the first trials, to answer the search's own first asks from."""
        self.first_attempts = list(attempts)
        for attempt in attempts:
            self.cached[attempt.batch] = attempt

    @property
    def capacity_bytes(self) -> int | None:
        """The smallest capacity any rank of the first launch reported (free + reserved after building the model)."""
        values = [v for r in self.ranks if r and r.setup and (v := r.setup.capacity_bytes)]
        return min(values) if values else None

    def _run(self, batch: int) -> Attempt:
        """Run one search trial at `batch`."""
        raise NotImplementedError

    def __call__(self, batch: int) -> Attempt:
        if batch in self.cached:
            return self.cached.pop(batch)
        return self._run(batch)


class ServedSearch(SearchTrials):
    """try_batch for the search over served groups: batch 1 and 2 run first (the first group's setup gives the
    capacity); every later trial runs in the group that is up, or in a new one where the last ended."""

    def __init__(self, launches: Announcer, max_batch: int, serve: Callable[[LaunchRequest], Group]) -> None:
        super().__init__()
        self.launches, self.serve = launches, serve
        self.group: Group | None = None
        self.groups = 0
        self.setup: RankSetup | None = None
        self.fits: list[Attempt] = []  # the search's fits: how long a failed rank waits for its peers' votes
        first = [self._run(1)]
        if first[0].fits and max_batch >= 2:
            first.append(self._run(2))
        self._keep_first(first)

    def _run(self, batch: int) -> Attempt:
        if self.group is None or not self.group.alive:
            self.group = self.serve(self.launches.request([batch]))
            self.groups += 1
            self.launches.started_group()
        group = self.group
        self.launches.announce(batch, group.index == 0)
        try:
            attempt = group.trial(batch, vote_wait_s(self.fits, batch))
        except BaseException:
            group.kill()
            raise
        if group.setup is not None and self.setup is None:
            self.setup, self.ranks = group.setup, list(group.records)
        elif self.setup is None and group.records:
            self.ranks = list(group.records)
        if attempt.fits:
            self.fits.append(attempt)
        if group.index == 1:
            self.launches.timed_launch(getattr(group, "timeline", None), "search")
        self.launches.answered(attempt)
        return attempt

    def kill(self) -> None:
        """End the group at once (the search was interrupted)."""
        if self.group is not None:
            self.group.kill()

    def close(self) -> None:
        """Stop the group: the proof's fresh groups need the GPUs' memory."""
        if self.group is not None:
            self.group.close()
