"""The files between a multi-GPU scan and its ranks: the launch's request read back typed, a bad one refused naming
its field; a rank's record (rank<R>.json) read back typed, its setup, marks, trials, timed run and rebuilds records of
their own: unknown keys kept, half a record, none, or one with a field of another type is None."""

from __future__ import annotations

import json

import pytest

from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.process.outcomes import FIT, OOM
from memprobe.core.process.protocol import TrialSettings
from memprobe.core.process.rank_record import (
    LaunchRequest,
    RankFailure,
    RankMarks,
    RankRecord,
    RankRequest,
    RankSetup,
    RankTrial,
    Rebuild,
    StandbyRequest,
    TimedSteps,
    rank_record_path,
    read_rank_record,
    read_rank_records,
    read_rank_request,
    write_rank_request,
)
from memprobe.core.process.wire import MessageError, to_wire
from memprobe.core.records.records import Timed
from memprobe.core.workload.registry import Workload

TOY = Workload("toy", "toy-mlp", "a toy", "samples", {"hidden": 8}, {"name": "adam"})
LAUNCH = LaunchRequest(
    TOY,
    "bf16",
    "fsdp",
    2,
    [1, 3],
    measure=TimedSteps(1, 2),
    device="cpu",
    cpu_budget_bytes=1000,
    rank_cpu_budget_bytes={"1": 500},
    settings=TrialSettings(cudnn_benchmark=True),
    serve=True,
)


@pytest.mark.parametrize(
    "request_",
    [RankRequest(LAUNCH, "/tmp/launch", 42, prestarted=True), StandbyRequest("toy-mlp", "cpu", "/tmp/launch", 42)],
    ids=lambda r: type(r).__name__,
)
def test_a_launch_request_reads_back_as_written(tmp_path, request_):
    write_rank_request(tmp_path / "request.json", request_)
    assert read_rank_request(tmp_path / "request.json") == request_
    assert LAUNCH.cpu_budget(1) == 500 and LAUNCH.cpu_budget(0) == 1000


@pytest.mark.parametrize(
    "change, says",
    [
        ({"kind": "dance"}, "not a launch request: kind 'dance'"),
        ({"run_dir": None}, "not a RankRequest: 'run_dir': expected str, got null"),
        ({"launch": {"precision": "fp32"}}, "'launch': .*no 'workload'"),
        ({"launch": {**to_wire(LAUNCH), "batches": [1, "2"]}}, "'batches': expected int"),
        ({"launch": {**to_wire(LAUNCH), "measure": {"warmup": 1}}}, "'measure'.*no 'steps'"),
    ],
)
def test_a_bad_launch_request_is_refused_naming_the_field(tmp_path, change, says):
    path = tmp_path / "request.json"
    write_rank_request(path, RankRequest(LAUNCH, "/tmp/launch", 42))
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(MessageError, match=says):
        read_rank_request(path)


def test_a_record_goes_to_disk_and_back_with_its_failure_and_the_keys_this_version_does_not_know(tmp_path):
    record = RankRecord(1, 2, pid=42, batches=[RankTrial(8, OOM, command=3)], answered=2, committed=3)
    record.failure = RankFailure("trial", 8, OOM, "OutOfMemoryError", at=5.0, command=3, extra={"newer": 1})
    record.extra["from_a_newer_rank"] = [1, 2]
    record.save(tmp_path)
    written = json.loads(rank_record_path(tmp_path, 1).read_text())
    assert written["from_a_newer_rank"] == [1, 2] and written["failure"]["newer"] == 1
    assert "peak_allocated" not in written["failure"] and written["failure"]["batch"] == 8
    again = read_rank_record(tmp_path, 1)
    assert again == record
    assert again.entry(3) == RankTrial(8, OOM, command=3) and again.entry(4) is None


def test_a_record_not_yet_written_or_not_a_record_reads_as_none(tmp_path):
    rank_record_path(tmp_path, 0).write_text('{"rank": 0, "batches": [')  # half of one
    rank_record_path(tmp_path, 1).write_text('{"failure": {"stage": "trial"}}')  # a failure with no outcome
    assert read_rank_records(tmp_path, 3) == [None, None, None]


def test_an_older_record_without_the_served_group_keys_reads_with_their_defaults(tmp_path):
    old = {"rank": 0, "world_size": 2, "pid": 7, "batches": [], "measure": None, "failure": None, "done": True}
    rank_record_path(tmp_path, 0).write_text(json.dumps(old))
    record = read_rank_record(tmp_path, 0)
    assert record is not None and record.done and record.answered == -1 and record.committed == -1
    assert record.failure is None and record.extra == {}


def _full_record() -> RankRecord:
    """A served rank's record with every part set: its setup, marks, a fitted and a failed trial, a timed run and a
    rebuild."""
    fitted = Attempt(8, FIT, 100, 120, 0.5, steps=3, loss_scale=1024.0)
    return RankRecord(
        0,
        2,
        pid=7,
        batches=[
            RankTrial.of(fitted, command=0, at=10.0),
            RankTrial(16, OOM, 200, 240, 0.7, "oom", command=1, at=11.0),
        ],
        measure=Timed(batch=8, outcome=FIT, samples_per_s=64.0, step_time={"median_s": 0.25}),
        setup=RankSetup({"gpu": {"name": "cpu"}}, 1000, 10, {"kind": "train"}, "tokens", 1.5, 0.2, {"strategy": "ddp"}),
        timeline=RankMarks(1.0, 2.0, 3.0, prestarted=True),
        answered=1,
        committed=1,
        rebuilds=[Rebuild(1, 2.5, 990)],
    )


def test_every_part_of_a_record_comes_back_as_its_record(tmp_path):
    record = _full_record()
    record.save(tmp_path)
    again = read_rank_record(tmp_path, 0)
    assert again == record
    assert isinstance(again.setup, RankSetup) and again.setup.capacity_bytes == 1000 and again.setup.unit == "tokens"
    assert isinstance(again.timeline, RankMarks) and again.timeline.prestarted and again.timeline.joined == 3.0
    assert [type(b) for b in again.batches] == [RankTrial, RankTrial] and again.entry(1).at == 11.0
    assert again.batches[0].loss_scale == 1024.0 and again.batches[0].fits and not again.batches[1].fits
    assert isinstance(again.measure, Timed) and again.measure.step_time == {"median_s": 0.25}
    assert again.rebuilds == [Rebuild(1, 2.5, 990)]
    written = json.loads(rank_record_path(tmp_path, 0).read_text())
    assert written["batches"][1] | {"command": 1, "at": 11.0} == written["batches"][1]  # one flat mapping a trial


@pytest.mark.parametrize(
    "where, bad",
    [
        (("setup", "capacity_bytes"), "1000"),
        (("timeline", "started"), "soon"),
        (("batches", 0, "batch"), "8"),
        (("batches", 1, "outcome"), None),
        (("rebuilds", 0, "seconds"), [2.5]),
        (("measure",), [1]),
    ],
)
def test_a_record_with_a_field_of_another_type_reads_as_none_not_halfway(tmp_path, where, bad):
    _full_record().save(tmp_path)
    path = rank_record_path(tmp_path, 0)
    data = json.loads(path.read_text())
    inner = data
    for key in where[:-1]:
        inner = inner[key]
    inner[where[-1]] = bad
    path.write_text(json.dumps(data))
    assert read_rank_record(tmp_path, 0) is None
    with pytest.raises(MessageError, match=str(where[0])):
        RankRecord.from_dict(data)
