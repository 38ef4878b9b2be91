"""Your own model through the real code paths on the CPU: tiny models of each kind scanned
through the fork server and the fresh-process proof (`scan --device cpu`, the CPU's fake allocator),
predicted on fake tensors, and called from the Python API; the error paths end in one-line errors with
the user's traceback in the result file, outcome `user-error`, never taken for out of memory.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import memprobe  # noqa: E402
from memprobe.core.estimates.memory_model import Attempt  # noqa: E402
from memprobe.core.process.outcomes import USER_ERROR  # noqa: E402
from memprobe.core.process.protocol import Failure, SetupRequest  # noqa: E402
from memprobe.core.records.results import read_result  # noqa: E402
from memprobe.probe.search import find_max_batch as search  # noqa: E402
from memprobe.workloads.base import UserModelError  # noqa: E402

TESTS = Path(__file__).resolve().parent
BUDGET = "16MiB"
USER_MODULE = """
import torch
from torch import nn
from memprobe.workloads.base import TrainTask


class Tiny(TrainTask):
    def make_batch(self, n):
        return torch.randn(n, 32, device=self.device), torch.randint(0, 4, (n,), device=self.device)

    def loss(self, batch):
        x, y = batch
        return nn.functional.cross_entropy(self.model(x), y)


def build(device, precision):
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 4)).to(device)
    return Tiny(model, {"name": "adamw", "lr": 1e-3}, device)


class Plain:  # no memprobe import needed: .model, .make_batch(n), .loss(batch)
    def __init__(self, device):
        self.model, self.device = nn.Linear(32, 4).to(device), device

    def make_batch(self, n):
        return torch.randn(n, 32, device=self.device)

    def loss(self, x):
        return self.model(x).square().mean()


def plain(device, precision):
    return Plain(device)


def raises(device, precision):
    raise ValueError("my build is broken")


def wrong(device, precision):
    return 42


class BadLoss(Tiny):
    def loss(self, batch):
        raise KeyError("no such column")


def bad_loss(device, precision):
    return BadLoss(nn.Linear(32, 4).to(device), {"name": "sgd"}, device)


def on_meta(device, precision):
    return Tiny(nn.Linear(32, 4, device="meta"), {"name": "sgd"}, device)
