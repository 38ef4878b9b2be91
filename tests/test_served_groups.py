"""Served process groups: the multi-GPU search runs its trials in one torchrun launch while that is sound.

Real launches on the CPU (gloo, 2 ranks, the toy workload under the fake allocator): a search whose ranks all run
out of memory at the same step goes on in the same group, the proof still in fresh groups; a failure on one rank
only ends the group and the next trial starts a new one; nothing is left running. Without launches: how the
ranks decide from their votes, how their records become the group's answer, and the search against a fake
launcher with and without served groups (the same answer, fewer process groups).
"""

from __future__ import annotations

import time

import pytest

from conftest import RecordingProgress
from fakes import TOY, FakeGroup, fake_group_opts, rank_processes
from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.process.outcomes import CRASH, FIT, OOM, TIMEOUT
from memprobe.core.process.rank_record import (
    Command,
    RankFailure,
    RankRecord,
    RankSetup,
    RankTrial,
    Vote,
    read_command,
    read_vote,
    vote_path,
    write_command,
    write_json,
    write_vote,
)
from memprobe.probe.child.rank import MESSAGE_CHARS
from memprobe.probe.child.served_rank import END, FIT_DECISION, RECOVER, decide, memory_lost, with_reason
from memprobe.probe.distributed.group import (
    VOTE_MAX_S,
    VOTE_MIN_S,
    ServedGroup,
    command_attempt,
    served_groups_on,
    vote_wait_s,
)
from memprobe.probe.distributed.launch import LaunchRequest
from memprobe.probe.distributed.scan import scan_precision_distributed
from memprobe.probe.scan import ScanOptions

BUDGET = 8_000_000  # bytes per rank: the toy model trains up to a few hundred samples per rank


# --- real launches --------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_served_search_finds_the_fresh_edge_in_one_group_and_proves_it_in_two_fresh_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the launches' folders, so their ranks can be found
    opts = ScanOptions(precisions=["fp32"], device="cpu", cpu_budget_bytes=BUDGET, measure=False, curve=False)
    result, _setup = scan_precision_distributed(TOY, "fp32", opts, 2, "ddp", RecordingProgress())
    attempts = result.attempts
    assert result.status == "done" and result.proof.verified
    # the same answer as the fresh process groups: the proof agreed with the served search's pair
    assert result.proof.agreed and (result.proof.fits, result.proof.fails) == (result.max_batch, result.max_batch + 1)
    assert result.proof.reused_from_search == []  # served trials are not fresh: both halves ran fresh
    # every search trial ran in the first group: out-of-memory trials, then fits, in the same process group
    assert [a.fresh for a in attempts] == [True] + [False] * (len(attempts) - 1)
    failed = [i for i, a in enumerate(attempts) if a.outcome == OOM]
    assert failed and any(attempts[i + 1].fits for i in failed if i + 1 < len(attempts))
    launches = result.settings.launches
    assert (launches["process_groups"], launches["search_process_groups"], launches["served_search"]) == (4, 1, True)
    # where each launch's time went: the served group's start, then the proof's fresh groups: B+1, and B twice (K = 2)
    marks = launches["timelines"]
    b = result.max_batch
    assert [m["for"] for m in marks] == ["search", f"check at {b + 1}", f"check at {b}", f"check at {b}"]
    assert all(m["to_rank_s"] >= 0 and m["imports_s"] > 0 and m["join_s"] >= 0 and m["build_s"] >= 0 for m in marks)
    assert all(m["wall_s"] >= m["to_rank_s"] + m["imports_s"] for m in marks)
    assert len(attempts) >= 8  # each would have been a launch of its own (MEMPROBE_SERVED_GROUPS=0)
    assert rank_processes(str(tmp_path)) == []


