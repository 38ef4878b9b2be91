"""The plan: its arithmetic against fixed inputs, the H200 resnet50 fp16 curve (never past the knee), and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from memprobe.cli import main
from memprobe.core.estimates.plan import (
    MEASURED,
    PREDICTED,
    Capacity,
    Levers,
    PlanError,
    accumulate,
    make_plan,
    micro_cap,
    plan_row,
)
from memprobe.core.workload.registry import load_registry
from memprobe.planning.build import build_plan
from memprobe.planning.levers import settings

DATA = Path(__file__).parent / "data"
H200_RESNET = DATA / "nvidia-h200_resnet50_train_20261124-001712.json"  # frozen copy: reports/ is tidied


def cap(**kw) -> Capacity:
    base = dict(levers=Levers("fp16"), workload="w", source=MEASURED, max_batch=100, capacity_bytes=1000)
    return Capacity(**{**base, **kw})


@pytest.mark.parametrize(
    "n, cap_, gpus, expected",
    [
        (8192, 2644, 1, (4, 2048, 8192)),  # even split reaches N exactly
        (8192, 1534, 1, (8, 1024, 8192)),  # the largest micro-batch that splits N: 1024 x 8, not 1366 x 6 = 8196
        (10, 64, 1, (1, 10, 10)),  # N below the cap: one step of N
        (64, 64, 1, (1, 64, 64)),
        (65, 64, 1, (5, 13, 65)),  # 13 x 5, not 33 x 2 = 66
        (1, 1, 1, (1, 1, 1)),
        (1024, 208, 2, (4, 128, 1024)),  # issue 51: not 171 x 2 x 3 = 1026
        (1025, 208, 2, (3, 171, 1026)),  # an odd N over 2 GPUs has no exact split: the fewest steps, said so
        (1021, 208, 1, (1021, 1, 1021)),  # a prime: exact only at micro-batch 1 (the row names the alternative)
    ],
)
def test_accumulation_steps(n, cap_, gpus, expected):
    steps, micro, effective = accumulate(n, cap_, gpus)
    assert (steps, micro, effective) == expected and micro <= cap_ and effective == steps * micro * gpus


def test_a_split_that_is_not_exact_or_costs_many_steps_says_so_in_the_row():
    row = plan_row(cap(max_batch=208), 1025, gpus=2)
    assert (row.micro_batch, row.accumulation_steps, row.global_batch) == (171, 3, 1026)
    assert "no micro-batch up to the cap 208 splits 1025 over 2 GPUs exactly" in row.note
    assert "the effective global batch is 1026 = 2 GPUs x 171 x 3 steps" in row.note
    row = plan_row(cap(max_batch=208), 1021)
    assert "1021 splits exactly only as 1 x 1021 steps; --global-batch 1025 would run 205 x 5 steps" in row.note
    assert "split" not in plan_row(cap(max_batch=208), 1024, gpus=2).note


@pytest.mark.parametrize("n", [0, -3])
def test_global_batch_below_one_is_refused(n):
    with pytest.raises(PlanError, match="at least 1"):
        accumulate(n, 10)


def test_cap_is_b_star_or_the_knee_whichever_is_smaller():
    assert micro_cap(cap(best_batch=60, knee_batch=80))[0] == 60
    assert micro_cap(cap(best_batch=90, knee_batch=70))[0] == 70  # b* past the knee: the knee
    assert micro_cap(cap(best_batch=None))[0] == 100  # no curve: B
    assert micro_cap(cap(source=PREDICTED, best_batch=None))[0] == 100


def test_a_predicted_row_recommends_the_safe_batch_and_says_so():
    got, why = micro_cap(cap(source=PREDICTED, safe_batch=97, safe_how="1% of the usable memory left"))
    assert got == 97 and "safe batch (predicted, 1% of the usable memory left; B 100 predicted" in why
    # a measured row has its own proof: no margin taken off it
    assert micro_cap(cap(safe_batch=97))[0] == 100
    row = plan_row(cap(source=PREDICTED, safe_batch=97, peaks={97: 900}), None)
    assert (row.max_micro_batch, row.micro_batch, row.headroom_bytes) == (100, 97, 100)


def test_throughput_only_where_timed_at_that_micro_batch():
    row = plan_row(cap(best_batch=50, timed={50: 500.0}), 100)
    assert (row.micro_batch, row.accumulation_steps, row.samples_per_s) == (50, 2, 500.0)
    assert row.seconds_per_global_batch == pytest.approx(0.2)
    row = plan_row(cap(best_batch=50, timed={40: 500.0}), 100)
    assert row.samples_per_s is None and row.seconds_per_global_batch is None
    assert "not measured" in row.note
    predicted = plan_row(cap(source=PREDICTED, timed={100: 1.0}), 100)
    assert predicted.samples_per_s is None  # a predicted row never carries a speed


def test_headroom_from_the_peak_at_that_batch_or_the_fitted_line():
    row = plan_row(cap(best_batch=50, peaks={50: 700}), 50)
    assert (row.headroom_bytes, row.headroom_how) == (300, "measured peak")
    row = plan_row(cap(best_batch=50, static_bytes=100.0, per_sample_bytes=10.0), 50)
    assert (row.headroom_bytes, row.headroom_how) == (400, "fitted line of measured peaks")
    assert plan_row(cap(best_batch=50), 50).headroom_bytes is None
    # a peak with no capacity limit past the capacity at a batch that fits: no room, said so, not a negative one
    row = plan_row(cap(source=PREDICTED, peaks={100: 1200}), None)
    assert row.headroom_bytes == 0 and "frees cached blocks" in row.headroom_how
    assert plan_row(cap(source=PREDICTED, max_batch=90, peaks={100: 1200}), None).micro_batch == 90


def test_a_huge_global_batch_is_split_in_integers():
    n = 10**29
    assert accumulate(n, 108) == (10**27, 100, n)
    steps, micro, effective = accumulate(n + 1, 108, gpus=2)  # odd: no exact split over 2 GPUs
    assert (steps, micro) == (-(-(n + 1) // 216), -(-(n + 1) // (steps * 2))) and effective == steps * micro * 2 > n


def test_rows_sorted_by_time_per_global_batch_unknown_last():
    slow = cap(levers=Levers("fp32"), best_batch=50, timed={50: 100.0})
    fast = cap(levers=Levers("fp16"), best_batch=50, timed={50: 1000.0})
    unknown = cap(levers=Levers("bf16"), source=PREDICTED)
    plan = make_plan("w", "card", [unknown, slow, fast], 100)
    assert [r.setting for r in plan.rows] == ["fp16", "fp32", "bf16"]
    assert [r.source for r in plan.rows] == [MEASURED, MEASURED, PREDICTED]


def test_nothing_fits_row():
    row = plan_row(cap(max_batch=0), 64)
    assert row.micro_batch == 0 and row.accumulation_steps is None and "batch 1" in row.note


def test_lever_settings_for_an_llm_and_a_vision_model():
    registry = load_registry()
    llama = settings(registry["llama-1b"], ["fp32", "bf16"], lora=16)
    labels = [s.levers.label() for s in llama]
    assert labels == ["fp32", "fp32 +ckpt", "bf16", "bf16 +lora16", "bf16 +ckpt", "bf16 +ckpt +lora16"]
    assert [s.workload.name for s in llama][-1] == "llama-1b+ckpt+lora16"
    assert [s.levers.label() for s in settings(registry["resnet50"], ["fp16"])] == ["fp16"]
    with pytest.raises(PlanError, match="LLM"):
        settings(registry["resnet50"], ["fp16"], lora=8)
    with pytest.raises(PlanError, match="registry optimizer"):
        settings(registry["resnet50"], ["fp16"], optimizers=["adam"])


def test_h200_resnet50_fp16_plan_at_8192_stays_below_the_knee():
    data = json.loads(H200_RESNET.read_text())["precisions"]["fp16"]
    plan = build_plan(load_registry()["resnet50"], "H200", 8192, ["fp16"], results=[H200_RESNET])
    (row,) = plan.rows
    assert row.source == MEASURED and row.max_micro_batch == data["max_batch"]
    assert row.micro_batch <= data["knee_batch"] < data["knee_after_batch"]
    assert row.micro_batch <= data["best_batch"]
    assert row.accumulation_steps * row.micro_batch == row.global_batch >= 8192
    assert row.samples_per_s is not None  # the even split lands on a timed curve point (2048)
    assert row.seconds_per_global_batch == pytest.approx(row.accumulation_steps * row.micro_batch / row.samples_per_s)


def test_result_of_another_card_is_not_measured_for_this_one():
    from memprobe.core.cards.catalog import default_catalog
    from memprobe.core.records.results import read_result
    from memprobe.planning.measured import on_card

    result, catalog = read_result(H200_RESNET), default_catalog()
    assert on_card(result, catalog.find("NVIDIA H200"), catalog)
    assert not on_card(result, catalog.find("NVIDIA H100 80GB HBM3"), catalog)


def _run(args):
    return CliRunner().invoke(main, ["plan", *args])


def test_cli_table_json_and_csv_from_a_measured_file():
    args = [
        "--model",
        "resnet50",
        "--gpu",
        "H200",
        "--global-batch",
        "8192",
        "-p",
        "fp16",
        "--results",
        str(H200_RESNET),
    ]
    table = _run(args)
    assert table.exit_code == 0, table.output
    assert "measured" in table.output and "2048" in table.output and "knee 2644" in table.output
    as_json = json.loads(_run(args + ["--format", "json"]).output)
    assert as_json["rows"][0]["micro_batch"] == 2048 and as_json["rows"][0]["accumulation_steps"] == 4
    csv_text = _run(args + ["--format", "csv"]).output
    assert csv_text.splitlines()[0].startswith("setting,workload,source")


def test_cli_predicts_without_results_and_says_so():
    out = _run(["--model", "toy", "--gpu", "H100", "-p", "fp32", "--global-batch", "1000"])
    assert out.exit_code == 0, out.output
    assert "predicted" in out.output and "not measured" in out.output
    assert "no result files given" in out.output


def test_the_api_plan_stays_callable_after_its_first_call():
    # The plan's package was once named memprobe.plan: its first import replaced the API function memprobe.plan
    # with the module, and a second call raised "'module' object is not callable".
    import memprobe

    rows = [memprobe.plan("resnet50", "H200", 8192, precision="fp16", results=[H200_RESNET]).rows for _ in range(2)]
    assert rows[0] == rows[1] and rows[0][0].source == MEASURED
