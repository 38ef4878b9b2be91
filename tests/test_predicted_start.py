"""The search's predicted start on the CPU: the hint_worker child, PredictedStart, and a scan that uses it."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from fakes import toy_scan
from memprobe.cli import main  # noqa: E402
from memprobe.core.workload.registry import Workload, load_registry  # noqa: E402
from memprobe.probe.hint import PredictedStart, Prediction  # noqa: E402
from memprobe.probe.options import ScanOptions  # noqa: E402

GiB = 1 << 30


def test_the_child_predicts_each_precision_at_the_capacity_asked():
    toy = load_registry()["toy"]
    with PredictedStart(toy, ["fp32", "bf16"]) as start:
        small, large = start.ask("fp32", 48 << 20).poll(60), start.ask("fp32", 96 << 20).poll(60)
        assert 0 < small["max_batch"] < large["max_batch"], (small, large)
        assert start.ask("bf16", GiB).poll(60)["max_batch"] > 0
        assert "not among the precisions traced" in start.ask("fp16", GiB).poll(60)["error"]
        assert "no allocator capacity" in start.ask("fp32", None).poll()["error"]
        child = start.child
    assert not child.alive() and child.closed  # killed on exit


def test_answers_are_never_taken_for_another_request():
    toy = load_registry()["toy"]
    with PredictedStart(toy, ["fp32", "bf16"]) as start:
        # bf16 asked first; the child traces fp32 first and answers fp32's request before bf16's
        bf16, fp32, fp32_large = start.ask("bf16", 48 << 20), start.ask("fp32", 48 << 20), start.ask("fp32", 96 << 20)
        assert fp32_large.poll(60)["precision"] == "fp32"
        assert bf16.poll(60)["precision"] == "bf16"
        began = time.monotonic()
        assert fp32.poll(60)["precision"] == "fp32"  # read with fp32_large's answer: taken without waiting
        assert time.monotonic() - began < 1.0
        assert fp32.poll()["max_batch"] < fp32_large.poll()["max_batch"]


def test_a_model_that_cannot_be_traced_gives_an_error_not_a_hang():
    broken = Workload("broken", "no-such-family", "", "samples")
    with PredictedStart(broken, ["fp32"]) as start:
        answer = start.ask("fp32", GiB).poll(60)
    assert "error" in answer and "max_batch" not in answer


def test_polling_a_prediction_that_has_not_come_returns_at_once_and_leaves_the_child_working():
    bert = load_registry()["toy-bert-squad"]
    with PredictedStart(bert, ["fp32"]) as start:
        prediction = start.ask("fp32", GiB)
        began = time.monotonic()
        polls = [prediction.poll() for _ in range(100)]
        assert time.monotonic() - began < 1.0 and polls == [None] * 100  # the child is still importing torch
        assert start.child.alive()
        assert prediction.poll(120)["max_batch"] > 0  # it comes later, to a search that went on meanwhile


def test_the_default_is_on_for_cuda_without_compile():
    assert ScanOptions(["fp32"]).uses_predicted_start
    assert ScanOptions(["fp32"], mode="infer").uses_predicted_start
    assert not ScanOptions(["fp32"], device="cpu").uses_predicted_start
    assert not ScanOptions(["fp32"], compile=True).uses_predicted_start
    assert ScanOptions(["fp32"], device="cpu", predicted_start=True).uses_predicted_start


@pytest.mark.slow
def test_a_scan_that_starts_from_the_prediction_finds_the_same_proven_edge(tmp_path):
    found = {}
    for flag in ("--predicted-start", "--no-predicted-start"):
        out = tmp_path / flag
        result = CliRunner().invoke(
            main,
            [
                *toy_scan("48MiB"),
                "-p",
                "fp32",
                "--no-throughput",
                flag,
                "--out",
                str(out),
            ],
        )
        assert result.exit_code == 0, result.output
        (path,) = out.glob("*.json")
        found[flag] = json.loads(path.read_text())["precisions"]["fp32"]
    hinted, plain = found["--predicted-start"], found["--no-predicted-start"]
    assert hinted["max_batch"] == plain["max_batch"] > 0 and hinted["proof"]["verified"]
    assert "predicted_start" not in plain["settings"]
    # whether the prediction came in time depends on this machine's load: the record says which, and what it did
    record = hinted["settings"]["predicted_start"]
    batches = [a["batch"] for a in hinted["attempts"]]
    if record.get("used"):
        assert batches[record["after_trials"]] == record["max_batch"] > 2
    else:
        assert record["why"] and (record.get("max_batch") is None or record["arrived_s"] is not None)


def test_the_child_predicts_per_gpu_for_a_data_parallel_world():
    toy = load_registry()["toy"]
    with PredictedStart(toy, ["bf16"], world=(2, "fsdp")) as start:
        sharded = start.ask("bf16", 48 << 20).poll(60)
    with PredictedStart(toy, ["bf16"], world=(2, "zero3")) as start:
        refused = start.ask("bf16", 48 << 20).poll(60)
    assert sharded["max_batch"] > 0, sharded
    assert "unknown strategy 'zero3'" in refused["error"]


def test_a_distributed_scan_starts_from_the_predicted_per_gpu_edge_and_still_proves_it(tmp_path, monkeypatch):
    from conftest import RecordingProgress
    from fakes import TOY, FakeGroup, fake_group_opts
    from memprobe.probe.distributed.scan import scan_distributed

    asked = []

    def ask(self, precision, capacity_bytes):
        asked.append((self.world, precision, capacity_bytes))
        return Prediction(self, 0, {"precision": precision, "max_batch": 985})

    monkeypatch.setattr(PredictedStart, "ask", ask)
    group = FakeGroup()
    result, _path = scan_distributed(
        TOY, fake_group_opts(predicted_start=True), 2, "ddp", tmp_path, RecordingProgress(), group
    )
    p = result.precisions["fp32"]
    assert asked == [((2, "ddp"), "fp32", FakeGroup.CAPACITY)]
    assert [r.batches for r in group.requests[:3]] == [[1, 2], [985], [986]]  # then the walk to 990
    assert p.max_batch == 990 and p.proof.verified and p.settings.predicted_start["max_batch"] == 985


def test_an_inference_scan_gets_a_prediction_of_forward_passes():
    toy = load_registry()["toy"]
    # 256 MiB, not less: the first GEMM's 32 MiB cuBLAS workspace is held in inference too
    with PredictedStart(toy, ["bf16"], steps=2, mode="infer") as start:
        infer = start.ask("bf16", 256 << 20).poll(60)
    with PredictedStart(toy, ["bf16"]) as start:
        train = start.ask("bf16", 256 << 20).poll(60)
    assert infer["max_batch"] > train["max_batch"] > 0  # no gradients, activations freed as the forward goes


def test_a_child_that_dies_is_reported_at_once():
    toy = load_registry()["toy"]
    with PredictedStart(toy, ["fp32"]) as start:
        prediction = start.ask("fp32", GiB)
        start.child.kill()
        began = time.monotonic()
        answer = prediction.poll(60)
        assert time.monotonic() - began < 5
        assert answer["error"] == "the prediction process ended without answering"
        assert start.ask("fp32", GiB).poll()["error"] == "the prediction process ended without answering"


def test_a_child_that_ends_mid_answer_is_reported_as_ended(monkeypatch):
    toy = load_registry()["toy"]
    with PredictedStart(toy, ["fp32"]) as start:
        monkeypatch.setattr(start, "_send", lambda message: start.child.kill())  # gone before it answers
        answer = start.ask("fp32", GiB).poll(60)
    assert answer["error"] == "the prediction process ended without answering"
