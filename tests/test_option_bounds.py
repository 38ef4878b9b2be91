"""Every numeric option's bounds are declared once (core/workload/option_bounds.py): the command and the API refuse the same
out-of-range value with the same message, the one its Bound gives, and take a value at the edge of its range.

Each case runs the command through CliRunner and the API call (or, for an option the API functions do not take,
the request they build) with the same value; nothing is scanned, predicted or planned (recorders stand in).
"""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

import memprobe.api as api
from memprobe.cli import main
from memprobe.core.workload import option_bounds as bounds
from memprobe.request import ModelRequest, PredictRequest, RequestError, predict_job

CPU = ["--device", "cpu", "--cpu-memory-budget", "64MiB"]
CPU_API = {"device": "cpu", "cpu_memory_budget": "64MiB", "precision": "fp32"}
BIG = bounds.MAX_BATCH + 1


def _scan(**kwargs):
    return lambda: api.find_max_batch("toy", **CPU_API, **kwargs)


def _predict(**kwargs):
    return lambda: api.predict_max_batch("toy", "8GiB", "fp32", **kwargs)


def _predict_request(**kwargs):
    """An option predict_max_batch does not take: the PredictRequest it builds, given the option."""
    model = {k: kwargs.pop(k) for k in ("frontier_budget", "search") if k in kwargs}
    return lambda: predict_job(PredictRequest(ModelRequest(["toy"], **model), ["fp32"], memory="8GiB", **kwargs))


def _plan(**kwargs):
    return lambda: api.plan("toy", "H100", **kwargs)


SCAN = ["scan", "-m", "toy", "-p", "fp32", *CPU]
PREDICT = ["predict", "-m", "toy", "--memory", "8GiB", "-p", "fp32"]
PLAN = ["plan", "-m", "toy", "--gpu", "H100"]