@pytest.mark.slow
def test_a_failure_on_one_rank_ends_the_group_and_the_next_trial_starts_a_fresh_one(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    req = LaunchRequest(
        TOY,
        "fp32",
        "ddp",
        2,
        [1],
        device="cpu",
        cpu_budget_bytes=BUDGET,
        rank_cpu_budget_bytes={"1": 4_000_000},  # rank 1 alone runs out of memory at batch 700
        pg_timeout_s=30,
        timeout_s=120,
    )
    group = ServedGroup(req)
    try:
        first = group.trial(1, 5.0)
        assert first.fits and first.fresh and group.alive
        failed = group.trial(700, 5.0)
        # rank 0 waits in DDP's all-reduce for rank 1, which waited 5 s for rank 0's vote and left
        assert failed.outcome == OOM and failed.message.startswith("rank 1: OutOfMemoryError")
        assert "then rank 0" in failed.message and not failed.fresh
        assert not group.alive and not group.run_dir.exists()
    finally:
        group.kill()
    assert rank_processes(str(tmp_path)) == []


class _SleepingLaunch:
    """A standby whose 'launcher' is a sleeping process: the ranks' records and votes are written by the test."""

    def __init__(self, run_dir) -> None:
        from memprobe.core.process.child import Child

        self.run_dir = run_dir
        self.child = Child.start(["sleep", "600"], talk=False, log=run_dir / "launcher.log")

    def fits(self, req) -> bool:
        return True

    def take(self, req):
        return self.child, self.run_dir


def _stuck_group(tmp_path, monkeypatch, votes: list[int], timeout_s: float = 60.0, committed: int = -1):
    import memprobe.probe.distributed.group as group_module

    monkeypatch.setattr(group_module, "FAILED_GRACE_S", 0.3)
    run_dir = tmp_path / "launch"
    run_dir.mkdir()
    failure = {"stage": "trial", "command": 0, "outcome": OOM, "message": "OutOfMemoryError: CUDA out of memory"}
    rank0 = {"batches": [], "answered": -1, "committed": committed, "failure": {**failure, "at": 1.0}}
    write_json(run_dir / "rank0.json", rank0)
    write_json(run_dir / "rank1.json", {"batches": [], "answered": -1, "committed": committed, "failure": None})
    for r in votes:
        write_json(vote_path(run_dir, 0, r), {"outcome": OOM, "collectives": [3]})
    req = LaunchRequest(TOY, "fp32", "ddp", 2, [1], device="cpu", timeout_s=timeout_s)
    launch = _SleepingLaunch(run_dir)
    return ServedGroup(req, standby=launch), launch


def test_a_group_whose_peer_neither_votes_nor_ends_after_a_failure_is_ended_and_answers_the_failure(
    tmp_path, monkeypatch
):
    # rank 0 ran out of memory and recorded it; rank 1 sits in a collective rank 0 never joins, and so does the
    # launcher: the parent does not wait for the trial's time limit
    group, launch = _stuck_group(tmp_path, monkeypatch, votes=[0])
    started = time.perf_counter()
    attempt = group.trial(3301, 0.2)
    assert time.perf_counter() - started < 20
    assert attempt.outcome == OOM and attempt.message.startswith("rank 0: OutOfMemoryError")
    assert "ranks [1] neither voted nor ended" in attempt.message and "the group was ended" in attempt.message
    assert not group.timed_out and not group.alive and not launch.child.alive()
    assert not launch.run_dir.exists()


def test_a_group_whose_ranks_all_committed_after_a_failure_is_left_to_rebuild(tmp_path, monkeypatch):
    # every rank voted a shared out-of-memory failure and committed it: they are rebuilding the model, which can
    # take longer than the grace; only the trial's own time limit ends them
    group, launch = _stuck_group(tmp_path, monkeypatch, votes=[0, 1], timeout_s=2.0, committed=0)
    attempt = group.trial(3301, 0.2)
    assert group.timed_out and "neither" not in attempt.message
    assert attempt.outcome == OOM and not launch.child.alive()


def test_a_group_whose_ranks_voted_but_never_committed_after_a_failure_is_ended(tmp_path, monkeypatch):
    # every rank voted, then the commit (an all_reduce) never completed: a collective left behind by the failed
    # step, as resnet50 and bert-large-squad under DDP on 4x H200 sat 243 s until the process-group timeout
    group, launch = _stuck_group(tmp_path, monkeypatch, votes=[0, 1], timeout_s=60.0)
    started = time.perf_counter()
    attempt = group.trial(3301, 0.2)
    assert time.perf_counter() - started < 20 and not group.timed_out
    assert attempt.outcome == OOM and attempt.message.startswith("rank 0: OutOfMemoryError")
    assert "ranks [0, 1] voted but neither committed nor ended" in attempt.message
    assert "the group was ended" in attempt.message
    assert not group.alive and not launch.child.alive() and not launch.run_dir.exists()


# --- decisions and records (no launch) ------------------------------------------------------------


def test_the_ranks_go_on_after_fits_and_after_a_shared_out_of_memory_and_end_otherwise():
    fit = Vote(FIT, [12])
    oom = Vote(OOM, [12])
    assert decide([fit, fit]) == FIT_DECISION
    assert decide([oom, oom]) == RECOVER
    assert decide([oom, fit]) == RECOVER  # rank 1 fitted: rank 0 failed after the last collective
    assert decide([oom, Vote(OOM, [11])]) == END  # a collective waits for a peer
    assert decide([oom, None]) == END  # a vote that did not come
    assert decide([Vote(CRASH, [12]), oom]) == END
    assert decide([Vote(OOM, None), Vote(OOM, None)]) == END
    assert decide([Vote(OOM, [12], in_collective=True), oom]) == END  # NCCL's own allocation failed


def test_a_failed_rank_waits_for_votes_as_long_as_the_largest_fit_scaled_to_the_batch_and_never_a_minute_more():
    # bert-large-squad DDP on 4x H100: batch 1's first steps took 1.89 s (set-up, not one sample), batch 4 0.58 s.
    fits = [Attempt(1, FIT, seconds=1.89), Attempt(2, FIT, seconds=0.53), Attempt(4, FIT, seconds=0.58)]
    assert vote_wait_s([], 189) == VOTE_MIN_S
    assert vote_wait_s(fits, 4) == pytest.approx(VOTE_MIN_S + 2 * 0.58)
    assert vote_wait_s(fits, 8) == pytest.approx(VOTE_MIN_S + 2 * 1.16)
    assert vote_wait_s(fits, 2) == pytest.approx(VOTE_MIN_S + 2 * 0.58)  # never below the largest fit's own time
    assert vote_wait_s(fits, 189) == VOTE_MAX_S  # was 725 s: 10 + 2 x 1.89 s x 189
    assert vote_wait_s(fits + [Attempt(100, FIT, seconds=1.5)], 110) == pytest.approx(VOTE_MIN_S + 2 * 1.65)


def test_why_a_failed_rank_ended_the_group_survives_the_cut_of_a_long_out_of_memory_message():
    oom = "OutOfMemoryError: CUDA out of memory. Tried to allocate 632.00 MiB. " * 20
    why = "; no vote from rank(s) [1] within 60 s"
    text = with_reason(oom, why)
    assert len(text) == MESSAGE_CHARS and text.endswith(why) and text.startswith("OutOfMemoryError")
    assert with_reason("short", why) == "short" + why
    assert with_reason("short", "") == "short"


def test_commands_and_votes_go_to_disk_and_back(tmp_path):
    write_command(tmp_path, 3, Command("trial", 64, 12.5))
    assert read_command(tmp_path, 3) == Command("trial", 64, 12.5) and read_command(tmp_path, 4) is None
    write_vote(tmp_path, 3, 1, Vote(OOM, [7, 2], 64, in_collective=True))
    assert read_vote(tmp_path, 3, 1) == Vote(OOM, [7, 2], 64, True)
    vote_path(tmp_path, 3, 0).write_text('{"collectives": [1]}')  # no outcome: not a vote
    assert read_vote(tmp_path, 3, 0) is None


def test_a_model_built_again_with_less_memory_ends_the_group():
    gib = 2**30
    first = RankSetup(capacity_bytes=140 * gib, weights_bytes=4 * gib)
    assert memory_lost(first, RankSetup(capacity_bytes=int(139.7 * gib))) == ""  # lazily loaded kernels, not a model
    assert memory_lost(first, RankSetup(capacity_bytes=137 * gib)).startswith("built again with 3.00 GiB less memory")
    assert memory_lost(RankSetup(), RankSetup(capacity_bytes=1)) == ""
    assert memory_lost(None, RankSetup(capacity_bytes=1)) == ""


def _entry(command, outcome, at, batch=64, peak=100):
    return RankTrial(batch, outcome, peak_reserved=peak, seconds=0.5, command=command, at=at)


def test_the_group_answer_is_a_fit_on_every_rank_or_the_earliest_failure():
    records = [
        RankRecord(0, 2, batches=[_entry(0, FIT, 1.0), _entry(1, OOM, 5.0, peak=300)], answered=1),
        RankRecord(1, 2, batches=[_entry(0, FIT, 1.0, peak=120), _entry(1, OOM, 4.0, peak=310)], answered=1),
    ]
    fitted = command_attempt(records, 0, 64, None, False)
    assert fitted.fits and fitted.peak_reserved == 120
    failed = command_attempt(records, 1, 64, None, False)
    assert failed.outcome == OOM and failed.peak_reserved == 310 and failed.message.startswith("rank 1:")
    # a rank that could not start fails the group's first command; nothing recorded and a dead launcher is a crash
    setup = [RankRecord(0, 2, failure=RankFailure("setup", None, OOM, "building", at=1.0)), None]
    assert command_attempt(setup, 0, 1, 3, False).message == "rank 0: building"
    assert command_attempt([None, None], 2, 8, 1, False, "boom").outcome == CRASH
    assert command_attempt([None, None], 2, 8, None, True).outcome == TIMEOUT


def test_served_groups_are_on_unless_turned_off():
    assert served_groups_on({}) and served_groups_on({"MEMPROBE_SERVED_GROUPS": "1"})
    assert not served_groups_on({"MEMPROBE_SERVED_GROUPS": "0"})


# --- the search against a fake launcher -----------------------------------------------------------


class FakeServed:
    """A served group over FakeGroup's memory: every trial answers as a launch would; an out-of-memory trial
    goes on in the same group when every rank ran out (`shared_oom`), else it ends the group."""

    def __init__(self, fake: FakeGroup, req: LaunchRequest, shared_oom: bool) -> None:
        self.fake, self.req, self.shared_oom = fake, req, shared_oom
        self.index = 0
        self.alive = True
        self.records: list = []
        self.killed = self.closed = False

    @property
    def setup(self):
        return self.records[0].setup if self.records else None

    def trial(self, batch: int, vote_wait_s: float) -> Attempt:
        result = self.fake(LaunchRequest(self.req.workload, "fp32", self.req.strategy, 2, [batch]))
        self.fake.requests.pop()  # a trial of this group, not a launch
        self.records = result.ranks
        attempt = result.attempts[0]
        attempt.fresh = self.index == 0
        self.index += 1
        if not attempt.fits and not self.shared_oom:
            self.alive = False
        return attempt

    def close(self) -> None:
        self.closed, self.alive = True, False

    def kill(self) -> None:
        self.killed, self.alive = True, False


@pytest.mark.parametrize("shared_oom", [True, False], ids=["oom-on-every-rank", "oom-on-one-rank"])
def test_the_served_search_gives_the_same_answer_with_fewer_process_groups(monkeypatch, shared_oom):
    answers = {}
    for served in (False, True):
        monkeypatch.setenv("MEMPROBE_SERVED_GROUPS", "1" if served else "0")
        fake = FakeGroup()
        groups: list[FakeServed] = []

        def serve(req, fake=fake, groups=groups):
            fake.requests.append(req)  # a group is a launch
            groups.append(FakeServed(fake, req, shared_oom))
            return groups[-1]

        fake.serve = serve  # type: ignore[attr-defined]
        result, _ = scan_precision_distributed(
            TOY, "fp32", fake_group_opts(curve=False), 2, "ddp", RecordingProgress(), fake
        )
        answers[served] = (result.max_batch, result.proof.fits, result.proof.fails, result.settings.launches)
        assert all(g.closed or g.killed or not g.alive for g in groups)
    (b0, fits0, fails0, plain), (b1, fits1, fails1, served_counts) = answers[False], answers[True]
    assert (b0, fits0, fails0) == (b1, fits1, fails1) == (990, 990, 991)
    assert served_counts["served_search"] and not plain["served_search"]
    assert served_counts["search_process_groups"] < plain["search_process_groups"]
    assert served_counts["process_groups"] < plain["process_groups"]
    if shared_oom:
        assert served_counts["search_process_groups"] == 1


def test_a_served_group_that_is_interrupted_is_killed(monkeypatch):
    fake = FakeGroup()
    groups: list[FakeServed] = []

    def serve(req):
        groups.append(FakeServed(fake, req, True))
        original = groups[-1].trial

        def trial(batch, wait):
            if groups[-1].index == 3:
                raise KeyboardInterrupt
            return original(batch, wait)

        groups[-1].trial = trial  # type: ignore[method-assign]
        return groups[-1]

    fake.serve = serve  # type: ignore[attr-defined]
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt) as stopped:
        scan_precision_distributed(TOY, "fp32", fake_group_opts(curve=False), 2, "ddp", RecordingProgress(), fake)
    assert time.monotonic() - started < 10
    assert groups[0].killed
    kept = stopped.value.result  # type: ignore[attr-defined]
    assert [a.batch for a in kept.attempts][:2] == [1, 2] and len(kept.attempts) == 3
    assert kept.status == "interrupted" and kept.settings.interrupted_at == "search"


