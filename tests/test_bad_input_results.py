"""Result files edited by hand or broken (issue 37, item 1): every field a command reads is checked on reading, a bad
file is one warning line naming the file, the field and the problem, and nothing in it reaches a table; and every
command gives the same answer whatever the order of its inputs (item 2)."""

from __future__ import annotations

import copy
import json
import random
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from memprobe.cli import main

REPO = Path(__file__).resolve().parents[1]
GOOD = REPO / "reports" / "h100" / "nvidia-h100-80gb-hbm3_resnet50_train_20261124-003756.json"
OTHER = REPO / "reports" / "h100" / "nvidia-h100-80gb-hbm3_bert-large_train_20261124-004018.json"
BASE = json.loads(GOOD.read_text())
DEEP = "DEEP-ARRAY-HERE"


def _edit(dotted: str, value) -> dict:
    data = copy.deepcopy(BASE)
    *path, last = dotted.split(".")
    node = data
    for key in path:
        node = node[int(key)] if isinstance(node, list) else node[key]
    at = int(last) if isinstance(node, list) else last
    if value is KeyError:
        del node[at]
    else:
        node[at] = value
    return data


def _renamed(old: str, new: str) -> dict:
    data = copy.deepcopy(BASE)
    data["precisions"] = {(new if k == old else k): v for k, v in data["precisions"].items()}
    return data


def _error_with_a_proof() -> dict:
    data = _edit("precisions.fp16.max_batch", None)
    data["precisions"]["fp16"]["status"] = "error"
    return data


# (id, the edited file's data, what the warning says). The first ones are the issue's own.
CASES = [
    ("knee-soon", _edit("precisions.fp32.knee_batch", "soon"), "precisions.fp32.knee_batch must be an integer >= 1"),
    ("knee-drop-nan", _edit("precisions.fp32.knee_drop", float("nan")), "precisions.fp32.knee_drop must be a number"),
    ("knee-drop-rise", _edit("precisions.fp32.knee_drop", 0.5), "precisions.fp32.knee_drop must be at most 0"),
    ("huge-B", _edit("precisions.fp16.max_batch", 10**30), "precisions.fp16.max_batch must be at most 1048576"),
    ("b*-above-B", _edit("precisions.fp16.best_batch", 50000), "best_batch (50000) must be at most the max batch B"),
    ("fp8", _renamed("fp16", "fp8"), "a key of precisions must be one of fp32, tf32, fp16, bf16, got 'fp8'"),
    ("zero3", _edit("settings.strategy", "zero3"), "settings.strategy must be one of ddp, fsdp or null, got 'zero3'"),
    ("finetune", _edit("settings.mode", "finetune"), "settings.mode must be one of train, infer, generate or null"),
    ("null-B-done", _edit("precisions.fp16.max_batch", None), "fp16.max_batch is null, but the precision's status"),
    ("null-B-proof", _error_with_a_proof(), "fp16.max_batch (None) is not the proof's fitting batch (proof.fits 1870)"),
    ("pipe-gpu", _edit("environment.gpu.name", "H100 | fast"), "environment.gpu.name must be a name of 1 to 100"),
    ("newline-gpu", _edit("environment.gpu.name", "H100\nfast"), "environment.gpu.name must be a name"),
    ("no-gpu", _edit("environment.gpu", KeyError), "environment.gpu is missing"),
    ("bogus-date", _edit("created", "9999-99-99 bogus"), "created must be a date and time (ISO 8601"),
    ("deep-array", _edit("settings.extra", DEEP), "nests too deeply to read"),
    ("deep-40", _edit("settings.extra", json.loads("[" * 40 + "]" * 40)), "settings.extra[0][0]"),
    ("nan-unit", _edit("precisions.fp16.throughput.unit", "nan"), "throughput.unit must be one of images, sequences"),
    ("pipe-workload", _edit("workload.name", "res|net"), "workload.name must be a name"),
    ("units-per-sample", _edit("precisions.fp32.settings.task.units_per_sample", 1e30), "units_per_sample must be at"),
    ("task-text", _edit("precisions.fp32.settings.task", "big"), "precisions.fp32.settings.task must be a mapping"),
    ("reused-int", _edit("precisions.fp16.proof.reused_from_search", 3), "proof.reused_from_search must be a list"),
    ("step-time-gone", _edit("precisions.fp16.throughput.step_time.median_s", KeyError), "step_time.median_s is"),
    ("power-number", _edit("precisions.fp16.throughput.utilization.power_w", 300), "utilization.power_w must be a"),
    ("curve-above-B", _edit("precisions.fp16.curve.0.batch", 5000), "curve[0].batch (5000) must be at most the max"),
    ("knee-order", _edit("precisions.fp32.knee_after_batch", 900), "knee_after_batch (900) must follow knee_batch"),
    ("proof-order", _edit("precisions.fp16.proof.fails", 1870), "proof.fails (1870) must be above proof.fits (1870)"),
    # issue 51: figures no scan writes, taken as good before
    (
        "per-sample-zero",
        _edit("precisions.fp16.memory_model.peak_reserved.per_sample_bytes", 0),
        "precisions.fp16.memory_model.peak_reserved.per_sample_bytes must be a number > 0, got 0",
    ),
    (
        "per-sample-negative",
        _edit("precisions.fp32.memory_model.peak_allocated.per_sample_bytes", -4e7),
        "peak_allocated.per_sample_bytes must be a number > 0, got -40000000.0",
    ),
    ("no-precisions", _edit("precisions", {}), "precisions is empty: the file holds no result of any precision"),
    ("future-date", _edit("created", "2999-01-01T00:00:00+00:00"), "created is '2999-01-01T00:00:00+00:00', a date"),
    ("ancient-date", _edit("created", "1970-01-01T00:00:00"), "created is '1970-01-01T00:00:00', before 2020"),
]
COMMANDS = [["report"], ["report", "--scans"], ["report", "--format", "json"], ["report", "--llm"], ["guide"]]


