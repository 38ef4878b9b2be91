"""The memory breakdown: toy categories against hand-computed bytes, the sum rule, records, report, API, CLI."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from memprobe.cli.app import main
from memprobe.compare.breakdown import breakdown_report, comparison_rows, within_goal
from memprobe.core.breakdown import Breakdown, assemble, check_sum, what_buys_more_batch
from memprobe.core.registry import family_builder, load_registry
from memprobe.core.results import PrecisionResult, ScanResult, read_result, write_result
from memprobe.training.breakdown import measure_breakdown
from memprobe.training.cpu_memory import LiveBytes
from memprobe.training.step import Memory

GIB = 1024**3


def _toy_counts():
    """(parameter elements, parameter tensors) of the registry's toy MLP, from its params."""
    p = load_registry()["toy"].params
    widths = [p["features"]] + [p["hidden"]] * p["layers"] + [p["classes"]]
    elements = sum(a * b + b for a, b in zip(widths, widths[1:]))
    return elements, 2 * (len(widths) - 1)


@pytest.fixture(scope="module")
def toy_breakdown():
    workload = load_registry()["toy"]
    live = LiveBytes()
    with live:
        task = family_builder(workload.family)(workload.params, workload.optimizer, torch.device("cpu"))
        return measure_breakdown(task, "fp32", 8, 3, Memory(torch.device("cpu"), live))


def test_toy_parameters_gradients_and_adam_state_are_the_hand_computed_bytes(toy_breakdown):
    elements, tensors = _toy_counts()
    c = toy_breakdown.categories
    assert c["parameters"] == 4 * elements == 603176
    # The peak of the toy at batch 8 is in the optimizer step: every gradient is alive.
    assert c["gradients"] == 4 * elements
    # AdamW: exp_avg and exp_avg_sq per parameter, plus one float32 `step` per parameter tensor.
    assert c["optimizer_state"] == 2 * 4 * elements + 4 * tensors
    assert c["inputs"] == 8 * 64 * 4 + 8 * 8  # x float32, y int64
    assert c["parameter_copies"] == 0  # fp32: no autocast copies


def test_toy_categories_add_up_to_the_peak(toy_breakdown):
    assert toy_breakdown.total == toy_breakdown.peak_reserved
    assert check_sum(toy_breakdown) == ""
    assert toy_breakdown.basis == "measured" and "MemTracker" in toy_breakdown.instrument
    assert toy_breakdown.seconds is not None and toy_breakdown.seconds > 0
    assert toy_breakdown.outside_pytorch is None  # CPU
    # each hidden Linear holds its 8 x 256 float32 output for backward
    assert {"module": "Sequential.0", "bytes": 8 * 256 * 4} in toy_breakdown.top_modules
    assert len(toy_breakdown.top_modules) <= 10


def test_bf16_counts_the_weight_copies_apart_from_activations():
    workload = load_registry()["toy"]
    live = LiveBytes()
    with live:
        task = family_builder(workload.family)(workload.params, workload.optimizer, torch.device("cpu"))
        record = measure_breakdown(task, "bf16", 8, 3, Memory(torch.device("cpu"), live))
    # the first Linear's own activation: its bf16 input copy (8x64) and output (8x256), not its weight copy
    assert {"module": "Sequential.0", "bytes": 8 * 64 * 2 + 8 * 256 * 2} in record.top_modules
    assert record.total == record.peak_reserved


def test_assemble_names_slack_and_unattributed_and_the_sum_rule_can_fail():
    record = assemble(4, "measured", {"parameters": 100, "activations": 300}, peak_allocated=450, peak_reserved=600)
    assert record.categories["allocator_slack"] == 150 and record.categories["unattributed"] == 50
    assert record.total == 600 and check_sum(record) == ""
    record.categories["activations"] += 100  # a record that no longer adds up
    assert "away from the peak reserved" in check_sum(record)
    with pytest.raises(ValueError):
        assemble(1, "measured", {"weights": 1}, 1, 1)


def test_what_buys_more_batch_turns_bytes_into_batch_and_names_the_option():
    record = assemble(10, "measured", {"optimizer_state": 4 * GIB, "activations": 10 * GIB}, 14 * GIB, 14 * GIB,
                      per_sample_bytes=GIB)
    levers = what_buys_more_batch(record, "bf16", "llama-causal-lm")
    first = levers[0]
    assert (first.category, first.batch) == ("activations", 10) and "--checkpointing" in first.option
    opt = next(lever for lever in levers if lever.category == "optimizer_state")
    assert opt.batch == 4 and "--lora" in opt.option
    assert opt.text().startswith("optimizer state 4.00 GiB = +4 batch at 1.000 GiB per sample") and "estimate" in opt.text()
    assert what_buys_more_batch(assemble(1, "measured", {}, 1, 1)) == []  # no per-sample cost: no estimate


