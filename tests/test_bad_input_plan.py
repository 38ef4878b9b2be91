"""`memprobe plan`'s bad inputs (and the frontier's): each one clear `Error` line and a non-zero exit, never a
traceback (harness: tests/bad_input.py)."""

from __future__ import annotations

import pytest

from bad_input import check, workdir  # noqa: F401  (workdir is a fixture)

P = ["plan", "--model", "resnet50", "--gpu", "H100"]

# (id, argv, a fragment the one-line error must contain)
CASES = [
    ("unknown-card", ["plan", "--model", "resnet50", "--gpu", "H900"], "unknown GPU 'H900'"),
    ("empty-card", ["plan", "--model", "resnet50", "--gpu", ""], "no card name given"),
    ("no-card", ["plan", "--model", "resnet50"], "Missing option '--gpu'"),
    ("unknown-model", ["plan", "--model", "resnet5", "--gpu", "H100"], "unknown model 'resnet5'"),
    ("several-models", ["plan", "--model", "resnet50,bert-large", "--gpu", "H100"], "plan one at a time"),
    ("global-batch-zero", P + ["--global-batch", "0"], "must be at least 1"),
    ("global-batch-negative", P + ["--global-batch", "-8"], "must be at least 1"),
    ("global-batch-garbage", P + ["--global-batch", "lots"], "'lots' is not a valid integer"),
    ("seq-len-non-llm", P + ["--seq-len", "1024"], "--seq-len applies to the LLM workloads"),
    ("seq-len-zero", ["plan", "--model", "llama-1b", "--gpu", "H100", "--seq-len", "0"], "must be between 2"),
    ("seq-len-one", ["plan", "--model", "llama-1b", "--gpu", "H100", "--seq-len", "1"], "must be between 2"),
    ("lora-non-llm", P + ["--lora", "16"], "--lora applies to the LLM workloads"),
    ("lora-garbage", ["plan", "--model", "llama-1b", "--gpu", "H100", "--lora", "big"], "--lora expects a rank"),
    ("optimizer-registry", P + ["--optimizer", "adam"], "trains with its registry optimizer"),
    (
        "optimizer-unknown",
        ["plan", "--model", "timm:resnet18", "--gpu", "H100", "--optimizer", "lion"],
        "unknown optimizer(s) lion",
    ),
    ("bad-precision", P + ["-p", "int4"], "unknown precision(s) int4"),
    ("results-missing", P + ["--results", "{tmp}/gone.json"], "does not exist"),
    ("results-foreign", P + ["--results", "{foreign.json}"], "not a memprobe result file"),
    ("results-empty-path", P + ["--results", ""], "an empty path"),
    ("bad-format", P + ["--format", "xml"], "'xml' is not one of"),
    # --search frontier (scan and predict)
    (
        "frontier-vision",
        ["predict", "--model", "resnet50", "--search", "frontier", "--gpu", "H100"],
        "--search frontier applies to LLM workloads",
    ),
    (
        "frontier-seq-len",
        ["scan", "--model", "llama-1b", "--search", "frontier", "--seq-len", "1024"],
        "walks the sequence lengths itself",
    ),
    (
        "frontier-batch",
        ["scan", "--model", "llama-1b", "--search", "frontier", "--batch", "2"],
        "walks the batches itself",
    ),
    (
        "frontier-budget-alone",
        ["scan", "--model", "llama-1b", "--frontier-budget", "60"],
        "--frontier-budget has no effect without --search frontier",
    ),
    (
        "frontier-budget-zero",
        ["scan", "--model", "llama-1b", "--search", "frontier", "--frontier-budget", "0"],
        "--frontier-budget",
    ),
    (
        "frontier-two-sizes",
        ["predict", "--model", "toy-llama", "--search", "frontier", "--memory", "8GiB,16GiB"],
        "one memory size or card",
    ),
    ("frontier-no-size", ["predict", "--model", "toy-llama", "--search", "frontier"], "give --gpu or --memory"),
    ("predict-out-alone", ["predict", "--model", "toy", "--out", "{tmp}"], "--out has no effect without"),
    ("report-frontier-none", ["report", "--frontier", "{H100}"], "no frontier in these result files"),
]


@pytest.mark.parametrize("argv, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_a_non_zero_exit(workdir, argv, fragment, capfd):  # noqa: F811
    check(workdir, argv, fragment, capfd)