def _write(path: Path, data: dict) -> None:
    text = json.dumps(data)
    path.write_text(text.replace(json.dumps(DEEP), "[" * 5000 + "]" * 5000))


def _tables_whole(text: str) -> bool:
    """Whether every markdown table in `text` has the same number of '|' on each of its lines."""
    for block in re.split(r"\n\s*\n", text):
        rows = [line for line in block.splitlines() if line.startswith("|")]
        if len({line.count("|") for line in rows}) > 1:
            return False
    return True


@pytest.fixture(params=CASES, ids=[c[0] for c in CASES])
def folder(request, tmp_path) -> tuple[Path, str]:
    """A folder with one good result file and the edited one; the fragment its warning must hold."""
    _id, data, fragment = request.param
    (tmp_path / OTHER.name).write_text(OTHER.read_text())
    _write(tmp_path / "edited.json", data)
    return tmp_path, fragment


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_a_bad_file_is_one_warning_naming_file_field_and_problem(folder, argv):
    path, fragment = folder
    result = CliRunner().invoke(main, [*argv, str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: skipped")]
    assert len(warnings) == 1 and str(path / "edited.json") in warnings[0] and fragment in warnings[0], warnings
    assert len(warnings[0]) < 400
    if argv != ["report", "--llm"]:  # bert-large is not an LLM: --llm has nothing else to show
        assert result.exit_code == 0 and "bert-large" in result.stdout and "resnet50" not in result.stdout
        assert _tables_whole(result.stdout) and "nan" not in result.stdout.lower().split()


@pytest.mark.parametrize("case", CASES[:14], ids=[c[0] for c in CASES[:14]])
def test_a_bad_file_named_alone_is_one_error_line(tmp_path, case):
    _id, data, fragment = case
    _write(tmp_path / "edited.json", data)
    for argv in (["report", "--scans"], ["guide"]):
        result = CliRunner().invoke(main, [*argv, str(tmp_path / "edited.json")])
        errors = [line for line in result.output.splitlines() if line.startswith("Error")]
        assert result.exit_code == 1 and len(errors) == 1 and fragment in errors[0], result.output


@pytest.mark.parametrize("case", [CASES[0], CASES[4], CASES[13]], ids=[CASES[i][0] for i in (0, 4, 13)])
def test_plan_refuses_a_bad_result_file_in_one_line(tmp_path, case):
    _id, data, fragment = case
    _write(tmp_path / "edited.json", data)
    argv = ["plan", "-m", "resnet50", "--gpu", "H100 SXM", "-p", "fp16", "--results", str(tmp_path / "edited.json")]
    result = CliRunner().invoke(main, argv)
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert result.exit_code == 1 and len(errors) == 1 and fragment in errors[0], result.output


def test_dates_are_compared_as_dates_not_as_text(tmp_path):
    """10:00 at +09:00 is 01:00 UTC: earlier than 05:00 UTC, though later as text. The newer by date is used."""
    early, late = copy.deepcopy(BASE), copy.deepcopy(BASE)
    early["created"], late["created"] = "2026-11-24T10:00:00+09:00", "2026-11-24T05:00:00+00:00"
    (tmp_path / "a_early.json").write_text(json.dumps(early))
    (tmp_path / "b_late.json").write_text(json.dumps(late))
    result = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "using the newer b_late.json, not a_early.json" in result.output
    assert "using the newer a_early.json" not in result.output


def test_an_edited_file_with_a_bogus_date_does_not_replace_a_real_scan(tmp_path):
    bogus = copy.deepcopy(BASE)
    bogus["created"] = "9999-99-99 bogus"
    bogus["precisions"]["fp16"]["throughput"]["samples_per_s"] = 1.0
    (tmp_path / GOOD.name).write_text(GOOD.read_text())
    (tmp_path / "bogus.json").write_text(json.dumps(bogus))
    result = CliRunner().invoke(main, ["report", "--scans", str(tmp_path)])
    assert result.exit_code == 0 and "warning: skipped" in result.stderr and "bogus.json" in result.stderr
    assert "5,211" in result.stdout or "5211" in result.stdout  # the real scan's fp16 throughput stands


# --- item 2: the same answer whatever the order of the inputs ----------------------------------------------------

H100, H200 = REPO / "reports" / "h100", REPO / "reports" / "h200"
ORDERED = [
    ["guide", "--gpu", "RTX 4090", "--format", "json", "{a}", "{b}"],
    ["guide", "{a}", "{b}"],
    ["report", "{a}", "{b}"],
    ["report", "--scans", "{a}", "{b}"],
    ["report", "--format", "json", "{a}", "{b}"],
    ["plan", "-m", "resnet50", "--gpu", "H200", "-p", "fp32,fp16,bf16", "--results", "{a}", "--results", "{b}"],
]


def _run(argv: list[str], a: str, b: str) -> str:
    result = CliRunner().invoke(main, [x.format(a=a, b=b) for x in argv])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("argv", ORDERED, ids=lambda argv: " ".join(argv[:3]))
def test_swapping_the_folders_changes_nothing(argv):
    assert _run(argv, str(H100), str(H200)) == _run(argv, str(H200), str(H100))


def test_the_files_in_any_order_and_a_file_named_twice_give_the_same_report(tmp_path):
    files = sorted(H100.glob("*.json")) + sorted(H200.glob("*.json"))
    orders = [files, files[::-1]] + [random.Random(seed).sample(files, len(files)) for seed in (1, 2)]
    outputs = set()
    for order in orders:
        for argv in (["report"], ["report", "--scans"], ["guide"]):
            result = CliRunner().invoke(main, [*argv, *map(str, order)])
            assert result.exit_code == 0, result.output
            outputs.add((tuple(argv), result.output))
    assert len(outputs) == 3  # one output per command
    twice = CliRunner().invoke(main, ["report", str(H100), str(files[0])])
    once = CliRunner().invoke(main, ["report", str(H100)])
    assert twice.output == once.output


def test_the_guide_takes_each_cards_line_from_the_nearest_scanned_card_and_shows_measured_ones():
    doc = json.loads(
        _run(["guide", "--gpu", "RTX 4090,H100 SXM,H200", "--format", "json", "{a}", "{b}"], str(H200), str(H100))
    )
    (predicted,) = [t for t in doc["tables"] if t["key"] == "predicted"]
    rows = {
        row["card"]: {k: v["text"] if isinstance(v, dict) else v for k, v in row.items()} for row in predicted["rows"]
    }
    assert rows["H200 SXM"]["bert-large fp32"] == "135" and rows["H100 SXM"]["bert-large fp32"] == "75"  # measured
    assert rows["GeForce RTX 4090"]["pix2pixhd fp32"] == "1 (pred)"  # from the H100's line, the nearer card's
