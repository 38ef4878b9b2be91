"""`memprobe plan`'s bad inputs (and the frontier's): each one clear `Error` line and a non-zero exit, never a
traceback (harness: tests/bad_input.py)."""

from __future__ import annotations

import json
import re

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
    ("seq-len-zero", ["plan", "--model", "llama-1b", "--gpu", "H100", "--seq-len", "0"], "must be at least 2, got 0"),
    ("seq-len-one", ["plan", "--model", "llama-1b", "--gpu", "H100", "--seq-len", "1"], "must be at least 2, got 1"),
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


# --plan's --results that would change nothing, absurd global batches, card names: one line and README's exit code
PLAN_CASES = [
    ("results-empty-folder", P + ["--results", "{empty_dir}"], "--results: no memprobe result files in", 1),
    ("results-only-foreign", P + ["--results", "{foreign.json}", "--results", "{empty_dir}"], "not a memprobe", 1),
    (
        "results-another-model",
        ["plan", "--model", "bert-large", "--gpu", "H100", "--results", "{H100}"],
        "--results: no scan there measured bert-large (fp32, fp16, bf16) on the H100 SXM",
        1,
    ),
    (
        "results-another-card",
        ["plan", "--model", "resnet50", "--gpu", "H200", "--results", "{H100}"],
        "they hold resnet50 fp32,fp16,bf16 on NVIDIA H100 80GB HBM3",
        1,
    ),
    (
        "results-another-precision",
        P + ["--results", "{H100}", "-p", "tf32"],
        "no scan there measured resnet50 (tf32) on the H100 SXM",
        1,
    ),
    ("global-batch-absurd", P + ["--global-batch", "1000000000000000"], "must be at most 16,777,216", 2),
    ("global-batch-huge", P + ["--global-batch", str(10**40)], "must be at most 16,777,216", 2),
    ("card-a-size", ["plan", "--model", "resnet50", "--gpu", "80GB"], "'80GB' is a memory size, not a card name", 1),
    ("card-unknown-exits-1", ["plan", "--model", "resnet50", "--gpu", "H900"], "--gpu: unknown GPU 'H900'", 1),
    ("several-cards", ["plan", "--model", "resnet50", "--gpu", "H100,H200"], "plan one at a time", 2),
    ("card-before-model", ["plan", "--model", "resnet5", "--gpu", "H900"], "--gpu: unknown GPU 'H900'", 1),
]


@pytest.mark.parametrize("argv, fragment, code", [c[1:] for c in PLAN_CASES], ids=[c[0] for c in PLAN_CASES])
def test_plan_refuses_what_would_change_nothing(workdir, argv, fragment, code, capfd):  # noqa: F811
    check(workdir, argv, fragment, capfd, code=code)


def test_plan_names_the_files_it_skips(workdir, tmp_path):  # noqa: F811
    from click.testing import CliRunner

    from bad_input import H100_SCAN
    from memprobe.cli import main

    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "scan.json").write_text(H100_SCAN.read_text())
    (folder / "notes.json").write_text('{"not": "a result"}')
    result = CliRunner().invoke(
        main, ["plan", "--model", "resnet50", "--gpu", "H100", "-p", "fp16", "--results", str(folder)]
    )
    assert result.exit_code == 0, result.output
    assert "warning: skipped" in result.output and "notes.json" in result.output  # as report and guide name them
    assert re.search(r"\| fp16 +\| measured", result.stdout)  # (tabulate's padding goes where 120 columns need it)


def test_a_plan_hits_the_global_batch_asked_for_and_wraps_its_notes(workdir):  # noqa: F811
    """Issue 51: 171 x 2 GPUs x 3 steps = 1026 was recommended for 1024, though 128 x 2 x 4 fits under the cap of 208;
    and the note explaining a split was cut at 120 columns."""
    from click.testing import CliRunner

    from bad_input import REPO
    from memprobe.cli import main

    fsdp = REPO / "reports" / "h200_2gpu_host" / "2x-nvidia-h200_bert-large-fsdp_train_20261127-204943.json"
    argv = ["plan", "-m", "bert-large", "--gpu", "H200", "--gpus", "2", "--strategy", "fsdp", "-p", "bf16"]
    argv += ["--results", str(fsdp)]
    result = CliRunner().invoke(main, [*argv, "--global-batch", "1024", "--format", "json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["rows"]
    assert (row["cap"], row["micro_batch"], row["accumulation_steps"], row["global_batch"]) == (208, 128, 4, 1024)
    result = CliRunner().invoke(main, [*argv, "--global-batch", "1025"])
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= 120 and "are cut to fit" not in result.stdout
    text = " ".join(result.stdout.split())
    assert (
        "bf16: no micro-batch up to the cap 208 splits 1025 over 2 GPUs exactly (it is not a multiple of 2): the "
        "effective global batch is 1026 = 2 GPUs x 171 x 3 steps" in text
    )
