"""Typed result records: every committed result file reads into them, round-trips, and renders the same report;
the checks of a file come from the records' field types."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from memprobe.cli import main
from memprobe.core.estimates.memory_model import Attempt, MemoryModel
from memprobe.core.records.environment import Environment, GpuInfo, WorkloadRecord
from memprobe.core.records.records import Check, CurvePoint, Pair, Proof, Timed
from memprobe.core.records.results import (
    PRECISION_STATUSES,
    SCHEMA_VERSION,
    ResultFileError,
    ScanResult,
    find_result_files,
    read_result,
    write_result,
)
from memprobe.core.records.schema import rule_of
from memprobe.core.records.settings import PrecisionSettings, ScanSettings, Task
from memprobe.predict.render import render
from memprobe.predict.summary import ComparisonRow, Prediction, trial_fit_batches

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "reports"


def committed_results() -> list[tuple[Path, ScanResult]]:
    """Every result file under reports/ (other JSON there, e.g. benchmarks and calibration, is not one:
    read_result refuses it for its missing schema field, as report's folder search skips it)."""
    found = []
    for path in find_result_files([REPORTS]):
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("schema") != "memprobe.scan":  # e.g. a benchmark's list of rows
            continue
        found.append((path, read_result(path)))
    return found


COMMITTED = committed_results()


def test_reports_hold_result_files_of_every_older_schema_version():
    versions = {json.loads(p.read_text(encoding="utf-8"))["schema_version"] for p, _ in COMMITTED}
    assert len(COMMITTED) >= 40 and {1, 2, 3, 4} <= versions and SCHEMA_VERSION == 5


def test_a_file_from_before_the_repeat_rule_reads_as_one_fresh_run_and_no_band():
    old = [p.proof for _path, r in COMMITTED if r.schema_version < 5 for p in r.precisions.values() if p.proof]
    assert old and all(proof.repeats == 1 and proof.band is None and proof.runs_at_b is None for proof in old)


@pytest.mark.parametrize("path,result", COMMITTED, ids=[str(p.relative_to(REPORTS)) for p, _ in COMMITTED])
def test_every_committed_result_reads_into_typed_records_and_round_trips(tmp_path, path, result):
    assert result.precisions or result.frontier  # a frontier file keeps its points there, not per precision
    for p in result.precisions.values():
        assert p.status in PRECISION_STATUSES
        assert all(type(a) is Attempt for a in p.attempts)
        assert p.proof is None or (isinstance(p.proof, Proof) and all(type(c) is Check for c in p.proof.checks))
        assert p.throughput is None or isinstance(p.throughput, Timed)
        assert all(isinstance(t, Timed) for t in p.extra_batches)
        assert all(isinstance(c, CurvePoint) for c in p.curve)
        assert all(isinstance(m, MemoryModel) for m in p.memory_model.values())
        if p.status == "done" and p.max_batch:
            # B is proven by a fresh fit, or the proof says it is not verified (every fresh check above it failed)
            assert p.proof is not None and (p.proof.fits is not None or not p.proof.verified)
    back = read_result(write_result(result, tmp_path / path.name))
    written = json.loads((tmp_path / path.name).read_text(encoding="utf-8"))
    assert written["schema_version"] == SCHEMA_VERSION
    # The sections typed as Section records come back key for key, in the file's order, nulls kept as nulls.
    original = json.loads(path.read_text(encoding="utf-8"))
    for key in ("workload", "environment", "settings", "frontier"):
        assert list((written.get(key) or {}).items()) == list((original.get(key) or {}).items()), key
    for name, p in original["precisions"].items():
        mine = written["precisions"][name]["settings"]
        assert list(mine.items()) == list(p.get("settings", {}).items()), name
    assert back.precisions == result.precisions and back.frontier == result.frontier
    assert (back.workload, back.environment, back.settings, back.status, back.created) == (
        result.workload,
        result.environment,
        result.settings,
        result.status,
        result.created,
    )


def test_a_rewrite_keeps_keys_no_record_names():
    data = {"batch": 8, "outcome": "fit", "samples_per_s": 2.0, "measured_later": {"x": 1}}
    timed = Timed.from_dict(data)
    assert timed.extra == {"measured_later": {"x": 1}} and timed.to_dict() == data
    proof = Proof.from_dict({"fits": 3, "fails": 4, "search": {"fits": 3, "fails": None}, "checks": [], "new": 1})
    assert proof.found == Pair(3, None) and proof.to_dict()["new"] == 1


def test_a_section_writes_back_the_keys_it_read_or_was_given_and_keeps_unknown_ones():
    data = {"mode": "train", "cpu_budget_bytes": None, "later_option": [1], "precisions": ["fp16"]}
    settings = ScanSettings.from_dict(data)
    assert settings.mode == "train" and settings.cpu_budget_bytes is None and settings.max_batch is None
    assert settings.to_dict() == data and list(settings.to_dict()) == list(data)  # absent stays absent, null null
    settings.interrupted = True  # a key set later follows the ones read
    settings.cpu_budget_bytes = 1024
    assert (
        list(settings.to_dict().items())[-1] == ("interrupted", True) and settings.to_dict()["cpu_budget_bytes"] == 1024
    )
    built = PrecisionSettings(task=Task(parameters=10), emulation=None)  # built in code: the fields given, None too
    assert built.to_dict() == {"task": {"parameters": 10}, "emulation": None}
    env = Environment.from_dict({"gpu": {"name": "H100", "uuid": "x"}, "new": 1})
    assert isinstance(env.gpu, GpuInfo) and env.gpu.name == "H100" and env.extra == {"new": 1}
    env.merge({"gpu": {"name": "H200"}, "driver": "1", "other": 2})  # as a trial process's view is merged in
    assert env.to_dict() == {"gpu": {"name": "H200"}, "new": 1, "driver": "1", "other": 2}


def test_the_checks_come_from_the_field_types():
    """A record's field type is its check: the range of an alias, the words, a required field, a nested record."""
    assert "must be an integer >= 1 or null, got 0" in rule_of(ScanSettings).problem({"world_size": 0}, "settings")
    assert "workload.name is missing" in rule_of(WorkloadRecord).problem({"family": "x"}, "workload")
    found = rule_of(PrecisionSettings).problem({"nothing_fits": {"need_bytes": -1}}, "s")
    assert found.startswith("s.nothing_fits.need_bytes must be an integer >= 0")
    assert rule_of(Environment).problem({"gpu": {"name": "H100", "total_bytes": 0}}, "environment") == (
        "environment.gpu.total_bytes must be an integer >= 1 or null, got 0"
    )
    assert rule_of(Timed).problem({"step_time": {"p10_s": 1.0}}, "t") == "t.step_time.median_s is missing"
    assert (
        rule_of(ScanSettings)
        .problem({"precisions": ["fp8"]}, "settings")
        .startswith("settings.precisions[0] must be one of fp32, tf32, fp16, bf16")
    )


def test_a_newer_schema_version_is_refused_in_one_line(tmp_path):
    path = write_result(COMMITTED[0][1], tmp_path / "r.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    data["schema_version"] = SCHEMA_VERSION + 1
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ResultFileError, match="newer than this memprobe reads"):
        read_result(path)


@pytest.mark.parametrize("args", [["report"], ["guide"], ["report", "--scans"]])
def test_rewritten_committed_results_render_the_same_report(tmp_path, args):
    """Reading and rewriting the H100 and H200 results in today's schema changes no byte of report, guide or
    report --scans (the file paths shown are made the same by rewriting into a copy of the same tree)."""
    copy = tmp_path / "reports"
    for name in ("h100", "h200"):
        shutil.copytree(REPORTS / name, copy / name)
    runner = CliRunner()
    before = runner.invoke(main, [*args, str(copy / "h100"), str(copy / "h200")])
    rewritten = 0
    for path in find_result_files([copy]):
        try:
            result = read_result(path)
        except ResultFileError:
            continue
        write_result(result, path)
        rewritten += 1
    after = runner.invoke(main, [*args, str(copy / "h100"), str(copy / "h200")])
    assert before.exit_code == after.exit_code == 0 and rewritten >= 10
    assert after.output == before.output


def test_trial_fit_is_read_from_the_record_and_from_old_messages():
    recorded = Check(40, "oom", message="ran the 4-step trial, then failed at step 2 of the 11", trial_fit=True)
    unrecorded = Check(41, "oom", message="ran the 4-step trial, then failed at step 2 of the 11")  # an old file
    trial_failed = Check(42, "oom", message="CUDA out of memory", trial_fit=False)
    assert trial_fit_batches([recorded, unrecorded, trial_failed, Check(39, "fit")]) == [39, 40, 41]
    assert not Check(43, "oom", message="CUDA out of memory").trial_fitted


def test_predict_comparison_labels_a_failed_timed_run_after_a_fitting_trial_of_any_length():
    row = ComparisonRow(
        "fp16",
        40,
        "fresh",
        "oom",
        10,
        12,
        True,
        10,
        12,
        None,
        "ran the 4-step trial, then failed at step 2 of the 11 steps that followed it: oom",
        True,
    )
    pred = Prediction("toy", "H100", 4, 1.0, 0.1, [], {}, [], comparison=[row], compared_with="a scan")
    assert "trial fit; timed run oom" in render(pred)
