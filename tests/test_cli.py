"""The command line through click's CliRunner: help, list, user errors, no-GPU exits, a CPU scan, Ctrl-C."""

from __future__ import annotations

import json

import pytest

import memprobe.probe.scan
from conftest import RecordingProgress, has_nvidia_gpu
from fakes import toy_scan
from memprobe.core.records.results import PrecisionResult, read_result
from memprobe.probe.scan import ScanOptions, scan_workload

BUDGET = "8MiB"
no_gpu_only = pytest.mark.skipif(has_nvidia_gpu(), reason="checks the behaviour on a machine without an NVIDIA GPU")


def assert_clean_failure(result, code=None):
    """A user error: non-zero exit through SystemExit, no traceback in the output."""
    assert result.exit_code != 0, result.output
    if code is not None:
        assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output


def error_lines(result):
    return [line for line in result.output.splitlines() if line.startswith("Error")]


# --- help and list --------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["list", "--help"], ["device", "--help"], ["scan", "--help"]])
def test_help(run, args):
    result = run(*args)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_group_help_lists_the_commands(run):
    output = run("--help").output
    for command in ("list", "device", "scan"):
        assert command in output


def test_scan_help_documents_the_options(run):
    output = run("scan", "--help").output
    for option in ("--model", "--precision", "--device", "--cpu-memory-budget", "--out", "--max-batch"):
        assert option in output


def test_version(run):
    result = run("--version")
    assert result.exit_code == 0 and "0.1.0" in result.output


def table_names(output):
    return [line.split("|")[1].strip() for line in output.splitlines() if line.startswith("|")][2:]


def test_list_shows_bert_large(run):
    result = run("list")
    assert result.exit_code == 0, result.output
    assert "bert-large" in table_names(result.output)
    assert "bert-pretraining" in result.output and "sequences" in result.output


def test_list_hides_test_only_unless_all(run, packaged_models):
    from memprobe.core.workload.registry import load_registry

    registry = load_registry(packaged_models)
    shown = table_names(run("list", "--models", packaged_models).output)
    assert shown == [name for name, w in registry.items() if not w.test_only]
    assert "bert-large" in shown and "toy" not in shown
    result = run("list", "--all", "--models", packaged_models)
    assert result.exit_code == 0
    assert table_names(result.output) == list(registry)


# --- user errors ------------------------------------------------------------------------------


def test_scan_unknown_model(run):
    result = run("scan", "--model", "nosuch")
    assert_clean_failure(result)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "unknown model 'nosuch'" in lines[0]
    assert "bert-large" in lines[0]  # the known names


@pytest.mark.parametrize("precision", ["fp8", "fp32,fp64", ","])
def test_scan_bad_precision(run, precision):
    result = run("scan", "--model", "toy", "--precision", precision, "--device", "cpu", "--cpu-memory-budget", BUDGET)
    assert_clean_failure(result, 2)
    (line,) = error_lines(result)
    if precision == ",":  # as predict, plan and report say it
        assert line == "Error: Invalid value for --precision: give at least one precision (e.g. fp16,bf16)"
        return
    assert "unknown precision" in line
    assert "fp32, tf32, fp16, bf16" in line


def test_scan_bad_mode(run):
    assert_clean_failure(run("scan", "--model", "toy", "--mode", "serve"), 2)


@pytest.mark.parametrize("command", [["list"], ["scan", "--model", "toy"]])
def test_malformed_models_file(run, tmp_path, command):
    bad = tmp_path / "team-models.yaml"
    bad.write_text("toy:\n  family: toy-mlp\n  unit: samples\n  params: {features: 64\n  optimizer: {name: sgd}\n")
    result = run(*command, "--models", bad)
    assert_clean_failure(result, 1)
    (line,) = error_lines(result)
    assert "team-models.yaml" in line
    assert "line 5" in line and "malformed YAML" in line


