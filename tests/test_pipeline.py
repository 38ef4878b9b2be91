"""One scan pipeline over both trial back-ends: --soak, --curve and --batch on 2 CPU ranks (gloo, real torchrun
launches of the toy workload), options N ranks cannot honour refused before anything runs, and one writer of
result files: a nothing-fits scan writes the same settings through the API and through the CLI."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import memprobe
import memprobe.probe.nothing_fits
from conftest import RecordingProgress
from fakes import TOY, FakeGroup, fake_group_opts, toy_scan
from memprobe.cli import main
from memprobe.core.process.outcomes import FIT
from memprobe.core.records.results import read_result
from memprobe.probe.distributed.scan import scan_precision_distributed


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.slow
def test_soak_and_curve_run_on_two_ranks(tmp_path):
    """A real 2-rank scan (gloo on the CPU): B is the batch cap, soaked, and curved."""
    result = run(
        "scan",
        "--model",
        "toy",
        "--precision",
        "fp32",
        "--device",
        "cpu",
        "--cpu-memory-budget",
        "50MB",
        "--gpus",
        "2",
        "--max-batch",
        "4",
        "--soak",
        "5",
        "--repeat",  # one fresh group proves B here: the repeat rule has tests of its own (test_repeat)
        "1",
        "--curve",
        "2",
        "--warmup",
        "1",
        "--timed-steps",
        "2",
        "--curve-budget",
        "600",
        "--out",
        tmp_path,
    )
    assert result.exit_code == 0, result.output
    (path,) = tmp_path.glob("*.json")
    p = read_result(path).precisions["fp32"]
    assert p.status == "done" and p.max_batch == 4 and p.settings.world_size == 2
    soak = p.proof.soak
    assert soak["steps"] == 5 and soak["max_batch"] == 4 and not soak["lowered"]
    assert soak["runs"][0]["steps"] == 5 and soak["runs"][0]["outcome"] == FIT  # 5 steps ran on every rank
    assert [(c.batch, c.outcome) for c in p.curve] == [(2, FIT), (4, FIT)]
    assert p.best_batch in (2, 4) and p.curve_seconds > 0 and p.curve[0].samples_per_s > 0
    assert p.settings.scaling.per_gpu_batch == 4
    assert "curve: batch 2 ->" in result.stderr and "soak: training batch 4 for 5 steps" in result.stderr


def test_soak_curve_and_requested_batches_over_fake_launches_are_group_launches():
    """Which launches the pipeline asks for on N ranks: a soak is a trial of --soak steps, a curve point and a
    requested batch (--batch) a timed run."""
    group = FakeGroup()
    opts = fake_group_opts(soak=7, curve_batches=[100, 500], batches=[300])
    result, _setup = scan_precision_distributed(TOY, "fp32", opts, 2, "ddp", RecordingProgress(), group)
    soaks = [r for r in group.requests if r.steps == 7]
    assert [(r.batches, r.world_size, r.measure) for r in soaks] == [([990], 2, None)]
    assert result.proof.soak["max_batch"] == 990
    points = [r for r in group.requests if r.measure and r.batches[-1] in (100, 500)]
    assert [(r.batches, r.world_size) for r in points] == [([500], 2), ([100], 2)]
    assert [c.batch for c in result.curve] == [100, 500, 990] and result.best_batch is not None
    assert [(m.batch, m.outcome) for m in result.extra_batches] == [(300, FIT)]
    assert [r.world_size for r in group.requests if r.batches == [300]] == [2]


@pytest.mark.parametrize("extra, words", [(["--compile"], "--compile"), (["--mode", "infer"], "--mode train")])
def test_an_option_n_ranks_cannot_honour_is_refused_before_the_one_gpu_scan_runs(tmp_path, monkeypatch, extra, words):
    import memprobe.probe.scan

    def never(*args, **kwargs):
        raise AssertionError("a scan ran before the options were checked")

    monkeypatch.setattr(memprobe.probe.scan, "scan_workload", never)
    result = run(
        *toy_scan("8MiB"),
        "--gpus",
        "1,2",
        *extra,
        "--out",
        tmp_path,
    )
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and words in errors[0] and "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []


# --- one writer: the nothing-fits explanation is the pipeline's, whichever entry point ------------------------

NEED = 3 << 30
TIMING = {"build_seconds", "cuda_init_seconds", "first_process_ready_seconds"}


def _fake_need(calls):
    def need(workload, precision, env=None, mode="train"):  # env: the variables the scan gives its processes
        calls.append((workload.name, precision))
        return NEED

    return need


def _settings(path):
    data = json.loads(path.read_text())
    p = data["precisions"]["fp32"]
    return data["settings"], {k: v for k, v in p["settings"].items() if k not in TIMING}, p["max_batch"]


@pytest.mark.slow
def test_a_nothing_fits_scan_writes_the_same_settings_through_the_api_and_the_cli(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(memprobe.probe.nothing_fits, "_default_need", _fake_need(calls))
    api_dir, cli_dir = tmp_path / "api", tmp_path / "cli"
    memprobe.find_max_batch("toy", "fp32", "cpu", cpu_memory_budget="3MB", throughput=False, out=api_dir)
    result = run(
        "scan",
        "--model",
        "toy",
        "--precision",
        "fp32",
        "--device",
        "cpu",
        "--cpu-memory-budget",
        "3MB",
        "--no-throughput",
        "--out",
        cli_dir,
    )
    assert result.exit_code == 0, result.output
    assert calls == [("toy", "fp32"), ("toy", "fp32")]  # one trace per scan, in the pipeline
    (api_file,), (cli_file,) = api_dir.glob("*.json"), cli_dir.glob("*.json")
    api, cli = _settings(api_file), _settings(cli_file)
    assert api[2] == cli[2] == 0
    assert api[1]["nothing_fits"] == cli[1]["nothing_fits"] and api[1]["nothing_fits"]["need_bytes"] == NEED
    assert api == cli
    assert "nothing trains on cpu" in result.stderr and "would need about 3.0 GiB" in result.stderr
    assert result.stderr.index("wrote ") < result.stderr.index(
        "nothing trains on cpu"
    )  # the CLI prints what was written