"""
TINY_GPT2 = {
    "model_type": "gpt2",
    "n_layer": 2,
    "n_embd": 32,
    "n_head": 2,
    "vocab_size": 100,
    "n_positions": 64,
    "bos_token_id": 0,
    "eos_token_id": 0,
}


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("own")
    (folder / "own_model.py").write_text(USER_MODULE)
    (folder / "config.json").write_text(json.dumps(TINY_GPT2))
    return folder


def error_lines(result):
    return [line for line in result.output.splitlines() if line.startswith("Error")]


def scan(run, tmp_path, model, *extra):
    out = tmp_path / "out"
    result = run(
        "scan",
        "--model",
        model,
        "--device",
        "cpu",
        "--cpu-memory-budget",
        BUDGET,
        "--precision",
        "fp32",
        "--no-throughput",
        "--out",
        out,
        *extra,
    )
    files = sorted(out.glob("*.json"))
    return result, (read_result(files[-1]) if files else None)


# --- the three kinds through the trial processes ------------------------------------------------


def test_user_module_scan_through_fork_server_and_fresh_proof(run, tmp_path, user_dir, monkeypatch):
    monkeypatch.chdir(user_dir)
    result, saved = scan(run, tmp_path, "own_model.py:build")
    assert result.exit_code == 0, result.output
    p = saved.precisions["fp32"]
    assert p.status == "done" and p.stop == "edge" and p.max_batch > 2
    assert (p.proof.fits, p.proof.fails) == (p.max_batch, p.max_batch + 1) and p.proof.verified
    assert saved.workload.family == "module" and saved.workload.params["target"].endswith("own_model.py:build")


@pytest.mark.slow
def test_hf_config_scan(run, tmp_path, user_dir):
    result, saved = scan(run, tmp_path, f"hf-config:{user_dir / 'config.json'}", "--seq-len", "16")
    assert result.exit_code == 0, result.output
    p = saved.precisions["fp32"]
    assert p.status == "done" and p.max_batch >= 1 and p.proof.verified
    task = p.settings.task
    assert tuple(task.extra[k] for k in ("model_class", "task", "seq_len", "attention")) == (
        "GPT2LMHeadModel",
        "causal-lm",
        16,
        "sdpa",
    )


@pytest.mark.slow
def test_timm_scan(run, tmp_path, standin_in_trial_processes):
    result, saved = scan(run, tmp_path, "timm:test_vit", "--input-size", "3,32,32", "--cpu-memory-budget", "8MiB")
    assert result.exit_code == 0, result.output
    p = saved.precisions["fp32"]
    assert p.status == "done" and p.max_batch >= 1 and p.proof.verified
    assert p.settings.task.extra["timm_model"] == "test_vit" and p.settings.task.extra["input_size"] == [3, 32, 32]


# --- error paths -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "function, words",
    [
        ("raises", "raised ValueError: my build is broken"),
        ("wrong", "returned int; expected a memprobe TrainTask"),
        ("bad_loss", "KeyError: 'no such column'"),
        ("on_meta", "parameters on meta"),
    ],
)
def test_user_errors_are_one_line_with_the_traceback_in_the_result(run, tmp_path, user_dir, function, words):
    result, saved = scan(run, tmp_path, f"{user_dir / 'own_model.py'}:{function}")
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = error_lines(result)
    assert words in line and str(tmp_path / "out") in line
    p = saved.precisions["fp32"]
    assert (p.status, p.stop) == ("error", USER_ERROR)
    assert words.split(": ")[-1] in p.error
    if function in ("raises", "bad_loss"):  # the user's own code raised: its frames are in the result
        assert "Traceback (most recent call last)" in p.error and "own_model.py" in p.error
    if function == "bad_loss":  # a trial ran and failed: it is the search's last attempt, not an OOM
        assert [a.outcome for a in p.attempts] == [USER_ERROR]


def test_unknown_timm_name_is_a_user_error_naming_close_ones(timm_standin):
    from memprobe.probe.child.worker import Session

    session = Session()
    from memprobe.api import resolve_model

    workload = resolve_model("timm:vit_larg_patch16_224")
    try:
        answer = session.setup(SetupRequest(workload, "fp32", "train", "cpu", 1 << 30))
    finally:  # Session.setup enters the fake allocator for the life of the process: leave it
        session.close()
    assert isinstance(answer, Failure) and answer.kind == USER_ERROR
    assert "has no model 'vit_larg_patch16_224'" in answer.message and "vit_large_patch16_224" in answer.message


def test_predict_unknown_timm_name_is_one_line(run, timm_standin):
    result = run("predict", "--model", "timm:vit_larg_patch16_224", "--precision", "fp32")
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = error_lines(result)
    assert "has no model 'vit_larg_patch16_224'" in line and "vit_large_patch16_224" in line


def test_search_stops_at_a_user_error():
    def try_batch(n):
        return Attempt(n, "fit", 10 * n, 10 * n) if n < 2 else Attempt(n, USER_ERROR, message="KeyError\nTraceback")

    found = search(try_batch, capacity_bytes=1000)
    assert found.stop == USER_ERROR and found.error == "KeyError\nTraceback" and len(found.attempts) == 2


# --- predict on fake tensors --------------------------------------------------------------------


def test_predict_each_kind(user_dir, timm_standin, monkeypatch):
    monkeypatch.syspath_prepend(str(user_dir))
    own = importlib.import_module("own_model")
    cases = [(own.build, {}), (f"hf-config:{user_dir / 'config.json'}", {"seq_len": 16}), ("timm:test_convnext", {})]
    for model, options in cases:
        prediction = memprobe.predict_max_batch(model, memory="1GiB", precision="fp32", overhead=0, **options)
        got = prediction.precisions["fp32"]
        assert got.max_batch["1GiB"] >= 1
        assert got.model_reserved is None or got.model_reserved.per_sample_bytes > 0


def test_predict_user_build_that_raises_says_why_in_one_line(run, user_dir):
    result = run(
        "predict",
        "--model",
        f"{user_dir / 'own_model.py'}:raises",
        "--memory",
        "1GiB",
        "--precision",
        "fp32",
        "--overhead",
        "0",
    )
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = error_lines(result)
    assert "my build is broken" in line


# --- the Python API -------------------------------------------------------------------------------


@pytest.mark.slow
def test_api_find_max_batch_with_a_function(user_dir, monkeypatch):
    monkeypatch.syspath_prepend(str(user_dir))  # the trial processes import it where this process does
    own = importlib.import_module("own_model")
    result = memprobe.find_max_batch(
        own.build, precision="fp32", device="cpu", cpu_memory_budget=BUDGET, throughput=False
    )
    assert result.workload.name == "own_model:build"
    assert result.max_batch == result.precisions["fp32"].max_batch > 2
    assert result.precisions["fp32"].proof.verified
    assert json.loads(result.to_json())["schema"] == "memprobe.scan"

    with pytest.raises(memprobe.UserCodeError) as info:
        memprobe.find_max_batch(own.raises, precision="fp32", device="cpu", cpu_memory_budget=BUDGET)
    assert "my build is broken" in str(info.value) and "\n" not in str(info.value)
    assert "Traceback (most recent call last)" in info.value.details
    assert info.value.result.precisions["fp32"].stop == USER_ERROR


@pytest.mark.slow
def test_api_throughput_and_names(tmp_path):
    # capped at batch 8, so the search, the proof at the cap and the timed run are all small
    result = memprobe.find_max_batch(
        "toy",
        precision="fp32",
        device="cpu",
        cpu_memory_budget="64MiB",
        out=tmp_path,
        timed_steps=2,
        warmup=1,
        max_batch=8,
    )
    assert result.max_batch == 8 and result.precisions["fp32"].stop == "cap"
    assert result.throughput == result.precisions["fp32"].throughput.samples_per_s > 0
    assert len(list(tmp_path.glob("*.json"))) == 1
    with pytest.raises(ValueError, match="needs --cpu-memory-budget"):  # worded as `memprobe scan` words it
        memprobe.find_max_batch("toy", device="cpu")


def test_api_refuses_a_function_no_process_can_import():
    from memprobe.workloads.custom import CustomModelError

    with pytest.raises(CustomModelError, match="top-level function"):
        memprobe.find_max_batch(lambda device, precision: None, device="cpu", cpu_memory_budget=BUDGET)


def test_examples_my_model_builds_and_steps_on_meta():
    # the README's example, built by the module family's builder; on the meta device (no storage: the
    # real model is 150 M parameters) its batch, loss and backward check their shapes
    path = TESTS.parent / "examples" / "my_model.py"
    assert len(path.read_text().splitlines()) <= 22
    from memprobe.workloads.user_module import build

    meta = torch.device("meta")
    task = build({"target": f"{path}:build"}, {"name": "adamw"}, meta, "bf16")
    loss = task.loss(task.make_batch(2))
    assert loss.shape == () and loss.device == meta
    loss.backward()
    assert all(p.grad is not None for p in task.model.parameters())


def test_user_module_oom_at_build_is_not_a_user_error(tmp_path):
    (tmp_path / "big.py").write_text(
        "import torch\ndef build(device, precision):\n"
        "    raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 80 GiB')\n"
    )
    from memprobe.workloads.user_module import build

    with pytest.raises(torch.OutOfMemoryError):
        build({"target": f"{tmp_path / 'big.py'}:build"}, {"name": "sgd"}, torch.device("cpu"))
    with pytest.raises(UserModelError, match="has no missing"):
        build({"target": f"{tmp_path / 'big.py'}:missing"}, {"name": "sgd"}, torch.device("cpu"))
