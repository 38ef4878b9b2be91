"""The multi-GPU command line on the CPU: --gpus/--strategy user errors, --parallel scans, the scaling table."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import RecordingProgress
from fakes import TOY, FakeGroup, fake_group_opts, toy_scan
from memprobe.cli import main
from memprobe.compare.scaling import scaling_rows, split_by_world_size, world_size
from memprobe.core.records.results import load_results, read_result
from memprobe.probe.distributed.scan import scan_distributed


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_gpus_and_strategy_mistakes_are_one_line_usage_errors():
    for args, words in (
        (["--gpus", "two"], "--gpus"),
        (["--gpus", "2", "--strategy", "zero"], "unknown strategy"),
        (["--gpus", "2", "--compile"], "--compile"),
        (["--gpus", "2", "--mode", "infer"], "--mode train"),
    ):
        result = run(*toy_scan("8MiB"), *args)
        assert result.exit_code == 2, result.output
        errors = [line for line in result.output.splitlines() if line.startswith("Error")]
        assert len(errors) == 1 and words in errors[0] and "Traceback" not in result.output


@pytest.mark.slow
def test_a_parallel_scan_spreads_precisions_over_gpus_and_writes_one_file_per_workload(tmp_path):
    result = run(
        "scan",
        "--model",
        "toy",
        "--precision",
        "fp32,bf16",
        "--device",
        "cpu",
        "--cpu-memory-budget",
        "3MiB",
        "--no-throughput",
        "--max-batch",
        "40",
        "--parallel",
        "--gpus",
        "2",
        "--out",
        str(tmp_path),
    )
    assert result.exit_code == 0, result.output
    files = sorted(tmp_path.glob("*.json"))
    assert len(files) == 1 and files[0].name.startswith("cpu_toy_train_")
    merged = read_result(files[0])
    assert list(merged.precisions) == ["fp32", "bf16"] and merged.status == "complete"
    assert {p.settings.parallel["gpu"] for p in merged.precisions.values()} == {"0", "1"}  # both at once
    assert all(p.max_batch == 40 and p.proof.verified for p in merged.precisions.values())
    (folder,) = tmp_path.glob("parallel_*")
    summary = [json.loads(line) for line in (folder / "summary.jsonl").read_text().splitlines()]
    assert summary[-1]["serial_estimate_seconds"] >= summary[-1]["wall_seconds"] > 0
    assert not (folder / "parts").exists()  # the parts were merged away
    assert "serial estimate" in result.output


def test_report_puts_multi_gpu_files_in_the_scaling_table_and_keeps_them_out_of_the_single_gpu_tables(tmp_path):
    _result, path = scan_distributed(TOY, fake_group_opts(), 2, "fsdp", tmp_path, RecordingProgress(), FakeGroup())
    loaded = load_results([tmp_path])
    single, multi = split_by_world_size(loaded)
    assert single == [] and [world_size(r) for _p, r in multi] == [2]
    (row,) = scaling_rows([r for _p, r in multi])
    assert row[:7] == ["cpu", "toy", "fp32", "fsdp", 2, 990, "990 fits (2 of 2), 991 oom"]
    assert row[12] == f"{100 * 0.5 / 0.55:.1f}%"
    result = run("report", str(path))
    assert result.exit_code == 0, result.output
    assert "Scaling" in result.output and "fsdp" in result.output and "Traceback" not in result.output


def test_the_one_gpu_max_batch_beside_a_multi_gpu_row_is_the_training_scan_not_the_inference_one():
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    single, multi = split_by_world_size(load_results([repo / "reports" / "h200", repo / "reports" / "h200_multi"]))
    assert any(r.mode == "infer" and r.workload.name == "bert-large" for _p, r in single)  # 2723 in inference
    rows = {
        (row[1], row[2], row[3], row[4]): row for row in scaling_rows([r for _p, r in multi], [r for _p, r in single])
    }
    assert rows[("bert-large", "bf16", "ddp", 2)][7] == 193  # the H200's training edge, beside DDP's 190 per GPU
    assert rows[("resnet50", "bf16", "fsdp", 2)][7] == 3322


def test_merging_parts_keeps_the_asked_order_and_a_missing_or_partial_part_makes_the_file_partial(tmp_path):
    from memprobe.core.records.results import PrecisionResult, ScanResult, write_result
    from memprobe.probe.parallel import Job, merge_parts

    def part(precision, status, batch):
        result = ScanResult(
            workload=TOY.to_dict(),
            environment={"gpu": {"name": "Fake GPU"}},
            settings={},
            precisions={precision: PrecisionResult(precision, status="done", max_batch=batch)},
            status=status,
        )
        return write_result(result, tmp_path / "parts" / f"{precision}.json")

    parts = {
        "bf16": (part("bf16", "complete", 20), Job(TOY, "bf16", slot="1", seconds=3.0)),
        "fp32": (part("fp32", "complete", 10), Job(TOY, "fp32", slot="0", seconds=5.0)),
    }
    merged, path = merge_parts(TOY, ["fp32", "bf16"], parts, tmp_path, "train")
    back = read_result(path)
    assert list(back.precisions) == ["fp32", "bf16"] and back.status == "complete"
    assert back.precisions["bf16"].settings.parallel["gpu"] == "1" and back.precisions["fp32"].max_batch == 10
    parts["fp16"] = (None, Job(TOY, "fp16", slot="0"))  # that child left no file
    merged, _path = merge_parts(TOY, ["fp32", "bf16", "fp16"], parts, tmp_path / "again", "train")
    assert merged.status == "partial" and list(merged.precisions) == ["fp32", "bf16"]


def test_the_interconnect_summary_names_nvlink_or_the_pcie_path():
    from memprobe.probe.distributed.topology import summary, visible_indices

    nvlink = {"gpus": [0, 1], "nvlinks_active": {"0": 18, "1": 18}, "pairs": [{"gpus": [0, 1], "nvlink_p2p": True}]}
    assert summary(nvlink) == "NVLink (18 links per GPU)"
    pcie = {
        "gpus": [0, 1],
        "pairs": [{"gpus": [0, 1], "nvlink_p2p": False, "pcie_common_ancestor": "PCIe host bridge"}],
    }
    assert summary(pcie) == "PCIe (PCIe host bridge)"
    assert visible_indices(2, "3,1,0") == [3, 1] and visible_indices(2, None) == [0, 1]


def _gpu_script(tmp_path, **env):
    import os
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    return subprocess.run(
        ["bash", str(repo / "benchmarks" / "gpu" / "multi_gpu.sh")],
        cwd=repo,
        env={**os.environ, "OUT": str(tmp_path), "DRY": "1", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_gpu_script_runs_a_part_under_its_deadline_with_the_multicast_switches_and_packs_two_files(tmp_path):
    done = _gpu_script(tmp_path / "a", GPUS="2", PART="2d")
    assert done.returncode == 0, done.stderr
    # two files: a call brings back at most 8, so the work folder stays out of OUT
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["results.tgz", "summary.txt"]
    summary = (tmp_path / "a" / "summary.txt").read_text()
    runs = [line for line in summary.splitlines() if line.startswith("== ")]
    assert [r.split()[1] for r in runs] == [
        "2d-bert-large-bf16-2ddp",
        "2d-bert-large-bf16-2fsdp",
        "2d-bert-large-squad-bf16-2ddp",
    ]
    assert all("--no-curve --no-breakdown --out" in r and "--gpus 2 --strategy" in r for r in runs)
    assert summary.count("NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1") == 3
    # past the deadline nothing starts, and what did not is listed to run again by name
    late = _gpu_script(tmp_path / "b", GPUS="2", PART="2d", BUDGET_S="0")
    assert (
        late.returncode == 0
        and 'skipped (run again with STEPS="..."): 2d-bert-large-bf16-2ddp'
        in (tmp_path / "b" / "summary.txt").read_text()
    )
    again = _gpu_script(tmp_path / "c", GPUS="2", STEPS="2d-bert-large-bf16-2fsdp 2g-llama-1b-bf16-2ddp")
    assert again.returncode == 0, again.stderr
    ran = [
        line.split()[1] for line in (tmp_path / "c" / "summary.txt").read_text().splitlines() if line.startswith("== ")
    ]
    assert ran == ["2d-bert-large-bf16-2fsdp", "2g-llama-1b-bf16-2ddp"]
    refused = _gpu_script(tmp_path / "d", GPUS="2", PART="4a")
    assert refused.returncode == 2 and "needs 4 GPUs" in refused.stderr