# (bound, value as typed, value as the API takes it, command line before the option, the API call)
CASES = [
    (bounds.SCAN_STEPS, "2", 2, SCAN, _scan(steps=2)),
    (bounds.SCAN_STEPS, "101", 101, SCAN, _scan(steps=101)),
    (bounds.WARMUP, "-1", -1, SCAN, _scan(warmup=-1)),
    (bounds.WARMUP, "1001", 1001, SCAN, _scan(warmup=1001)),
    (bounds.TIMED_STEPS, "0", 0, SCAN, _scan(timed_steps=0)),
    (bounds.TIMED_STEPS, "10001", 10001, SCAN, _scan(timed_steps=10001)),
    (bounds.MAX_BATCH_OPTION, "0", 0, SCAN, _scan(max_batch=0)),
    (bounds.MAX_BATCH_OPTION, str(BIG), BIG, SCAN, _scan(max_batch=BIG)),
    (bounds.MAX_TRIALS_OPTION, "1", 1, SCAN, _scan(max_trials=1)),
    (bounds.MAX_TRIALS_OPTION, "1001", 1001, SCAN, _scan(max_trials=1001)),
    (bounds.SOAK, "-1", -1, SCAN, _scan(soak=-1)),
    (bounds.SOAK, "100001", 100001, SCAN, _scan(soak=100001)),
    (bounds.REPEAT_OPTION, "0", 0, SCAN, _scan(repeat=0)),
    (bounds.REPEAT_OPTION, "11", 11, SCAN, _scan(repeat=11)),
    (bounds.SCAN_BATCH, "0", 0, SCAN, _scan(batches=[0])),
    (bounds.SCAN_BATCH, str(BIG), BIG, SCAN, _scan(batches=[BIG])),
    (bounds.CURVE_BATCH, "0", 0, SCAN, _scan(curve_batches=[0])),
    (bounds.CURVE_BATCH, str(BIG), BIG, SCAN, _scan(curve_batches=[BIG])),
    (bounds.CURVE_BUDGET, "0", 0.0, SCAN, _scan(curve_budget=0.0)),
    (bounds.CURVE_BUDGET, "nan", math.nan, SCAN, _scan(curve_budget=math.nan)),
    (bounds.FRONTIER_BUDGET, "-5", -5.0, SCAN, _scan(frontier_budget=-5.0)),
    (bounds.SEQ_LEN, "1", 1, SCAN, _scan(seq_len=1)),
    (bounds.SEQ_LEN, str(bounds.MAX_SEQ_LEN + 1), bounds.MAX_SEQ_LEN + 1, SCAN, _scan(seq_len=bounds.MAX_SEQ_LEN + 1)),
    (bounds.SCAN_GPUS, "0", 0, SCAN, _scan(gpus=[0])),
    (bounds.PREDICT_GPUS, "0", 0, PREDICT, _predict(gpus=0)),
    (bounds.PREDICT_GPUS, "1025", 1025, PREDICT, _predict(gpus=1025)),
    (bounds.PREDICT_STEPS, "0", 0, PREDICT, _predict(steps=0)),
    (bounds.PREDICT_STEPS, "11", 11, PREDICT, _predict(steps=11)),
    (bounds.SEQ_LEN, "1", 1, PREDICT, _predict(seq_len=1)),
    (bounds.SEQ_BATCH, "0", 0, PREDICT, _predict_request(batch=0)),
    (bounds.SEQ_BATCH, "65537", 65537, PREDICT, _predict_request(batch=65537)),
    (bounds.FRONTIER_BUDGET, "0", 0.0, PREDICT, _predict_request(frontier_budget=0.0)),
    (bounds.GLOBAL_BATCH, "0", 0, PLAN, _plan(global_batch=0)),
    (bounds.GLOBAL_BATCH, str(2**24 + 1), 2**24 + 1, PLAN, _plan(global_batch=2**24 + 1)),
    (bounds.SEQ_LEN, "1", 1, PLAN, _plan(seq_len=1)),
    (bounds.PLAN_GPUS, "0", 0, PLAN, _plan(gpus=0)),
    (bounds.PLAN_GPUS, "4097", 4097, PLAN, _plan(gpus=4097)),
]


def _id(case) -> str:
    bound, typed, _value, args, _call = case
    return f"{args[0]} {bound.option} {typed}"


@pytest.mark.parametrize("bound, typed, value, args, call", CASES, ids=[_id(c) for c in CASES])
def test_an_out_of_range_value_is_the_same_error_from_the_command_and_the_api(
    bound, typed, value, args, call, scan_options_seen
):
    result = CliRunner().invoke(main, [*args, bound.option, typed])
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    with pytest.raises(RequestError) as raised:
        call()
    message = bound.problem(value)
    assert message and (raised.value.message, raised.value.option) == (message, bound.option)
    assert result.exit_code == 2 and len(errors) == 1, result.output
    assert errors[0].startswith("Error: Invalid value for ") and bound.option in errors[0], errors[0]
    assert errors[0].endswith(f": {message}"), (errors[0], message)
    assert str(raised.value) == f"{bound.option}: {message}"
    assert not scan_options_seen  # refused before anything ran


def test_the_messages_name_the_bound_and_the_value():
    """What the table says, in the project's words: the bound that was crossed, why where the table says, the value."""
    assert bounds.SCAN_STEPS.problem(2) == "must be at least 3, got 2"
    assert bounds.PREDICT_GPUS.problem(2000) == "must be at most 1,024, got 2,000"
    assert bounds.SCAN_BATCH.problem(0) == "batch sizes must be at least 1, got 0"
    assert bounds.CURVE_BUDGET.problem(0.0) == "must be larger than 0, got 0"
    assert bounds.GLOBAL_BATCH.problem(2**25) == (
        "must be at most 16,777,216 (2^24 samples per optimizer step), got 33,554,432"
    )
    assert bounds.GUIDE_BUDGET.problem(math.inf) == "expected a price in USD, got inf"
    # the API can pass what a command line cannot: a bool, a float for a whole number, None where it is required
    assert bounds.SCAN_STEPS.problem(True) == "expected a whole number, got True"
    assert bounds.SCAN_STEPS.problem(3.5) == "expected a whole number, got 3.5"
    assert bounds.SCAN_STEPS.problem(None) == "expected a whole number, got None"
    assert bounds.SEQ_LEN.problem(None) is None  # may be left out
    assert bounds.SCAN_STEPS.problem(100) is None and bounds.SCAN_STEPS.problem(3) is None