def test_models_file_with_unknown_family(run, tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text("x:\n  family: nope\n  unit: samples\n  optimizer: {name: sgd}\n")
    result = run("list", "--models", bad)
    assert_clean_failure(result, 1)
    assert "unknown family 'nope'" in result.output and "m.yaml" in result.output


def test_missing_models_file(run, tmp_path):
    result = run("list", "--models", tmp_path / "absent.yaml")
    assert_clean_failure(result, 1)
    assert "absent.yaml" in result.output


def test_scan_cpu_needs_a_budget(run):
    result = run("scan", "--model", "toy", "--device", "cpu")
    assert_clean_failure(result, 2)
    assert "--cpu-memory-budget" in error_lines(result)[0]


def test_scan_cpu_bad_budget(run):
    result = run("scan", "--model", "toy", "--device", "cpu", "--cpu-memory-budget", "lots")
    assert_clean_failure(result, 2)
    assert "not a size" in result.output


@pytest.mark.parametrize("args", [["--batch", "0"], ["--batch", "4,x"], ["--steps", "2"], ["--max-batch", "0"]])
def test_scan_bad_numbers(run, args):
    result = run(*toy_scan(BUDGET), *args)
    assert_clean_failure(result, 2)


def test_scan_options_validation():
    with pytest.raises(ValueError, match="steps >= 3"):
        ScanOptions(precisions=["fp32"], steps=2)
    with pytest.raises(ValueError, match="unknown precision"):
        ScanOptions(precisions=[])
    with pytest.raises(ValueError, match="unknown mode"):
        ScanOptions(precisions=["fp32"], mode="serve")


# --- no GPU on this machine -------------------------------------------------------------------


@no_gpu_only
def test_scan_on_cuda_without_a_gpu_exits_2(run, tmp_path):
    result = run("scan", "--model", "toy", "--precision", "fp32", "--out", tmp_path)
    assert_clean_failure(result, 2)
    (line,) = error_lines(result)
    assert "no CUDA" in line or "no NVIDIA" in line
    assert list(tmp_path.iterdir()) == []


@no_gpu_only
def test_device_without_a_gpu_exits_2(run):
    result = run("device")
    assert_clean_failure(result, 2)
    (line,) = error_lines(result)
    assert "no CUDA" in line or "no NVIDIA" in line


# --- a whole scan on the CPU ------------------------------------------------------------------


@pytest.mark.slow
def test_full_cpu_scan(run, tmp_path, packaged_models):
    out = tmp_path / "reports"
    result = run(
        "scan",
        "--model",
        "toy",
        "--models",
        packaged_models,
        "--device",
        "cpu",
        "--cpu-memory-budget",
        BUDGET,
        "--precision",
        "fp32",
        "--timed-steps",
        "2",
        "--wide",  # the table in one piece (by default it is split to fit 120 columns)
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    assert result.exception is None
    files = list(out.iterdir())
    assert len(files) == 1 and files[0].suffix == ".json"
    data = read_result(files[0])
    p = data.precisions["fp32"]
    assert data.status == "complete" and p.status == "done"
    # stdout is the table; progress and the path go to stderr
    table = result.stdout
    rows = [line for line in table.splitlines() if line.startswith("|")]
    assert len(rows) == 3, table  # header, rule, one row
    cells = [c.strip() for c in rows[2].split("|")]
    assert "toy" in cells and "fp32" in cells and str(p.max_batch) in cells
    assert f"{p.max_batch} fits (2 of 2), {p.max_batch + 1} oom" in table  # B fitted in both of its fresh runs
    assert f"wrote {files[0]}" in result.stderr
    assert "trial 1 (search): batch 1" in result.stderr
    assert "(fresh process)" in result.stderr


def test_failed_scan_exits_1_and_says_why(run, tmp_path):
    models = tmp_path / "m.yaml"
    # params of the right names and types, but a size the generator cannot halve down to its bottleneck: building
    # fails in the trial process, a bug, not an OOM
    models.write_text(
        "broken:\n  family: pix2pixhd\n  unit: images\n  params: {width: 100, height: 50}\n  optimizer: {name: sgd}\n"
    )
    result = run(
        "scan",
        "--model",
        "broken",
        "--models",
        models,
        "--device",
        "cpu",
        "--cpu-memory-budget",
        BUDGET,
        "--precision",
        "fp32",
        "--out",
        tmp_path / "out",
    )
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "pix2pixhd: 100x50" in result.stdout  # the table carries the error
    (path,) = (tmp_path / "out").iterdir()
    p = read_result(path).precisions["fp32"]
    assert p.status == "error" and "divisible" in p.error and p.max_batch is None


# --- Ctrl-C -----------------------------------------------------------------------------------


def interrupt_on_second_precision(calls):
    def fake_scan_precision(workload, precision, opts, factory, progress, on_environment, start=None):
        calls.append(precision)
        if len(calls) == 1:
            on_environment({"device_type": "cpu", "gpu": {"name": "cpu", "total_bytes": None}})
            return PrecisionResult(
                precision,
                status="done",
                max_batch=42,
                stop="edge",
                proof={"fits": 42, "fails": 43, "agreed": True, "verified": True, "checks": []},
            )
        raise KeyboardInterrupt

    return fake_scan_precision


def test_interrupt_keeps_finished_precision(monkeypatch, tmp_path, toy):
    calls = []
    monkeypatch.setattr(memprobe.probe.scan, "scan_precision", interrupt_on_second_precision(calls))
    opts = ScanOptions(precisions=["fp32", "bf16", "fp16"], device="cpu", cpu_budget_bytes=8 << 20)
    with pytest.raises(KeyboardInterrupt):
        scan_workload(toy, opts, tmp_path, RecordingProgress())
    assert calls == ["fp32", "bf16"]
    files = list(tmp_path.iterdir())
    assert len(files) == 1, "one result file, no temp files"
    data = json.loads(files[0].read_text())
    assert data["status"] == "partial"
    assert data["settings"]["interrupted"] is True
    assert data["precisions"]["fp32"]["status"] == "done"
    assert data["precisions"]["fp32"]["max_batch"] == 42
    assert data["precisions"]["bf16"]["status"] == "interrupted"
    assert "fp16" not in data["precisions"]
    assert read_result(files[0]).precisions["fp32"].proof.verified is True


def test_ctrl_c_exits_130(run, monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(memprobe.probe.scan, "scan_precision", interrupt_on_second_precision(calls))
    result = run(
        *toy_scan(BUDGET),
        "--precision",
        "fp32,bf16",
        "--out",
        tmp_path,
    )
    assert result.exit_code == 130, result.output
    assert "Traceback" not in result.output
    assert "interrupted" in result.stderr
    (path,) = tmp_path.iterdir()
    data = read_result(path)
    assert data.status == "partial" and data.settings.interrupted is True
    assert data.precisions["fp32"].status == "done" and data.precisions["fp32"].max_batch == 42


def test_python_dash_m_memprobe(tmp_path):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "memprobe", "list", "--all"], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "bert-large" in done.stdout and "toy" in done.stdout


def test_scan_compile_flag_reaches_the_scan_options(run, scan_options_seen, tmp_path):
    seen = scan_options_seen
    base = (*toy_scan("8MiB"), "--out", str(tmp_path))
    assert run(*base, "--compile").exit_code == 0
    assert run(*base).exit_code == 0
    assert [o.compile for o in seen] == [True, False]
    assert seen[0].to_dict()["compile"] is True  # recorded in the result's settings
    assert "torch.compile" in run("scan", "--help").output
