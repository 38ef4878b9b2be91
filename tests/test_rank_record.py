"""A multi-GPU rank's record (rank<R>.json) read back typed: unknown keys kept, half a record or none is None."""

from __future__ import annotations

import json

from memprobe.core.outcomes import OOM
from memprobe.core.rank_record import RankFailure, RankRecord, rank_record_path, read_rank_record, read_rank_records


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
