"""Models nobody tuned memprobe for, on tiny configs: MoE experts under autocast, a build that reads tensor values,
models without a classifier (scan and predict), and models that cannot be built or run (one Error: line).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import memprobe  # noqa: E402
from memprobe.core.process.outcomes import USER_ERROR  # noqa: E402
from memprobe.core.records.results import read_result  # noqa: E402
from memprobe.predict.fake_mode import BUILD_VALUE_MAX_NUMEL, BuildValues  # noqa: E402
from memprobe.predict.fakecuda import H100  # noqa: E402
from memprobe.predict.recorder import Recorder  # noqa: E402
from memprobe.predict.session import fake_session  # noqa: E402
from memprobe.predict.trace import TraceSession  # noqa: E402
from memprobe.workloads.custom import CustomOptions, resolve  # noqa: E402

SMALL = {"num_hidden_layers": 1, "num_attention_heads": 2, "hidden_size": 32, "vocab_size": 128}
SMALL.update(intermediate_size=64, max_position_embeddings=64, num_key_value_heads=1)
MOE = {
    "mixtral": {"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2, **SMALL},
    "qwen2_moe": {
        "model_type": "qwen2_moe",
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 16,
        "shared_expert_intermediate_size": 64,
        **SMALL,
    },
    "olmoe": {"model_type": "olmoe", "num_experts": 4, "num_experts_per_tok": 2, **SMALL},
}


def error_lines(result) -> list[str]:
    return [line for line in result.output.splitlines() if line.startswith("Error")]


def config_file(tmp_path: Path, name: str, config: dict) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return path


def scan_cpu(run, tmp_path, model: str, *extra, budget: str = "16MiB"):
    out = tmp_path / "out"
    result = run(
        "scan", "--model", model, "--device", "cpu", "--cpu-memory-budget", budget, "--precision", "fp32",
        "--no-throughput", "--out", out, *extra,
    )  # fmt: skip
    files = sorted(out.glob("*.json"))
    return result, (read_result(files[-1]) if files else None)


# --- MoE experts: transformers' grouped_mm, which CUDA runs in fp32 too --------------------------------------


def test_grouped_mm_makes_the_output_cuda_makes_for_every_dtype_cuda_takes():
    with fake_session():
        tokens, weights, offs = torch.empty(10, 24), torch.empty(4, 24, 6), torch.empty(4, dtype=torch.int32)
        out = torch._grouped_mm(tokens, weights, offs=offs)  # fp32: torch's meta kernel refuses it, CUDA does not
        assert (out.shape, out.stride(), out.dtype) == ((10, 6), (8, 1), torch.float32)  # rows padded to 16 bytes
        half = torch._grouped_mm(tokens.bfloat16(), weights.bfloat16(), offs=offs)
        assert (half.shape, half.stride(), half.dtype) == ((10, 6), (8, 1), torch.bfloat16)
        grads = torch._grouped_mm(torch.empty(24, 10), torch.empty(10, 6), offs=offs)  # 2d x 2d: the weights' grad
        assert grads.shape == (4, 24, 6)
        with pytest.raises(RuntimeError, match="Float32, BFloat16 or Float16"):
            torch._grouped_mm(tokens.double(), weights.double(), offs=offs)


@pytest.mark.parametrize("kind", sorted(MOE))
def test_moe_models_predict_under_autocast(tmp_path, kind):
    path = config_file(tmp_path, kind, MOE[kind])
    prediction = memprobe.predict_max_batch(f"hf-config:{path}", memory="4GiB", precision="bf16", seq_len=16)
    assert prediction.precisions["bf16"].max_batch["4GiB"] > 100


# --- a build that reads tensor values -----------------------------------------------------------------------------


def _stages(depth: int) -> list[int]:
    """Stage widths the way timm's RegNet makes them: tensor arithmetic, torch.unique, .tolist()."""
    widths = torch.round(torch.pow(2.0, torch.arange(depth, dtype=torch.float32) // 3) * 8)
    counts = torch.unique(widths, return_counts=True)[1]
    assert int(widths.max().item()) == 8 * 2 ** ((depth - 1) // 3)
    return [len(counts), *widths.int().tolist()]


def test_a_build_reads_the_true_values_of_small_tensors():
    with fake_session(), Recorder(H100) as recorder:
        with BuildValues() as values:
            got = _stages(7)
            big = torch.ones(BUILD_VALUE_MAX_NUMEL + 1)
            assert not recorder.answers  # nothing answered as synthetic inputs would be: every read was a true value
            # too large to compute for real: its distinct values are answered at the worst case, and counted
            assert torch.unique(big).shape == (BUILD_VALUE_MAX_NUMEL + 1,)
            assert recorder.answers == {("unique", "all distinct"): 1}
    assert got == _stages(7)  # the same as on real tensors
    assert values.computed > 0


def test_values_written_without_real_values_are_never_read_stale():
    with fake_session(), Recorder(H100) as recorder, BuildValues():
        small, big = torch.full((4,), 3.0), torch.ones(BUILD_VALUE_MAX_NUMEL + 1)
        view = small[1:]
        assert small.sum().item() == 12 and not recorder.answers
        view.copy_(big[:3])  # written through a view from a tensor with no real value
        assert small.sum().item() == 0  # answered as synthetic inputs would be (FakeCudaMode), never the stale 12
        assert recorder.answers


def test_regnet_builds_on_fake_tensors_as_on_real_ones(timm_standin):
    import timm

    with TraceSession(resolve("timm:regnetx_002")) as session:
        fake = sum(p.numel() for p in session.task.model.parameters())
    real = sum(p.numel() for p in timm.create_model("regnetx_002").parameters())  # on real CPU tensors
    assert fake == real == 2684792


def test_build_values_leave_a_models_build_events_as_they_were(monkeypatch, timm_standin):
    import contextlib

    import memprobe.predict.trace as trace

    workload = resolve("timm:test_vit")
    with TraceSession(workload) as session:
        with_values = session.build_events
    monkeypatch.setattr(trace, "BuildValues", contextlib.nullcontext)
    with TraceSession(workload) as session:
        without = session.build_events
    assert with_values == without and len(with_values) > 10


# --- models without a classifier ------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_model_without_a_classifier_gets_a_default_head_in_predict(timm_standin):
    workload = resolve("timm:eva02_tiny_patch14_224", CustomOptions(input_size=(3, 28, 28)))
    with TraceSession(workload) as session:
        assert session.task.classes == 1000
        assert session.task.describe()["head"].startswith("a 1000-class linear head added")
    prediction = memprobe.predict_max_batch(
        workload.name, memory="1GiB", precision="fp32", input_size=(3, 28, 28), overhead=0
    )
    assert prediction.precisions["fp32"].max_batch["1GiB"] > 1


def test_a_model_that_keeps_no_classifier_trains_on_a_loss_on_its_features(timm_standin):
    from memprobe.workloads.timm_any import build

    params = {"model": "test_vit", "kwargs": {"num_classes": 0}, "input_size": [3, 32, 32]}
    task = build(params, {"name": "sgd"}, torch.device("cpu"))
    assert task.classes == 0 and "mean square" in task.describe()["head"]
    task.start()
    loss = task.loss(task.make_batch(3))
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is not None for p in task.model.parameters() if p.requires_grad)


NO_HEAD_REGISTRY = """
headless-vit:
  family: timm
  description: timm's test_vit built without its classifier (num_classes 0)
  unit: images
  params: {model: test_vit, input_size: [3, 32, 32], kwargs: {num_classes: 0}}
  optimizer: {name: sgd, lr: 0.1, momentum: 0.9}
"""


@pytest.mark.slow
def test_a_cpu_scan_of_a_model_without_a_classifier_trains(run, tmp_path, timm_standin, standin_in_trial_processes):
    models = tmp_path / "models.yaml"
    models.write_text(NO_HEAD_REGISTRY)
    result, saved = scan_cpu(run, tmp_path, "headless-vit", "--models", models, budget="8MiB")
    assert result.exit_code == 0, result.output
    p = saved.precisions["fp32"]
    assert p.status == "done" and p.max_batch >= 1 and p.proof.verified
    assert p.settings.task.extra["classes"] == 0 and "mean square" in p.settings.task.extra["head"]


# --- models that cannot be built or run: one Error: line, exit 1, no traceback --------------------------------------

BROKEN = {"model_type": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 100, "n_positions": 64}
BROKEN["activation_function"] = "swishy"  # no such activation: transformers raises while building the model


def test_predict_of_an_hf_config_that_cannot_be_built_says_why_in_one_line(run, tmp_path):
    path = config_file(tmp_path, "broken", BROKEN)
    result = run("predict", "--model", f"hf-config:{path}", "--memory", "4GiB", "-p", "fp32", "--seq-len", "16")
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = error_lines(result)
    assert f"hf-config:{path}" in line and "swishy" in line and "GPT2Config" in line


def test_scan_of_an_hf_config_that_cannot_be_built_says_why_in_one_line(run, tmp_path):
    path = config_file(tmp_path, "broken", BROKEN)
    result, saved = scan_cpu(run, tmp_path, f"hf-config:{path}", "--seq-len", "16")
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = error_lines(result)
    assert f"hf-config:{path}" in line and "swishy" in line
    assert saved.precisions["fp32"].stop == USER_ERROR
    assert "Traceback (most recent call last)" in saved.precisions["fp32"].error  # kept in the result file


def test_a_timm_model_whose_step_fails_gets_one_error_line_in_scan_and_predict(
    run, tmp_path, timm_standin, standin_in_trial_processes
):
    result, saved = scan_cpu(run, tmp_path, "timm:test_vit", "--input-size", "3,30,30")  # not a multiple of the patch
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = error_lines(result)
    assert "timm:test_vit fp32" in line and "divisible by patch size" in line
    assert saved.precisions["fp32"].stop == USER_ERROR
    result = run("predict", "--model", "timm:test_vit", "--input-size", "3,30,30", "--memory", "4GiB", "-p", "fp32")
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = error_lines(result)
    assert "timm:test_vit" in line and "divisible by patch size" in line


def test_unique_in_a_step_is_answered_at_its_worst_case_and_said():
    with fake_session(), Recorder(H100) as recorder:
        x = torch.randn(6, 4)
        values, inverse, counts = torch.unique(x, return_inverse=True, return_counts=True)
        assert (values.shape, inverse.shape, counts.shape) == ((24,), (6, 4), (24,))  # every value distinct
        rows = torch.unique(x, dim=0)
        assert rows.shape == (6, 4)
        assert recorder.answers[("unique", "all distinct")] == 2


def test_a_scalar_draw_is_read_at_its_largest_value_in_a_step():
    with fake_session(), Recorder(H100) as recorder:
        # BART's layer drop in transformers 5.17: `if torch.rand([]) < self.layerdrop: skip the layer`, layerdrop 0;
        # a read of True (the answer for a boolean) skipped every layer
        assert not bool(torch.rand([]) < 0.0) and not bool(torch.rand([]) < 0.99)  # no layer skipped
        assert 0.999 < torch.rand([]).item() < 1.0 and bool(torch.rand([]) * 2 > 1.99)
        assert not recorder.answers  # values, not answers
        scale = torch.full((), 2.0)  # not a draw (a GradScaler's scale): read as before, answered
        assert scale.item() == 0.0 and recorder.answers[("value", 0.0)] == 1
        draw = torch.rand([])
        draw.mul_(torch.randn(8, 8).sum())  # written from a tensor with no value: never read stale
        assert draw.item() == 0.0 and recorder.answers[("value", 0.0)] == 2
