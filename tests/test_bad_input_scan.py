"""`memprobe scan`'s bad inputs, tried as a new user would: each is one clear `Error` line and a non-zero exit,
never a traceback, and none needs a GPU to be refused (harness: tests/bad_input.py)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from bad_input import check, workdir  # noqa: F401  (workdir is a fixture)
from conftest import has_nvidia_gpu
from memprobe.cli import main

S = ["scan", "--model", "toy"]
CPU = S + ["--device", "cpu", "--cpu-memory-budget", "8MiB"]

# (id, argv, a fragment the one-line error must contain)
CASES = [
    # --model, --precision, --mode, --device
    ("unknown-model", ["scan", "--model", "gpt-17"], "unknown model 'gpt-17'"),
    ("empty-model", ["scan", "--model", ","], "no model given"),
    ("bad-precision", S + ["--precision", "fp8"], "Invalid value for --precision: unknown precision(s) fp8"),
    ("empty-precision", S + ["--precision", ","], "give at least one precision"),
    ("bad-mode", S + ["--mode", "finetune"], "'finetune' is not one of"),
    ("bad-device", S + ["--device", "tpu"], "'tpu' is not one of"),
    # batch sizes and counts
    ("batch-zero", S + ["--batch", "0"], "batch sizes must be at least 1"),
    ("batch-negative", S + ["--batch", "8,-4"], "batch sizes must be at least 1"),
    ("batch-garbage", S + ["--batch", "lots"], "expected comma-separated integers"),
    ("batch-float", S + ["--batch", "1.5"], "expected comma-separated integers"),
    ("batch-absurd", S + ["--batch", "99999999999"], "batch sizes must be at most 1,048,576, got 99,999,999,999"),
    ("steps-too-few", S + ["--steps", "2"], "--steps"),
    ("steps-unbounded", S + ["--steps", "100000"], "must be at most 100, got 100,000"),
    ("steps-garbage", S + ["--steps", "three"], "--steps"),
    ("warmup-negative", S + ["--warmup", "-1"], "--warmup"),
    ("warmup-absurd", S + ["--warmup", "99999"], "must be at most 1,000, got 99,999"),
    ("timed-steps-zero", S + ["--timed-steps", "0"], "--timed-steps"),
    ("timed-steps-absurd", S + ["--timed-steps", "9999999"], "must be at most 10,000, got 9,999,999"),
    ("max-batch-zero", S + ["--max-batch", "0"], "--max-batch"),
    ("max-batch-absurd", S + ["--max-batch", "99999999999"], "must be at most 1,048,576, got 99,999,999,999"),
    ("max-trials-one", S + ["--max-trials", "1"], "--max-trials"),
    ("max-trials-absurd", S + ["--max-trials", "99999"], "must be at most 1,000, got 99,999"),
    ("soak-negative", S + ["--soak", "-1"], "--soak"),
    ("soak-garbage", S + ["--soak", "forever"], "--soak"),
    ("soak-absurd", S + ["--soak", "999999999"], "must be at most 100,000, got 999,999,999"),
    ("curve-garbage", CPU + ["--curve", "abc"], "expected comma-separated integers"),
    ("curve-negative", CPU + ["--curve", "0,-1"], "batch sizes must be at least 1"),
    ("seq-len-absurd", ["scan", "--model", "llama-1b", "--seq-len", "99999999999999"], "must be at most 1,048,576"),
    ("lora-on-a-cnn", ["scan", "--model", "resnet50", "--lora", "16"], "apply to the LLM workloads"),
    # memory sizes and caps
    ("memory-cap-garbage", S + ["--memory-cap", "big"], "not a size: 'big'"),
    ("memory-cap-zero", S + ["--memory-cap", "0"], "--memory-cap must be larger than 0"),
    (
        "memory-cap-on-cpu",
        S + ["--device", "cpu", "--cpu-memory-budget", "8MiB", "--memory-cap", "1GiB"],
        "needs --device cuda",
    ),
    ("cpu-without-budget", S + ["--device", "cpu"], "needs --cpu-memory-budget"),
    ("cpu-budget-garbage", S + ["--device", "cpu", "--cpu-memory-budget", "x"], "not a size: 'x'"),
    ("cpu-budget-zero", S + ["--device", "cpu", "--cpu-memory-budget", "0MiB"], "--cpu-memory-budget must be larger"),
    # options that do nothing here
    ("cpu-budget-on-cuda", S + ["--cpu-memory-budget", "8MiB"], "--cpu-memory-budget has no effect without --device"),
    ("predict-if-no-gpu-on-cpu", CPU + ["--predict-if-no-gpu"], "--predict-if-no-gpu has no effect with --device cpu"),
    ("cudnn-benchmark-on-cpu", CPU + ["--cudnn-benchmark"], "--cudnn-benchmark has no effect with --device cpu"),
    ("curve-and-no-curve", CPU + ["--curve", "2,4", "--no-curve"], "--curve has no effect with --no-curve"),
    ("curve-and-no-throughput", CPU + ["--curve", "2,4", "--no-throughput"], "--curve has no effect"),
    ("strategy-without-gpus", S + ["--strategy", "fsdp"], "--strategy has no effect without --gpus N > 1"),
    ("gpus-zero", CPU + ["--gpus", "0"], "a world size must be at least 1"),
    ("gpus-garbage", CPU + ["--gpus", "x"], "Invalid value for --gpus: expected numbers of GPUs or 'all', got 'x'"),
    ("parallel-gpus-zero", CPU + ["--parallel", "--gpus", "0"], "a world size must be at least 1"),
    ("parallel-gpus-garbage", CPU + ["--parallel", "--gpus", "two"], "expected numbers of GPUs or 'all', got 'two'"),
    ("parallel-gpus-several", CPU + ["--parallel", "--gpus", "1,2"], "--parallel takes --gpus N"),
    # --out that cannot be written: refused before any trial
    ("out-in-proc", CPU + ["--out", "/proc/memprobe-x"], "cannot make the folder /proc/memprobe-x"),
    ("out-empty", CPU + ["--out", ""], "an empty path"),
    ("out-on-a-file", CPU + ["--out", "{a_file}"], "is a file"),
    # malformed models.yaml
    (
        "models-unknown-family",
        S + ["--models", "{unknown_family.yaml}"],
        "entry 'toy' (line 1): unknown family 'no-such-family'",
    ),
]


@pytest.mark.parametrize("argv, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_a_non_zero_exit(workdir, argv, fragment):  # noqa: F811
    check(workdir, argv, fragment)


# --- options that do nothing to forward passes; a KeyboardInterrupt of the model's own --------------------------------

SCAN_CASES = [
    (
        "infer-optimizer",
        ["scan", "--model", "timm:resnet18", "--mode", "infer", "--optimizer", "adam"],
        "--optimizer has no effect with --mode infer",
        2,
    ),
    (
        "infer-lora",
        ["scan", "--model", "llama-1b", "--mode", "infer", "--lora", "16"],
        "--lora has no effect with --mode infer",
        2,
    ),
    (
        "infer-checkpointing",
        ["scan", "--model", "llama-1b", "--mode", "infer", "--checkpointing"],
        "--checkpointing has no effect",
        2,
    ),
    (
        "models-unknown-param",
        S + ["--models", "{params_unknown.yaml}"],
        "params colour is not taken by family 'toy-mlp'",
        1,
    ),
    (
        "build-raises-keyboard-interrupt",
        [
            "scan",
            "--model",
            "{raises_interrupt.py}:build",
            "-p",
            "fp32",
            "--device",
            "cpu",
            "--cpu-memory-budget",
            "64MiB",
            "--out",
            "{tmp}/out",
        ],
        "raised KeyboardInterrupt (no Ctrl-C came)",
        1,
    ),
]


@pytest.mark.parametrize("argv, fragment, code", [c[1:] for c in SCAN_CASES], ids=[c[0] for c in SCAN_CASES])
def test_scan_refuses_what_does_nothing(workdir, argv, fragment, code):  # noqa: F811
    (workdir / "raises_interrupt.py").write_text("def build(device, precision):\n    raise KeyboardInterrupt\n")
    (workdir / "params_unknown.yaml").write_text(
        "toy:\n  family: toy-mlp\n  unit: samples\n  params: {features: 8, hidden: 8, classes: 2, colour: red}\n"
        "  optimizer: {name: sgd}\n"
    )
    check(workdir, argv, fragment, code=code)


# --- no GPU: the prediction offered is the scan typed, and --predict-if-no-gpu runs exactly it ------------------------

no_gpu_only = pytest.mark.skipif(has_nvidia_gpu(), reason="checks the behaviour on a machine without an NVIDIA GPU")


def _offered(argv: list[str]) -> str:
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error")]
    return line


@no_gpu_only
def test_without_a_gpu_the_offered_prediction_keeps_every_option():
    line = _offered(["scan", "--model", "bert-large-squad", "--mode", "infer", "-p", "fp16"])
    assert (
        "`memprobe predict --model bert-large-squad --precision fp16 --memory 11GiB,24GiB,48GiB,80GiB --mode infer`"
        in line
    )
    line = _offered(
        ["scan", "-m", "timm:resnet18", "--input-size", "3,64,64", "--gpus", "1,2", "--strategy", "fsdp", "--soak", "5"]
    )
    assert "`memprobe predict --model timm:resnet18 --memory 11GiB,24GiB,48GiB,80GiB --input-size 3,64,64`" in line
    assert "(and again with --gpus 2 --strategy fsdp)" in line and "--soak left out: a prediction times nothing" in line
    line = _offered(["scan", "--model", "toy", "--memory-cap", "8GiB"])
    assert "`memprobe predict --model toy --memory 8GiB`" in line  # the emulated card's size, not four others
    line = _offered(["scan", "--model", "toy-llama", "--search", "seq-len", "--batch", "2", "--checkpointing"])
    assert "--batch 2 --search seq-len --checkpointing`" in line


@no_gpu_only
def test_without_a_gpu_the_offered_prediction_runs_as_offered(tmp_path):
    # inference was refused ("predicts training steps only") while the message offered it
    argv = ["scan", "--model", "toy", "-p", "fp32", "--mode", "infer", "--out", str(tmp_path), "--predict-if-no-gpu"]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    assert (
        "memprobe predict --model toy --precision fp32 --memory 11GiB,24GiB,48GiB,80GiB --mode infer" in result.output
    )
    assert "trial of inference (2 forward passes under inference_mode)" in " ".join(result.output.split())  # wrapped
    assert list(tmp_path.iterdir()) == []