@pytest.mark.parametrize("typed", ["-1", "inf", "nan"])
def test_guides_budget_says_what_its_bound_says(typed):
    """guide has no API; its --budget reads the same table, in the same words."""
    result = CliRunner().invoke(main, ["guide", "--budget", typed])
    assert result.exit_code == 2
    assert result.output.splitlines()[-1].endswith(f": {bounds.GUIDE_BUDGET.problem(float(typed))}"), result.output


def test_the_range_in_help_is_the_bound_of_the_table():
    """The click types are made from the Bounds, so --help shows the same range the error refuses by."""
    shown = CliRunner().invoke(main, ["scan", "--help"], terminal_width=200).output
    assert f"3<=x<={bounds.MAX_SCAN_STEPS}" in shown and f"2<=x<={bounds.MAX_TRIALS}" in shown
    shown = CliRunner().invoke(main, ["plan", "--help"], terminal_width=200).output
    assert f"1<=x<={bounds.MAX_GLOBAL_BATCH}" in shown and f"1<=x<={bounds.MAX_PLAN_GPUS}" in shown


# --- values at the edges of their ranges are taken, the same by both ----------------------------------------------


def test_scan_and_find_max_batch_take_the_edges_of_every_range(scans_seen, tmp_path):
    edges = ["--steps", "100", "--warmup", "1000", "--timed-steps", "10000", "--max-batch", str(bounds.MAX_BATCH)]
    edges += ["--max-trials", "2", "--soak", "100000", "--curve-budget", "0.5", "--batch", f"1,{bounds.MAX_BATCH}"]
    edges += ["--curve", f"1,{bounds.MAX_BATCH}", "--repeat", "10"]
    result = CliRunner().invoke(main, [*SCAN, *edges, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    api.find_max_batch(
        "toy",
        **CPU_API,
        steps=100,
        warmup=1000,
        timed_steps=10000,
        max_batch=bounds.MAX_BATCH,
        max_trials=2,
        soak=100000,
        curve_budget=0.5,
        batches=[1, bounds.MAX_BATCH],
        curve_batches=[1, bounds.MAX_BATCH],
        repeat=10,
    )
    assert len(scans_seen) == 2 and scans_seen[0] == scans_seen[1]
    settings = scans_seen[0][1]
    assert (settings["steps"], settings["soak"], settings["max_trials"], settings["repeat"]) == (100, 100000, 2, 10)


def test_find_max_batch_refuses_the_gpus_it_would_not_use(scans_seen):
    """find_max_batch scans the one GPU `device` names: `gpus` and `parallel` (scan's options) were taken and never
    used; now they are refused, and one GPU is still a scan."""
    for given in ({"gpus": [2]}, {"gpus": "all"}, {"gpus": 4}, {"parallel": True}):
        with pytest.raises(RequestError, match="the API scans one GPU"):
            api.find_max_batch("toy", **CPU_API, **given)
    api.find_max_batch("toy", **CPU_API, gpus=[1])
    assert len(scans_seen) == 1


def test_predict_and_predict_max_batch_take_the_edges_of_every_range(monkeypatch):
    pytest.importorskip("torch")
    import memprobe.predict.summary as summary
    from memprobe.predict.trace import PredictError

    asked = []

    def recorded(workload, precisions, sizes, *args, steps, world=None, **kwargs):
        asked.append((workload.name, steps, world.label if world else None))
        raise PredictError("recorded")

    monkeypatch.setattr(summary, "predict", recorded)
    result = CliRunner().invoke(main, [*PREDICT, "--gpus", "1024", "--steps", "10"])
    assert (result.exit_code, result.output.splitlines()[-1]) == (1, "Error: recorded"), result.output
    with pytest.raises(PredictError):
        api.predict_max_batch("toy", "8GiB", "fp32", gpus=1024, steps=10)
    assert len(asked) == 2 and asked[0] == asked[1] and asked[0][1] == 10


def test_plan_and_the_plan_api_take_the_edges_of_every_range(monkeypatch):
    import memprobe.planning.build as build
    from memprobe.core.estimates.plan import PlanError

    asked = []

    def recorded(workload, card, global_batch, precisions, seq_len, lora, *args, gpus=1, strategy="ddp", **kwargs):
        asked.append((workload.name, card, global_batch, seq_len, lora, gpus, strategy))
        raise PlanError("recorded")

    monkeypatch.setattr(build, "build_plan", recorded)
    edges = ["--global-batch", str(2**24), "--gpus", "4096", "--seq-len", str(bounds.MAX_SEQ_LEN), "--lora", "r=1"]
    result = CliRunner().invoke(main, ["plan", "-m", "toy-llama", "--gpu", "H100", "-p", "bf16", *edges])
    assert (result.exit_code, result.output.splitlines()[-1]) == (1, "Error: recorded"), result.output
    with pytest.raises(PlanError):
        api.plan("toy-llama", "H100", 2**24, seq_len=bounds.MAX_SEQ_LEN, precision="bf16", lora=1, gpus=4096)
    assert len(asked) == 2 and asked[0] == asked[1], asked
    assert asked[0][2:6] == (2**24, bounds.MAX_SEQ_LEN, 1, 4096)


@pytest.mark.parametrize(
    "lora, says", [("0", "got '0'"), ("big", "got 'big'"), ("-3", "got '-3'")], ids=["zero", "garbage", "negative"]
)
def test_a_bad_lora_rank_is_the_same_error_from_plan_and_the_plan_api(lora, says):
    """plan read --lora with its own words (`Invalid value for --lora: --lora expects ...`); now as scan and predict."""
    result = CliRunner().invoke(main, ["plan", "-m", "toy-llama", "--gpu", "H100", "--lora", lora])
    with pytest.raises(RequestError) as raised:
        api.plan("toy-llama", "H100", lora=int(lora) if lora.lstrip("-").isdigit() else lora)
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == f"Error: {raised.value}" and says in str(raised.value), result.output


def test_breakdown_takes_predicts_steps_and_a_batch_of_at_least_one():
    """api.breakdown (no command of its own) reads its numbers from the same table as predict's --steps."""
    with pytest.raises(RequestError, match="batch: must be at least 1, got 0"):
        api.breakdown("toy", batch=0)
    with pytest.raises(RequestError, match="--steps: must be at most 10, got 11"):
        api.breakdown("toy", steps=11)
    with pytest.raises(RequestError, match="--steps: a training trial is 1 warm-up step"):
        api.breakdown("toy", steps=2)


def test_an_input_size_given_as_a_sequence_is_bounded_as_the_command_bounds_it():
    """find_max_batch(input_size=(3, 99999, 99999)) went to the model unchecked; `--input-size 3,99999,99999` is
    refused. Both now read it one way."""
    result = CliRunner().invoke(main, [*SCAN, "--input-size", "3,99999,99999"])
    with pytest.raises(RequestError) as raised:
        api.resolve_model("toy", input_size=(3, 99999, 99999))
    assert result.exit_code == 2 and "C,H,W must be at most" in raised.value.message
    assert result.output.splitlines()[-1].endswith(raised.value.message), result.output
