"""The multi-GPU command line on the CPU: --gpus/--strategy user errors, --parallel scans, the scaling table."""

from __future__ import annotations

import json

from click.testing import CliRunner

from memprobe.cli import main
from memprobe.compare.scaling import scaling_rows, split_by_world_size, world_size
from memprobe.probe.distributed.scan import scan_distributed
from memprobe.results import load_results, read_result

from conftest import RecordingProgress
from test_distributed import TOY, FakeGroup, _opts


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_gpus_and_strategy_mistakes_are_one_line_usage_errors():
    for args, words in ((["--gpus", "two"], "--gpus"), (["--gpus", "2", "--strategy", "zero"], "unknown strategy"),
                        (["--gpus", "2", "--compile"], "--compile"), (["--gpus", "2", "--mode", "infer"], "--mode train")):
        result = run("scan", "--model", "toy", "--device", "cpu", "--cpu-memory-budget", "8MiB", *args)
        assert result.exit_code == 2, result.output
        errors = [line for line in result.output.splitlines() if line.startswith("Error")]
        assert len(errors) == 1 and words in errors[0] and "Traceback" not in result.output


def test_a_parallel_scan_spreads_precisions_over_gpus_and_writes_one_file_per_workload(tmp_path):
    result = run("scan", "--model", "toy", "--precision", "fp32,bf16", "--device", "cpu", "--cpu-memory-budget", "3MiB",
                 "--no-throughput", "--max-batch", "40", "--parallel", "--gpus", "2", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    files = sorted(tmp_path.glob("*.json"))
    assert len(files) == 1 and files[0].name.startswith("cpu_toy_train_")
    merged = read_result(files[0])
    assert list(merged.precisions) == ["fp32", "bf16"] and merged.status == "complete"
    assert {p.settings["parallel"]["gpu"] for p in merged.precisions.values()} == {"0", "1"}  # both at once
    assert all(p.max_batch == 40 and p.proof["verified"] for p in merged.precisions.values())
    (folder,) = tmp_path.glob("parallel_*")
    summary = [json.loads(line) for line in (folder / "summary.jsonl").read_text().splitlines()]
    assert summary[-1]["serial_estimate_seconds"] >= summary[-1]["wall_seconds"] > 0
    assert not (folder / "parts").exists()  # the parts were merged away
    assert "serial estimate" in result.output


def test_report_puts_multi_gpu_files_in_the_scaling_table_and_keeps_them_out_of_the_single_gpu_tables(tmp_path):
    _result, path = scan_distributed(TOY, _opts(), 2, "fsdp", tmp_path, RecordingProgress(), FakeGroup())
    loaded = load_results([tmp_path])
    single, multi = split_by_world_size(loaded)
    assert single == [] and [world_size(r) for _p, r in multi] == [2]
    (row,) = scaling_rows([r for _p, r in multi])
    assert row[:7] == ["cpu", "toy", "fp32", "fsdp", 2, 990, "990 fits, 991 oom"]
    assert row[12] == f"{100 * 0.5 / 0.55:.1f}%"
    result = run("report", str(path))
    assert result.exit_code == 0, result.output
    assert "Scaling" in result.output and "fsdp" in result.output and "Traceback" not in result.output
