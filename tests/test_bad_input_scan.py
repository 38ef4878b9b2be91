"""`memprobe scan`'s bad inputs, tried as a new user would: each is one clear `Error` line and a non-zero exit,
never a traceback, and none needs a GPU to be refused (harness: tests/bad_input.py)."""

from __future__ import annotations

import pytest

from bad_input import check, workdir  # noqa: F401  (workdir is a fixture)

S = ["scan", "--model", "toy"]
CPU = S + ["--device", "cpu", "--cpu-memory-budget", "8MiB"]

# (id, argv, a fragment the one-line error must contain)
CASES = [
    # --model, --precision, --mode, --device
    ("unknown-model", ["scan", "--model", "gpt-17"], "unknown model 'gpt-17'"),
    ("empty-model", ["scan", "--model", ","], "no model given"),
    ("bad-precision", S + ["--precision", "fp8"], "unknown precision fp8"),
    ("empty-precision", S + ["--precision", ","], "unknown precision (none)"),
    ("bad-mode", S + ["--mode", "finetune"], "'finetune' is not one of"),
    ("bad-device", S + ["--device", "tpu"], "'tpu' is not one of"),
    # batch sizes and counts
    ("batch-zero", S + ["--batch", "0"], "batch sizes must be at least 1"),
    ("batch-negative", S + ["--batch", "8,-4"], "batch sizes must be at least 1"),
    ("batch-garbage", S + ["--batch", "lots"], "expected comma-separated integers"),
    ("batch-float", S + ["--batch", "1.5"], "expected comma-separated integers"),
    ("batch-absurd", S + ["--batch", "99999999999"], "batch sizes must be at most 1048576"),
    ("steps-too-few", S + ["--steps", "2"], "--steps"),
    ("steps-unbounded", S + ["--steps", "100000"], "100000 is not in the range 3<=x<=100"),
    ("steps-garbage", S + ["--steps", "three"], "--steps"),
    ("warmup-negative", S + ["--warmup", "-1"], "--warmup"),
    ("warmup-absurd", S + ["--warmup", "99999"], "is not in the range 0<=x<=1000"),
    ("timed-steps-zero", S + ["--timed-steps", "0"], "--timed-steps"),
    ("timed-steps-absurd", S + ["--timed-steps", "9999999"], "is not in the range 1<=x<=10000"),
    ("max-batch-zero", S + ["--max-batch", "0"], "--max-batch"),
    ("max-batch-absurd", S + ["--max-batch", "99999999999"], "is not in the range 1<=x<=1048576"),
    ("max-trials-one", S + ["--max-trials", "1"], "--max-trials"),
    ("max-trials-absurd", S + ["--max-trials", "99999"], "is not in the range 2<=x<=1000"),
    ("soak-negative", S + ["--soak", "-1"], "--soak"),
    ("soak-garbage", S + ["--soak", "forever"], "--soak"),
    ("soak-absurd", S + ["--soak", "999999999"], "is not in the range 0<=x<=100000"),
    ("curve-garbage", CPU + ["--curve", "abc"], "expected comma-separated integers"),
    ("curve-negative", CPU + ["--curve", "0,-1"], "batch sizes must be at least 1"),
    ("seq-len-absurd", ["scan", "--model", "llama-1b", "--seq-len", "99999999999999"], "is not in the range 2<=x"),
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
    ("gpus-garbage", CPU + ["--gpus", "x"], "--gpus takes numbers or 'all'"),
    ("parallel-gpus-zero", CPU + ["--parallel", "--gpus", "0"], "--gpus 0: give 1 or more GPUs"),
    ("parallel-gpus-garbage", CPU + ["--parallel", "--gpus", "two"], "--parallel takes --gpus N"),
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
