"""The files between a multi-GPU scan and its ranks: the launch's request read back typed, a bad one refused naming
its field; a rank's record (rank<R>.json) read back typed: unknown keys kept, half a record or none is None."""

from __future__ import annotations

import json

import pytest

from memprobe.core.process.outcomes import OOM
from memprobe.core.process.protocol import TrialSettings
from memprobe.core.process.rank_record import (
    LaunchRequest,
    RankFailure,
    RankRecord,
    RankRequest,
    StandbyRequest,
    TimedSteps,
    rank_record_path,
    read_rank_record,
    read_rank_records,
    read_rank_request,
    write_rank_request,
)
from memprobe.core.process.wire import MessageError, to_wire
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
    record = RankRecord(1, 2, pid=42, batches=[{"batch": 8, "outcome": OOM, "command": 3}], answered=2, committed=3)
    record.failure = RankFailure("trial", 8, OOM, "OutOfMemoryError", at=5.0, command=3, extra={"newer": 1})
    record.extra["from_a_newer_rank"] = [1, 2]
    record.save(tmp_path)
    written = json.loads(rank_record_path(tmp_path, 1).read_text())
    assert written["from_a_newer_rank"] == [1, 2] and written["failure"]["newer"] == 1
    assert "peak_allocated" not in written["failure"] and written["failure"]["batch"] == 8
    again = read_rank_record(tmp_path, 1)
    assert again == record
    assert again.entry(3) == {"batch": 8, "outcome": OOM, "command": 3} and again.entry(4) is None


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