@pytest.mark.slow
def test_prestarted_launches_take_standbys_started_ahead_and_end_the_unused_ones(tmp_path, monkeypatch):
    from memprobe.probe.distributed.standby import Prestarted, prestart_on

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert prestart_on("cuda", {}) and not prestart_on("cpu", {}) and prestart_on("cpu", {"MEMPROBE_PRESTART": "1"})

    def request(world, strategy, batches):
        return LaunchRequest(
            TOY, "fp32", strategy, world, batches, device="cpu", cpu_budget_bytes=BUDGET, timeout_s=120
        )

    launcher = Prestarted()
    try:
        first = launcher(request(2, "ddp", [1, 8]))
        launcher.expect(request(1, "none", [8]))  # the 1-GPU baseline's standby, ahead
        time.sleep(3.0)
        second = launcher(request(2, "ddp", [4000]))  # on the standby the first one started
        single = launcher(request(1, "none", [8]))
    finally:
        launcher.close()
    assert [a.outcome for a in first.attempts] == [FIT, FIT] and "prestarted" not in first.timeline
    assert [a.outcome for a in second.attempts] == [OOM] and second.timeline["prestarted"] is True
    assert second.timeline["imports_s"] == 0.0 or second.timeline["imports_s"] < first.timeline["imports_s"]
    assert single.attempts[0].fits and single.timeline["prestarted"] is True
    assert launcher.prestarted == 2 and launcher.standbys == {}
    time.sleep(1.0)
    assert rank_processes(str(tmp_path)) == []  # the standbys started for launches that never came are gone
