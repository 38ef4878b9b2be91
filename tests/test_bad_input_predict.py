"""`memprobe predict`'s bad inputs, tried as a new user would: each is one clear `Error` line and a non-zero exit,
never a traceback, not even one torch logs (harness: tests/bad_input.py)."""

from __future__ import annotations

import pytest

from bad_input import check, workdir  # noqa: F401  (workdir is a fixture)

P = ["predict", "--model", "toy"]
LLAMA = ["predict", "--model", "llama-1b", "-p", "bf16"]

# (id, argv, a fragment the one-line error must contain)
CASES = [
    # --model
    ("unknown-model", ["predict", "--model", "resnet5"], "unknown model 'resnet5'"),
    ("empty-model", ["predict", "--model", ""], "no model given"),
    ("comma-model", ["predict", "--model", ","], "no model given"),
    ("unicode-model", ["predict", "--model", "\N{SNOWMAN}"], "unknown model"),
    ("hf-without-name", ["predict", "--model", "hf:"], "hf: needs a name"),
    ("timm-without-name", ["predict", "--model", "timm:"], "timm: needs a model name"),
    ("file-without-function", ["predict", "--model", "x.py:"], "expected FILE.py:FUNCTION"),
    ("function-without-file", ["predict", "--model", ":build"], "expected FILE.py:FUNCTION"),
    ("missing-file", ["predict", "--model", "{tmp}/gone.py:build"], "no file"),
    ("missing-relative-file", ["predict", "--model", "gone.py:build"], "relative paths are read from the working"),
    ("missing-hf-config", ["predict", "--model", "hf-config:{tmp}/gone.json"], "cannot read the config"),
    (
        "hf-config-unknown-type",
        ["predict", "--model", "hf-config:{unknown_type.json}", "--memory", "8GiB"],
        "knows no model_type 'gpt3000'",
    ),
    (
        "build-calls-sys-exit",
        ["predict", "--model", "{exits.py}:build", "--memory", "8GiB", "-p", "fp32"],
        "called sys.exit(3)",
    ),
    (
        "import-calls-sys-exit",
        ["predict", "--model", "{exits_on_import.py}:build", "--memory", "8GiB"],
        "called sys.exit(5)",
    ),
    # --precision
    ("bad-precision", P + ["--precision", "int4"], "unknown precision(s) int4"),
    ("empty-precision", P + ["--precision", ","], "give at least one precision"),
    # --memory, --gpu
    ("memory-zero", ["predict", "--model", "bert-large", "--memory", "0"], "must be larger than 0"),
    ("memory-zero-gib", P + ["--memory", "0GiB"], "must be larger than 0"),
    ("memory-negative", P + ["--memory", "-24GiB"], "not a size"),
    ("memory-garbage", P + ["--memory", "lots"], "not a size: 'lots'"),
    ("memory-unit", P + ["--memory", "24 parsecs"], "not a size"),
    ("memory-empty", P + ["--memory", ","], "give at least one memory size"),
    ("memory-nan", P + ["--memory", "nan"], "not a size"),
    ("memory-inf", P + ["--memory", "inf"], "not a size"),
    ("memory-exponent", P + ["--memory", "1e30GiB"], "not a size"),
    ("memory-huge", P + ["--memory", "17TiB"], "more than any GPU has"),
    (
        "memory-below-overhead",
        P + ["--memory", "1GiB"],
        "GiB the allocator cannot use (CUDA context, driver)",
    ),  # the shipped overhead, whatever it is
    ("unknown-gpu", P + ["--gpu", "H900"], "unknown GPU 'H900'"),
    ("gpu-empty", P + ["--gpu", ""], "no card name given"),
    ("gpu-extra-words", P + ["--gpu", "H200 foo"], "unknown GPU 'H200 foo'"),
    ("gpu-unicode", P + ["--gpu", "H200 \N{SNOWMAN}"], "is not a card name"),
    ("gpu-control-character", P + ["--gpu", "H200\x07"], "is not a card name"),
    # --overhead-from, --overhead
    ("overhead-from-missing", P + ["--overhead-from", "/nonexistent/dir"], "does not exist"),
    ("overhead-from-no-scans", P + ["--overhead-from", "{empty_dir}"], "no scan result with a recorded allocator"),
    ("overhead-negative", P + ["--overhead", "-1GiB"], "not a size"),
    ("overhead-garbage", P + ["--overhead", "lots"], "not a size"),
    ("overhead-both", P + ["--overhead", "1GiB", "--overhead-from", "{H100}"], "not both"),
    ("overhead-bigger-than-memory", P + ["--overhead", "20GiB", "--memory", "8GiB"], "not larger than"),
    # --steps, --gpus, --strategy, --mode
    ("steps-too-few", P + ["--steps", "1"], "--steps"),
    ("steps-unbounded", P + ["--steps", "100000"], "100000 is not in the range 1<=x<=10"),
    ("steps-zero", P + ["--steps", "0"], "--steps"),
    ("steps-garbage", P + ["--steps", "three"], "--steps"),
    ("gpus-zero", P + ["--gpus", "0"], "--gpus"),
    ("gpus-huge", P + ["--gpus", "100000"], "is not in the range 1<=x<=1024"),
    ("strategy-without-gpus", P + ["--strategy", "fsdp"], "--strategy has no effect without --gpus N > 1"),
    ("strategy-unknown", P + ["--gpus", "2", "--strategy", "zero3"], "unknown strategy zero3"),
    ("infer-on-several-gpus", P + ["--gpus", "2", "--mode", "infer"], "leave --mode at train"),
    # LLM variants
    ("batch-without-seq-len-search", P + ["--batch", "5"], "--batch has no effect without --search seq-len"),
    (
        "seq-len-search-batch-absurd",
        LLAMA + ["--search", "seq-len", "--batch", "99999999999"],
        "99999999999 is not in the range 1<=x<=65536",
    ),
    ("seq-len-search-batch-zero", LLAMA + ["--search", "seq-len", "--batch", "0"], "--batch"),
    ("seq-len-absurd", LLAMA + ["--seq-len", "99999999999999"], "is not in the range 2<=x<=1048576"),
    ("seq-len-one", LLAMA + ["--seq-len", "1"], "--seq-len"),
    ("seq-len-with-its-search", LLAMA + ["--search", "seq-len", "--seq-len", "512"], "drop --seq-len"),
    ("seq-len-on-a-cnn", ["predict", "--model", "resnet50", "--seq-len", "512"], "apply to the LLM workloads"),
    ("lora-zero", LLAMA + ["--lora", "0"], "expects a rank"),
    ("lora-garbage", LLAMA + ["--lora", "big"], "expects a rank"),
    ("lora-in-fp32", ["predict", "--model", "llama-1b", "-p", "fp32", "--lora", "16"], "trains in bf16 or fp16 only"),
    ("checkpointing-on-a-cnn", ["predict", "--model", "resnet50", "--checkpointing"], "apply to the LLM workloads"),
    # models given by name
    (
        "input-size-on-registry",
        ["predict", "--model", "resnet50", "--input-size", "3,64,64"],
        "defined in the registry",
    ),
    ("input-size-garbage", ["predict", "--model", "timm:resnet18", "--input-size", "abc"], "expected C,H,W"),
    ("input-size-zero", ["predict", "--model", "timm:resnet18", "--input-size", "0,0,0"], "three positive integers"),
    ("input-size-absurd", ["predict", "--model", "timm:resnet18", "--input-size", "3,99999,99999"], "must be at most"),
    # --compare, --models
    ("compare-foreign", P + ["--compare", "{foreign.json}"], "not a memprobe result file"),
    (
        "compare-bad-field",
        ["predict", "--model", "resnet50", "--compare", "{lots.json}"],
        "max_batch must be an integer",
    ),
    ("compare-other-model", P + ["--compare", "{H100}"], "is a scan of resnet50, not of toy"),
    ("compare-missing", P + ["--compare", "{tmp}/gone.json"], "does not exist"),
    ("relative-compare-path", ["predict", "--model", "resnet50", "--compare", "reports/h100/x.json"], "does not exist"),
    ("compare-empty-path", P + ["--compare", ""], "an empty path"),
    ("compare-dev-zero", P + ["--compare", "/dev/zero"], "/dev/zero: cannot read (not a regular file"),
    (
        "hf-config-negative-layers",
        ["predict", "--model", "hf-config:{negative_layers.json}"],
        "'num_hidden_layers' is -3; a size or count cannot be negative",
    ),
    ("hf-config-dev-zero", ["predict", "--model", "hf-config:/dev/zero"], "cannot read the config (not a regular"),
    ("overhead-from-empty-path", P + ["--overhead-from", ""], "an empty path"),
    ("models-bad-unit", P + ["--models", "{bad_unit.yaml}"], "entry 'toy' (line 6): unit"),
    # --breakdown-out: checked before the prediction, not after minutes of it
    (
        "breakdown-out-in-proc",
        P + ["--breakdown", "--breakdown-out", "/proc/memprobe-x/b.json"],
        "cannot make the folder /proc/memprobe-x",
    ),
    ("breakdown-out-a-folder", P + ["--breakdown", "--breakdown-out", "{empty_dir}"], "is a directory"),
    ("breakdown-out-empty", P + ["--breakdown", "--breakdown-out", " "], "an empty path"),
]


@pytest.mark.parametrize("argv, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_a_non_zero_exit(workdir, argv, fragment, capfd):  # noqa: F811
    check(workdir, argv, fragment, capfd)