def test_result_file_round_trip_keeps_the_breakdown(tmp_path, toy_breakdown):
    result = ScanResult(workload={"name": "toy", "family": "toy-mlp"}, environment={"gpu": {"name": "cpu"}}, settings={},
                        precisions={"fp32": PrecisionResult("fp32", status="done", max_batch=8,
                                                            breakdown=toy_breakdown)})
    path = write_result(result, tmp_path / "r.json")
    back = read_result(path).precisions["fp32"].breakdown
    assert isinstance(back, Breakdown) and back == toy_breakdown
    data = json.loads(path.read_text())
    data["precisions"]["fp32"]["breakdown"]["categories"] = "lots"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="malformed breakdown"):
        read_result(path)


def test_report_shows_measured_and_compares_only_at_the_same_batch(toy_breakdown):
    result = ScanResult(workload={"name": "toy"}, environment={"gpu": {"name": "cpu"}}, settings={},
                        precisions={"fp32": PrecisionResult("fp32", breakdown=toy_breakdown)})
    predicted = Breakdown.from_dict({**toy_breakdown.to_dict(), "basis": "predicted"})
    text = breakdown_report([result], [{"workload": "toy", "precision": "fp32", "memory": "H100", "breakdown": predicted}])
    assert "optimizer state" in text and "within 3% or 0.5 GiB" in text and "sum rule" in text
    other = Breakdown.from_dict({**toy_breakdown.to_dict(), "batch": 9})
    assert "not compared" in breakdown_report([result], [{"workload": "toy", "precision": "fp32", "breakdown": other}])
    rows = comparison_rows(toy_breakdown, predicted)
    assert all(r["within_goal"] for r in rows) and rows[-1]["category"] == "peak_reserved"
    assert within_goal(100 * GIB, 102 * GIB) and not within_goal(10 * GIB, 11 * GIB)


def test_scan_cli_records_the_breakdown_at_b_and_report_shows_it(tmp_path):
    runner = CliRunner()
    out = tmp_path / "out"
    res = runner.invoke(main, ["scan", "--model", "toy", "--device", "cpu", "--cpu-memory-budget", "8MiB", "-p", "fp32",
                               "--no-curve", "--no-throughput", "--breakdown", "--out", str(out)])
    assert res.exit_code == 0, res.output
    (path,) = out.glob("*.json")
    p = read_result(path).precisions["fp32"]
    assert p.breakdown is not None and p.breakdown.batch == p.max_batch > 0
    assert p.breakdown.categories["parameters"] == 603176 and check_sum(p.breakdown) == ""
    assert p.breakdown.per_sample_bytes and p.breakdown.per_sample_bytes > 0
    shown = runner.invoke(main, ["report", "--breakdown", str(out)])
    assert shown.exit_code == 0 and f"at batch {p.max_batch}" in shown.output and "what buys more batch" in shown.output


def test_cpu_scans_leave_the_breakdown_off_by_default(tmp_path):
    res = CliRunner().invoke(main, ["scan", "--model", "toy", "--device", "cpu", "--cpu-memory-budget", "8MiB", "-p",
                                    "fp32", "--no-curve", "--no-throughput", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    (path,) = tmp_path.glob("*.json")
    assert read_result(path).precisions["fp32"].breakdown is None


def test_api_and_predict_cli_give_the_predicted_breakdown(tmp_path):
    import memprobe

    record = memprobe.breakdown("toy", "fp32", 8)
    assert record.basis == "predicted" and record.categories["parameters"] == 603176
    assert record.categories["optimizer_state"] == 1206384 and record.total == record.peak_reserved
    out = tmp_path / "p.json"
    res = CliRunner().invoke(main, ["predict", "--model", "toy", "--memory", "4GiB", "-p", "fp32", "--breakdown",
                                    "--breakdown-out", str(out)])
    assert res.exit_code == 0, res.output
    assert "(predicted)" in res.output and out.exists()
    (tmp_path / "junk.json").write_text("{}")
    junk = CliRunner().invoke(main, ["report", "--breakdown", str(tmp_path / "p.json"), "--predicted",
                                     str(tmp_path / "junk.json")])
    assert junk.exit_code != 0 and "Error:" in junk.output
