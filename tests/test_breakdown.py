"""The memory breakdown: toy categories against hand-computed bytes, the sum rule, records, report, API, CLI."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from fakes import toy_scan
from memprobe.cli.app import main
from memprobe.compare.breakdown import breakdown_report, comparison_rows, within_goal
from memprobe.core.records.breakdown import Breakdown, assemble, check_sum, what_buys_more_batch
from memprobe.core.records.results import PrecisionResult, ScanResult, read_result, write_result
from memprobe.core.workload.registry import load_registry
from memprobe.training.breakdown import measure_breakdown
from memprobe.training.cpu_memory import LiveBytes
from memprobe.training.step import Memory
from memprobe.workloads.families import family_builder

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
    record = assemble(
        10, "measured", {"optimizer_state": 4 * GIB, "activations": 10 * GIB}, 14 * GIB, 14 * GIB, per_sample_bytes=GIB
    )
    levers = what_buys_more_batch(record, "bf16", "llama-causal-lm")
    first = levers[0]
    assert (first.category, first.batch) == ("activations", 10) and "--checkpointing" in first.option
    opt = next(lever for lever in levers if lever.category == "optimizer_state")
    assert opt.batch == 4 and "--lora" in opt.option
    assert (
        opt.text().startswith("optimizer state 4.00 GiB = +4 batch at 1.000 GiB per sample")
        and "estimate" in opt.text()
    )
    assert what_buys_more_batch(assemble(1, "measured", {}, 1, 1)) == []  # no per-sample cost: no estimate


def test_result_file_round_trip_keeps_the_breakdown(tmp_path, toy_breakdown):
    result = ScanResult(
        workload={"name": "toy", "family": "toy-mlp"},
        environment={"gpu": {"name": "cpu"}},
        settings={},
        precisions={"fp32": PrecisionResult("fp32", status="done", max_batch=8, breakdown=toy_breakdown)},
    )
    path = write_result(result, tmp_path / "r.json")
    back = read_result(path).precisions["fp32"].breakdown
    assert isinstance(back, Breakdown) and back == toy_breakdown
    data = json.loads(path.read_text())
    data["precisions"]["fp32"]["breakdown"]["categories"] = "lots"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="breakdown.categories must be a mapping"):
        read_result(path)


def test_report_shows_measured_and_compares_only_at_the_same_batch(toy_breakdown):
    result = ScanResult(
        workload={"name": "toy"},
        environment={"gpu": {"name": "cpu"}},
        settings={},
        precisions={"fp32": PrecisionResult("fp32", breakdown=toy_breakdown)},
    )
    predicted = Breakdown.from_dict({**toy_breakdown.to_dict(), "basis": "predicted"})
    text = breakdown_report(
        [result], [{"workload": "toy", "precision": "fp32", "memory": "H100", "breakdown": predicted}]
    )
    assert "optimizer state" in text and "within 3% or 0.5 GiB" in text and "sum rule" in text
    other = Breakdown.from_dict({**toy_breakdown.to_dict(), "batch": 9})
    assert "not compared" in breakdown_report([result], [{"workload": "toy", "precision": "fp32", "breakdown": other}])
    # another card's prediction beside this one's: compared with this one, the other left out without a line
    both = breakdown_report(
        [result],
        [
            {"workload": "toy", "precision": "fp32", "memory": "H100", "breakdown": predicted},
            {"workload": "toy", "precision": "fp32", "memory": "H200", "breakdown": other},
        ],
    )
    assert "vs predicted for H100" in both and "H200" not in both and "not compared" not in both
    rows = comparison_rows(toy_breakdown, predicted)
    assert all(r["within_goal"] for r in rows) and rows[-1]["category"] == "peak_reserved"
    assert within_goal(100 * GIB, 102 * GIB) and not within_goal(10 * GIB, 11 * GIB)


@pytest.mark.slow
def test_scan_cli_records_the_breakdown_at_b_and_report_shows_it(tmp_path):
    runner = CliRunner()
    out = tmp_path / "out"
    res = runner.invoke(
        main,
        [
            *toy_scan("8MiB"),
            "-p",
            "fp32",
            "--no-curve",
            "--no-throughput",
            "--breakdown",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    (path,) = out.glob("*.json")
    p = read_result(path).precisions["fp32"]
    assert p.breakdown is not None and p.breakdown.batch == p.max_batch > 0
    assert p.breakdown.categories["parameters"] == 603176 and check_sum(p.breakdown) == ""
    assert p.breakdown.per_sample_bytes and p.breakdown.per_sample_bytes > 0
    shown = runner.invoke(main, ["report", "--breakdown", str(out)])
    assert shown.exit_code == 0 and f"at batch {p.max_batch}" in shown.output and "what buys more batch" in shown.output


@pytest.mark.slow
def test_cpu_scans_leave_the_breakdown_off_by_default(tmp_path):
    res = CliRunner().invoke(
        main,
        [
            *toy_scan("8MiB"),
            "-p",
            "fp32",
            "--no-curve",
            "--no-throughput",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    (path,) = tmp_path.glob("*.json")
    assert read_result(path).precisions["fp32"].breakdown is None


def test_api_and_predict_cli_give_the_predicted_breakdown(tmp_path):
    import memprobe

    record = memprobe.breakdown("toy", "fp32", 8)
    assert record.basis == "predicted" and record.categories["parameters"] == 603176
    assert record.categories["optimizer_state"] == 1206384 and record.total == record.peak_reserved
    # at a card's capacity: the same where it fits with room; where the emulation does not fit, a note says so
    assert memprobe.breakdown("toy", "fp32", 8, memory="4GiB").peak_reserved == record.peak_reserved
    from memprobe.core.cards.overhead import default_overhead_table

    table = default_overhead_table()
    overhead = table.carried().overhead_bytes + table.run_overhead_bytes  # what a size gives up by default
    tight = memprobe.breakdown("toy", "fp32", 8, memory=f"{overhead + (1 << 20)}B")  # 1 MiB of capacity left
    assert "does not fit 1 MiB: peaks with no limit" in tight.note and tight.peak_reserved == record.peak_reserved
    with pytest.raises(ValueError, match="one card or size"):
        memprobe.breakdown("toy", "fp32", 8, memory="4GiB,8GiB")
    out = tmp_path / "p.json"
    res = CliRunner().invoke(
        main,
        [
            "predict",
            "--model",
            "toy",
            "--memory",
            "4GiB,8GiB",
            "-p",
            "fp32",
            "--breakdown",
            "--breakdown-out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "(predicted)" in res.output and out.exists()
    # each breakdown is announced as it starts (they take tens of seconds on the large models)
    assert "predicting where the memory goes: toy fp32 at batch" in res.output
    assert "(4GiB; 1 of 2)" in res.output and "(8GiB; 2 of 2)" in res.output
    (tmp_path / "junk.json").write_text("{}")
    junk = CliRunner().invoke(
        main, ["report", "--breakdown", str(tmp_path / "p.json"), "--predicted", str(tmp_path / "junk.json")]
    )
    assert junk.exit_code != 0 and "Error:" in junk.output


# --- charts: report --charts draws the breakdown where result files have one, and nothing where none do ---


def _scan(
    record: Breakdown | None,
    gpu: str = "NVIDIA H100 80GB HBM3",
    workload: str = "toy",
    precision: str = "fp32",
    fitted: bool = True,
    capacity: int | None = None,
    best: int | None = None,
) -> ScanResult:
    """A result with `record` as its breakdown at B (record.batch), a fitted memory line through its peak."""
    batch = record.batch if record is not None else 8
    model = {}
    if fitted and record is not None and record.per_sample_bytes:
        model = {
            "peak_reserved": {
                "static_bytes": record.peak_reserved - record.per_sample_bytes * batch,
                "per_sample_bytes": record.per_sample_bytes,
                "basis": "peak_reserved",
                "points": 3,
            }
        }
    p = PrecisionResult(
        precision,
        status="done",
        max_batch=batch,
        memory_model=model,
        capacity_bytes=capacity,
        best_batch=best,
        breakdown=record,
    )
    return ScanResult(
        workload={"name": workload}, environment={"gpu": {"name": gpu}}, settings={}, precisions={precision: p}
    )


def _gib_record(batch: int, activations: float, basis: str = "measured", unattributed: float = 0.5) -> Breakdown:
    """A GiB-scale record (as a GPU scan makes): `unattributed` GiB below the allocated peak, 2 GiB of slack."""
    tracked = {
        "parameters": int(1.3 * GIB),
        "gradients": int(1.3 * GIB),
        "optimizer_state": int(2.6 * GIB),
        "activations": int(activations * GIB),
        "temporaries": 3 * GIB,
    }
    allocated = sum(tracked.values()) + int(unattributed * GIB)
    return assemble(
        batch, basis, tracked, allocated, allocated + 2 * GIB, per_sample_bytes=int(activations * GIB / batch)
    )


def _pairs(*results: ScanResult) -> list:
    from pathlib import Path

    return [(Path(f"r{i}.json"), r) for i, r in enumerate(results)]


@pytest.mark.slow
def test_breakdown_charts_are_written_from_a_measured_breakdown_and_rerun_byte_identical(tmp_path, toy_breakdown):
    from memprobe.compare.breakdown_chart import write_breakdown_charts

    record = Breakdown.from_dict({**toy_breakdown.to_dict(), "per_sample_bytes": 40_000})
    pairs = _pairs(_scan(record, capacity=record.peak_reserved + 200_000, best=4))
    written = write_breakdown_charts(pairs, tmp_path / "a")
    assert sorted(p.name for p in written) == [
        "memory_breakdown.png",
        "memory_breakdown.svg",
        "memory_vs_batch.png",
        "memory_vs_batch.svg",
    ]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in written if p.suffix == ".png")
    bars = (tmp_path / "a" / "memory_breakdown.svg").read_text()
    assert "activations saved for backward" in bars and "optimizer state" in bars and "predicted" not in bars
    assert f"B={record.batch}" in bars and "allocator capacity" in bars
    lines = (tmp_path / "a" / "memory_vs_batch.svg").read_text()
    assert f"B={record.batch}" in lines and "b*=4" in lines and "static part" in lines
    again = write_breakdown_charts(pairs, tmp_path / "b")
    assert [p.read_bytes() for p in written] == [p.read_bytes() for p in again]

    same = {
        "workload": "toy",
        "precision": "fp32",
        "breakdown": Breakdown.from_dict({**record.to_dict(), "basis": "predicted"}),
    }
    other = {**same, "breakdown": Breakdown.from_dict({**record.to_dict(), "batch": record.batch + 1})}
    write_breakdown_charts(pairs, tmp_path / "c", [other])
    assert "predicted (emulated" not in (tmp_path / "c" / "memory_breakdown.svg").read_text()  # another batch
    write_breakdown_charts(pairs, tmp_path / "c", [same])
    assert "predicted (emulated, same batch)" in (tmp_path / "c" / "memory_breakdown.svg").read_text()


def test_no_breakdown_no_breakdown_charts_and_no_line_without_a_per_sample_cost(tmp_path):
    from memprobe.compare.breakdown_chart import entries, per_sample_line, write_breakdown_charts

    assert write_breakdown_charts(_pairs(_scan(None)), tmp_path) == [] and not list(tmp_path.iterdir())
    record = _gib_record(10, 60.0)
    (entry,) = entries(_pairs(_scan(record, fitted=False)))
    static, slope, source = per_sample_line(entry)  # no fitted model: the line through the breakdown's peak
    assert slope == record.per_sample_bytes and static == record.peak_reserved - 10 * slope and "breakdown" in source
    bare = Breakdown.from_dict({**record.to_dict(), "per_sample_bytes": None})
    written = write_breakdown_charts(_pairs(_scan(bare, fitted=False)), tmp_path)
    assert [p.stem for p in written] == ["memory_breakdown"] * 2  # no per-sample cost: no memory-against-batch chart


def test_breakdown_charts_fit_the_screen_and_draw_a_negative_rest_below_zero():
    from fakes import clipped, pixels
    from memprobe.compare.breakdown_chart import bars_figure, entries, lines_figure
    from memprobe.compare.chart_layout import MAX_HEIGHT_PX, MAX_WIDTH_PX

    results = [
        _scan(
            _gib_record(b, 60.0, unattributed=-0.4 if w == "llama-1b" else 0.5),
            gpu=gpu,
            workload=w,
            precision=p,
            capacity=79 * GIB,
            best=b // 2,
        )
        for gpu in ("NVIDIA H100 80GB HBM3", "NVIDIA H200")
        for w in ("bert-large-squad", "llama-1b", "resnet50")
        for p, b in (("fp32", 40), ("bf16", 90))
    ]
    predicted = [{"workload": "resnet50", "precision": "bf16", "breakdown": _gib_record(90, 61.0, "predicted")}]
    found = entries(_pairs(*results), predicted)
    assert [(e.workload, e.precision) for e in found if e.gpu == "H200"][:3] == [
        ("bert-large-squad", "fp32"),
        ("bert-large-squad", "bf16"),
        ("llama-1b", "fp32"),
    ]
    assert sum(e.predicted is not None for e in found) == 2  # resnet50 bf16 at batch 90, on both cards
    for fig in (bars_figure(found), lines_figure(found)):
        width, height = pixels(fig)
        assert width <= MAX_WIDTH_PX and height <= MAX_HEIGHT_PX * 1.6
        assert clipped(fig) == []
    bars = bars_figure(found)
    assert all(ax.get_ylim()[0] < 0 for ax in bars.axes)  # llama-1b's negative unattributed, on both cards


@pytest.mark.slow
def test_report_charts_draw_the_breakdown_only_for_files_that_have_one(tmp_path):
    from memprobe.core.records.breakdown import write_predicted

    runner = CliRunner()
    with_it = write_result(_scan(_gib_record(10, 60.0), capacity=79 * GIB, best=5), tmp_path / "with.json")
    without = write_result(_scan(None), tmp_path / "without.json")
    res = runner.invoke(main, ["report", str(without), "--charts", str(tmp_path / "none")])
    assert res.exit_code == 0, res.output
    assert not list((tmp_path / "none").glob("memory_*"))
    predicted = write_predicted(
        tmp_path / "p.json",
        [
            {
                "workload": "toy",
                "precision": "fp32",
                "memory": "H100 SXM",
                "breakdown": _gib_record(10, 61.0, "predicted"),
            }
        ],
    )
    res = runner.invoke(
        main, ["report", str(with_it), "--charts", str(tmp_path / "all"), "--predicted", str(predicted)]
    )
    assert res.exit_code == 0, res.output
    assert "predicted (emulated" in (tmp_path / "all" / "memory_breakdown.svg").read_text()
    assert (tmp_path / "all" / "memory_vs_batch.png").exists()
    res = runner.invoke(main, ["report", "--breakdown", str(with_it), "--charts", str(tmp_path / "bd")])
    assert res.exit_code == 0 and "what buys more batch" in res.output
    assert sorted(p.name for p in (tmp_path / "bd").iterdir()) == [
        "memory_breakdown.png",
        "memory_breakdown.svg",
        "memory_vs_batch.png",
        "memory_vs_batch.svg",
    ]
    refused = runner.invoke(main, ["report", str(with_it), "--predicted", str(predicted)])
    assert refused.exit_code == 2 and "--predicted has no effect without --breakdown or --charts" in refused.output
    refused = runner.invoke(main, ["report", "--breakdown", str(with_it), "--reference", "H100 SXM"])
    assert refused.exit_code == 2 and "--reference has no effect with --breakdown" in refused.output
