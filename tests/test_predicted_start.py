"""The search's predicted start on the CPU: the hint_worker child, PredictedStart, and a scan that uses it."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from memprobe.cli import main  # noqa: E402
from memprobe.probe.hint import PredictedStart  # noqa: E402
from memprobe.probe.options import ScanOptions  # noqa: E402
from memprobe.registry import Workload, load_registry  # noqa: E402

GiB = 1 << 30


def test_the_child_predicts_each_precision_at_the_capacity_asked():
    toy = load_registry()["toy"]
    with PredictedStart(toy, ["fp32", "bf16"]) as start:
        small, large = start.ask("fp32", 48 << 20), start.ask("fp32", 96 << 20)
        assert 0 < small["max_batch"] < large["max_batch"], (small, large)
        assert start.ask("bf16", GiB)["max_batch"] > 0
        assert "not among the precisions traced" in start.ask("fp16", GiB)["error"]
        assert "no allocator capacity" in start.ask("fp32", None)["error"]
        proc = start.proc
    assert proc.poll() is not None  # killed on exit


def test_a_model_that_cannot_be_traced_gives_an_error_not_a_hang():
    broken = Workload("broken", "no-such-family", "", "samples")
    with PredictedStart(broken, ["fp32"], wait_s=60) as start:
        answer = start.ask("fp32", GiB)
    assert "error" in answer and "max_batch" not in answer


def test_a_slow_prediction_is_given_up_and_the_child_ended():
    bert = load_registry()["toy-bert-squad"]
    with PredictedStart(bert, ["fp32"], wait_s=0.05) as start:
        answer = start.ask("fp32", GiB)
        assert answer["error"] == "no prediction within 0.05 s"
        assert start.proc is None
        assert "not running" in start.ask("fp32", GiB)["error"]


def test_the_default_is_on_for_cuda_without_compile():
    assert ScanOptions(["fp32"]).uses_predicted_start
    assert ScanOptions(["fp32"], mode="infer").uses_predicted_start
    assert not ScanOptions(["fp32"], device="cpu").uses_predicted_start
    assert not ScanOptions(["fp32"], compile=True).uses_predicted_start
    assert ScanOptions(["fp32"], device="cpu", predicted_start=True).uses_predicted_start


def test_a_scan_that_starts_from_the_prediction_finds_the_same_proven_edge(tmp_path):
    found = {}
    for flag in ("--predicted-start", "--no-predicted-start"):
        out = tmp_path / flag
        result = CliRunner().invoke(main, ["scan", "--model", "toy", "--device", "cpu", "--cpu-memory-budget", "48MiB",
                                           "-p", "fp32", "--no-throughput", flag, "--out", str(out)])
        assert result.exit_code == 0, result.output
        (path,) = out.glob("*.json")
        found[flag] = json.loads(path.read_text())["precisions"]["fp32"]
    hinted, plain = found["--predicted-start"], found["--no-predicted-start"]
    assert hinted["max_batch"] == plain["max_batch"] > 0 and hinted["proof"]["verified"]
    predicted = hinted["settings"]["predicted_start"]["max_batch"]
    assert predicted > 2 and [a["batch"] for a in hinted["attempts"]][:2] == [1, predicted]
    assert "predicted_start" not in plain["settings"]


def test_the_child_predicts_per_gpu_for_a_data_parallel_world():
    toy = load_registry()["toy"]
    with PredictedStart(toy, ["bf16"], world=(2, "fsdp")) as start:
        sharded = start.ask("bf16", 48 << 20)
    with PredictedStart(toy, ["bf16"], world=(2, "zero3")) as start:
        refused = start.ask("bf16", 48 << 20)
    assert sharded["max_batch"] > 0, sharded
    assert "unknown strategy 'zero3'" in refused["error"]


def test_a_distributed_scan_starts_from_the_predicted_per_gpu_edge_and_still_proves_it(tmp_path, monkeypatch):
    from conftest import RecordingProgress
    from memprobe.probe.distributed.scan import scan_distributed
    from test_distributed import TOY, FakeGroup, _opts

    asked = []

    def ask(self, precision, capacity_bytes):
        asked.append((self.world, precision, capacity_bytes))
        return {"precision": precision, "max_batch": 985}

    monkeypatch.setattr(PredictedStart, "ask", ask)
    group = FakeGroup()
    result, _path = scan_distributed(TOY, _opts(predicted_start=True), 2, "ddp", tmp_path, RecordingProgress(), group)
    p = result.precisions["fp32"]
    assert asked == [((2, "ddp"), "fp32", FakeGroup.CAPACITY)]
    assert [r.batches for r in group.requests[:3]] == [[1, 2], [985], [986]]  # then the walk to 990
    assert p.max_batch == 990 and p.proof["verified"] and p.settings["predicted_start"]["max_batch"] == 985


def test_an_inference_scan_gets_a_prediction_of_forward_passes():
    toy = load_registry()["toy"]
    with PredictedStart(toy, ["bf16"], steps=2, mode="infer") as start:
        infer = start.ask("bf16", 48 << 20)
    with PredictedStart(toy, ["bf16"]) as start:
        train = start.ask("bf16", 48 << 20)
    assert infer["max_batch"] > train["max_batch"] > 0  # no gradients, activations freed as the forward goes


def test_a_child_that_dies_is_reported_at_once_not_after_the_wait():
    import time

    toy = load_registry()["toy"]
    with PredictedStart(toy, ["fp32"], wait_s=60) as start:
        start.proc.kill()
        start.proc.wait()
        began = time.monotonic()
        answer = start.ask("fp32", GiB)
    assert "not running" in answer["error"] and time.monotonic() - began < 5


def test_a_child_that_ends_mid_answer_is_reported_as_ended(monkeypatch):
    toy = load_registry()["toy"]
    with PredictedStart(toy, ["fp32"], wait_s=60) as start:
        monkeypatch.setattr(start, "_send", lambda message: start.proc.kill())  # gone before it answers
        answer = start.ask("fp32", GiB)
    assert answer["error"] == "no prediction: the prediction process ended without answering"
