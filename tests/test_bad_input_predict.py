"""`memprobe predict`'s bad inputs, tried as a new user would: each is one clear `Error` line and a non-zero exit,
never a traceback, not even one torch logs (harness: tests/bad_input.py)."""

from __future__ import annotations

import json

import pytest

from bad_input import H100_SCAN, REPO, TASK, check, fill, workdir  # noqa: F401  (workdir is a fixture)

_SCAN = json.loads(H100_SCAN.read_text())

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
    ("steps-unbounded", P + ["--steps", "100000"], "must be at most 10, got 100,000"),
    ("steps-zero", P + ["--steps", "0"], "--steps"),
    ("steps-garbage", P + ["--steps", "three"], "--steps"),
    ("gpus-zero", P + ["--gpus", "0"], "--gpus"),
    ("gpus-huge", P + ["--gpus", "100000"], "--gpus': must be at most 1,024, got 100,000"),
    ("strategy-without-gpus", P + ["--strategy", "fsdp"], "--strategy has no effect without --gpus N > 1"),
    ("strategy-unknown", P + ["--gpus", "2", "--strategy", "zero3"], "unknown strategy zero3"),
    ("infer-on-several-gpus", P + ["--gpus", "2", "--mode", "infer"], "leave --mode at train"),
    # LLM variants
    ("batch-without-seq-len-search", P + ["--batch", "5"], "--batch has no effect without --search seq-len"),
    (
        "seq-len-search-batch-absurd",
        LLAMA + ["--search", "seq-len", "--batch", "99999999999"],
        "must be at most 65,536, got 99,999,999,999",
    ),
    ("seq-len-search-batch-zero", LLAMA + ["--search", "seq-len", "--batch", "0"], "--batch"),
    ("seq-len-absurd", LLAMA + ["--seq-len", "99999999999999"], "must be at most 1,048,576, got 99,999,999,999,999"),
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


# --- your own model: every mistake one line that names it and the fix, exit 1 (a bad model), never exit 0 ---------

_MODEL = "Task(nn.Linear(8, 2).to(device), {'name': 'adamw'}, device)"
_ENTRY = "  unit: samples\n  optimizer: {name: sgd}\n"
OWN_FILES = {
    "hangs.py": "import time\n\ndef build(device, precision):\n    while True:\n        time.sleep(0.1)\n",
    "hangs_in_batch.py": TASK + "class Slow(Task):\n    def make_batch(self, n):\n        while True:\n"
    "            try:\n                import time; time.sleep(0.1)\n            except Exception:\n                pass\n\n"
    "def build(device, precision):\n    return Slow(nn.Linear(8, 2).to(device), {'name': 'adamw'}, device)\n",
    "hard_exit.py": "import os\n\ndef build(device, precision):\n    os._exit(0)\n",
    "hard_exit_in_loss.py": TASK + "class Bye(Task):\n    def loss(self, batch):\n        import os; os._exit(0)\n\n"
    "def build(device, precision):\n    return Bye(nn.Linear(8, 2).to(device), {'name': 'adamw'}, device)\n",
    "a_class.py": TASK + "class build(Task):\n    def __init__(self, device, precision):\n"
    "        super().__init__(nn.Linear(8, 2).to(device), {'name': 'adamw'}, device)\n",
    "no_arguments.py": TASK + "def build():\n    return None\n",
    "optimizer_string.py": TASK + "def build(device, precision):\n"
    "    return Task(nn.Linear(8, 2).to(device), 'adamw', device)\n",
    "no_make_batch.py": "from torch import nn\nfrom memprobe.workloads.base import TrainTask\n\n"
    "def build(device, precision):\n    return TrainTask(nn.Linear(8, 2).to(device), {'name': 'adamw'}, device)\n",
    "interrupts_itself.py": "def build(device, precision):\n    raise KeyboardInterrupt\n",
    "interrupts_in_batch.py": TASK
    + "class Stop(Task):\n    def make_batch(self, n):\n        raise KeyboardInterrupt\n\n"
    "def build(device, precision):\n    return Stop(nn.Linear(8, 2).to(device), {'name': 'adamw'}, device)\n",
    "model.txt": TASK + f"def build(device, precision):\n    return {_MODEL}\n",
    "layers_fraction.json": '{"model_type": "gpt2", "n_layer": 2.5, "n_embd": 64, "n_head": 4, "vocab_size": 100}',
    "layers_quoted.json": '{"model_type": "gpt2", "n_layer": "2", "n_embd": 64, "n_head": 4, "vocab_size": 100}',
    "layers_zero.json": '{"model_type": "gpt2", "n_layer": 0, "n_embd": 64, "n_head": 4, "vocab_size": 100}',
    "layers_absurd.json": '{"model_type": "gpt2", "n_layer": 1000000000, "n_embd": 64, "n_head": 4}',
    "layers_absurd.yaml": "l:\n  family: llama-causal-lm\n  params: {hidden: 64, layers: 99999999, heads: 4, ffn: 8, "
    "vocab: 9}\n" + _ENTRY,
    "heads_zero.json": '{"model_type": "bert", "num_hidden_layers": 2, "num_attention_heads": 0}',
    "heads_indivisible.json": '{"model_type": "gpt2", "n_layer": 2, "n_embd": 100, "n_head": 3, "vocab_size": 100}',
    "no_params.yaml": "toy:\n  family: toy-mlp\n" + _ENTRY,
    "unknown_param.yaml": "toy:\n  family: toy-mlp\n  params: {features: 8, hidden: 8, classes: 2, hiden: 3}\n"
    + _ENTRY,
    "size_quoted.yaml": "v:\n  family: timm-classifier\n  params: {model: resnet18, image_size: '224'}\n" + _ENTRY,
    "layers_negative.yaml": "t:\n  family: toy-mlp\n  params: {features: 8, hidden: 8, classes: 2, layers: -1}\n"
    + _ENTRY,
    "flag_a_string.yaml": "t:\n  family: transformer-translation\n  params: {pre_norm: 'yes'}\n" + _ENTRY,
    # issue 51
    "type_number.json": '{"model_type": 7, "num_hidden_layers": 2}',
    "llava.json": json.dumps(
        {
            "model_type": "llava",
            "text_config": {
                "model_type": "llama",
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "intermediate_size": 128,
                "vocab_size": 100,
            },
            "vision_config": {
                "model_type": "clip_vision_model",
                "hidden_size": 32,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "intermediate_size": 64,
                "image_size": 32,
                "patch_size": 8,
            },
        }
    ),  # fmt: skip
    "bert_tiny.json": '{"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4}',
    "only_fp16.json": json.dumps({**_SCAN, "precisions": {"fp16": _SCAN["precisions"]["fp16"]}}),
    "failed_fp16.json": json.dumps(
        {**_SCAN, "precisions": {"fp16": {"precision": "fp16", "status": "error", "stop": "error", "error": "boom"}}}
    ),
}
CKPT_SCAN = REPO / "reports" / "h100_llm" / "nvidia-h100-80gb-hbm3_llama-8b-ckpt_train_20261123-123956.json"
LIMIT = "MEMPROBE_TIME_LIMIT"
M = ["--memory", "8GiB", "-p", "fp32"]

# (id, argv, a fragment the one-line error must contain, the exit code, environment)
OWN_CASES = [
    ("build-never-returns", ["--model", "{hangs.py}:build"], "did not finish within 2 s", 1, {LIMIT: "2"}),
    (
        "make-batch-never-returns",
        ["--model", "{hangs_in_batch.py}:build"],
        "did not finish within 2 s",
        1,
        {LIMIT: "2"},
    ),
    ("time-limit-garbage", ["--model", "toy"], "MEMPROBE_TIME_LIMIT='soon'", 1, {LIMIT: "soon"}),
    ("build-calls-os-exit", ["--model", "{hard_exit.py}:build"], "hard_exit.py:build called os._exit(0)", 1, {}),
    ("loss-calls-os-exit", ["--model", "{hard_exit_in_loss.py}:build"], "loss called os._exit(0)", 1, {}),
    ("build-is-a-class", ["--model", "{a_class.py}:build"], "is a class, not a build function", 1, {}),
    (
        "build-takes-nothing",
        ["--model", "{no_arguments.py}:build"],
        "cannot be called as build(device, precision)",
        1,
        {},
    ),
    (
        "optimizer-a-string",
        ["--model", "{optimizer_string.py}:build"],
        "the task's optimizer is 'adamw'; give a mapping",
        1,
        {},
    ),
    ("task-without-make-batch", ["--model", "{no_make_batch.py}:build"], "does not define make_batch and loss", 1, {}),
    (
        "build-raises-keyboard-interrupt",
        ["--model", "{interrupts_itself.py}:build"],
        "raised KeyboardInterrupt (no Ctrl-C came)",
        1,
        {},
    ),
    (
        "make-batch-raises-keyboard-interrupt",
        ["--model", "{interrupts_in_batch.py}:build"],
        "raised KeyboardInterrupt (no Ctrl-C",
        1,
        {},
    ),
    ("build-in-a-txt-file", ["--model", "{model.txt}:build"], "model.txt is not a .py file", 1, {}),
    (
        "hf-config-fractional-layers",
        ["--model", "hf-config:{layers_fraction.json}"],
        "'n_layer' is 2.5; a size or count is a whole number",
        1,
        {},
    ),
    ("hf-config-quoted-layers", ["--model", "hf-config:{layers_quoted.json}"], "'n_layer' is '2', a string", 1, {}),
    (
        "hf-config-no-layers",
        ["--model", "hf-config:{layers_zero.json}"],
        "'n_layer' is 0; a model needs at least 1",
        1,
        {},
    ),
    (
        "hf-config-absurd-layers",
        ["--model", "hf-config:{layers_absurd.json}"],
        "'n_layer' is 1,000,000,000; no model has more than 10,000 layers",
        1,
        {},
    ),
    (
        "models-absurd-layers",
        ["--model", "l", "--models", "{layers_absurd.yaml}"],
        "params.layers must be at most",
        1,
        {},
    ),
    ("hf-config-no-heads", ["--model", "hf-config:{heads_zero.json}"], "'num_attention_heads' is 0", 1, {}),
    (
        "hf-config-heads-do-not-divide",
        ["--model", "hf-config:{heads_indivisible.json}"],
        "n_embd 100 is not divisible by n_head 3",
        1,
        {},
    ),
    (
        "models-entry-without-params",
        ["--model", "toy", "--models", "{no_params.yaml}"],
        "needs params features, hidden, classes",
        1,
        {},
    ),
    (
        "models-unknown-param",
        ["--model", "toy", "--models", "{unknown_param.yaml}"],
        "params hiden is not taken by family 'toy-mlp'",
        1,
        {},
    ),
    (
        "models-image-size-quoted",
        ["--model", "v", "--models", "{size_quoted.yaml}"],
        "params.image_size must be an integer, got '224' (quoted",
        1,
        {},
    ),
    (
        "models-negative-layers",
        ["--model", "t", "--models", "{layers_negative.yaml}"],
        "params.layers must be at least 1, got -1",
        1,
        {},
    ),
    (
        "models-flag-a-string",
        ["--model", "t", "--models", "{flag_a_string.yaml}"],
        "params.pre_norm must be true or false",
        1,
        {},
    ),
    # options that do nothing to forward passes, and card names: README's exit codes
    (
        "infer-optimizer",
        ["--model", "timm:resnet18", "--mode", "infer", "--optimizer", "adam"],
        "--optimizer has no effect with --mode infer",
        2,
        {},
    ),
    (
        "infer-lora",
        ["--model", "llama-1b", "--mode", "infer", "--lora", "16"],
        "--lora has no effect with --mode infer",
        2,
        {},
    ),
    (
        "infer-checkpointing",
        ["--model", "llama-1b", "--mode", "infer", "--checkpointing"],
        "--checkpointing has no effect",
        2,
        {},
    ),
    (
        "gpu-a-size",
        ["--model", "toy", "--gpu", "80GB"],
        "'80GB' is a memory size, not a card name: `memprobe predict --memory 80GB`",
        1,
        {},
    ),
    ("gpu-unknown-exits-1", ["--model", "toy", "--gpu", "H900"], "--gpu: unknown GPU 'H900'", 1, {}),
    # issue 51: the reason, not a wrong one or a page of class names
    ("hf-config-model-type-a-number", ["--model", "hf-config:{type_number.json}"], "'model_type' is 7, not a", 1, {}),
    (
        "hf-config-multimodal",
        ["--model", "hf-config:{llava.json}"],
        "LlavaConfig has no causal-lm head in transformers",
        1,
        {},
    ),
    (
        "hf-config-task-it-lacks",
        ["--model", "hf-config:{bert_tiny.json}", "--task", "seq2seq"],
        "it has causal-lm, masked-lm, seq-cls, qa: give --task causal-lm",
        1,
        {},
    ),
    (
        "timm-hf-hub",
        ["--model", "timm:hf-hub:timm/vit_base_patch16_224.augreg_in21k"],
        "which memprobe does not (it builds the architecture with random weights, offline): give the architecture, "
        "e.g. timm:vit_base_patch16_224",
        1,
        {},
    ),
    ("timm-unknown", ["--model", "timm:qwertyuiop_zz"], "list_models('*qwertyuiop*'))\"` lists names like it", 1, {}),
    # predict --compare: why no comparison would be shown
    (
        "compare-no-row-for-the-precision",
        ["--model", "resnet50", "--compare", "{only_fp16.json}"],
        "--compare: nothing in {only_fp16.json} to compare with: it has no fp32 result (it holds fp16)",
        1,
        {},
    ),
    (
        "compare-its-only-precision-failed",
        ["--model", "resnet50", "--compare", "{failed_fp16.json}", "--memory", "8GiB", "-p", "fp16"],
        "its fp16 ended before any trial to compare with (boom)",
        1,
        {},
    ),
    (
        "compare-a-checkpointing-scan",
        ["--model", "llama-8b", "-p", "bf16", "--memory", "80GiB", "--compare", str(CKPT_SCAN)],
        "is a scan of llama-8b+ckpt, not of llama-8b; to predict what it measured, add --checkpointing",
        1,
        {},
    ),
]


@pytest.fixture
def own_files(workdir):  # noqa: F811
    for name, content in OWN_FILES.items():
        (workdir / name).write_text(content)
    return workdir


@pytest.mark.parametrize("argv, fragment, code, env", [c[1:] for c in OWN_CASES], ids=[c[0] for c in OWN_CASES])
def test_own_model_mistakes_are_one_line_with_the_fix(own_files, monkeypatch, capfd, argv, fragment, code, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = argv if any(a in argv for a in ("--memory", "--gpu")) else argv + M
    check(own_files, ["predict", *args], fill(fragment, own_files), capfd, code=code)


# --- a capped or impossible answer is labelled, with the memory it would need ---------------------------------------


def test_a_capped_or_impossible_max_batch_is_labelled(workdir):  # noqa: F811
    from click.testing import CliRunner

    from memprobe.cli import main

    # toy fits 8 GiB at every batch predict tries; with nothing subtracted, 16 MiB holds not even its weights' copies
    result = CliRunner().invoke(
        main, ["predict", "--model", "toy", "-p", "fp32", "--memory", "8GiB,16MiB", "--overhead", "0"]
    )
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if line.startswith("| fp32"))
    assert [c.strip() for c in row.split("|")[4:6]] == ["65536+ (cap)", "0"]
    text = " ".join(result.stdout.split())
    assert (
        "fp32: the search stops at batch 65536, which fits 8GiB (8.00 GiB usable): the max batch is 65536 or more"
        in text
    )
    assert "(65536 needs 0." in text
    assert "fp32: batch 1 needs 0.0" in text and "more than 16MiB (0.02 GiB usable) holds: max batch 0." in text
    assert row.split("|")[3].strip() not in ("0", "0.000")  # the tiny per-sample slope is not shown as 0
    lines = result.stdout.splitlines()
    labels = lines[
        max(i for i, line in enumerate(lines) if line.startswith("|")) + 1 : lines.index(
            next(line for line in lines if line.startswith("static / per sample"))
        )
    ]
    assert any(labels) and max(len(line) for line in labels) <= 120  # the labels wrap at 120 columns


def test_a_size_given_twice_is_predicted_once():
    from click.testing import CliRunner

    from memprobe.cli import main

    result = CliRunner().invoke(main, ["predict", "--model", "toy", "-p", "fp32", "--memory", "24GiB,24GiB,24 GiB"])
    assert result.exit_code == 0, result.output
    header = next(line for line in result.stdout.splitlines() if line.startswith("| precision"))
    assert header.count("predicted max batch") == 1 and result.stdout.count("Usable memory, 24GiB") == 1


def test_a_batch_that_ignores_n_is_pointed_out(own_files):
    from click.testing import CliRunner

    from memprobe.cli import main

    (own_files / "ignores_n.py").write_text(
        TASK + "class Fixed(Task):\n    def make_batch(self, n):\n        return super().make_batch(4)\n\n"
        "def build(device, precision):\n    return Fixed(nn.Linear(8, 2).to(device), {'name': 'adamw'}, device)\n"
    )
    result = CliRunner().invoke(main, ["predict", "--model", "ignores_n.py:build", *M])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "65536+ (cap)" in result.stdout
    assert (
        "fp32: the trial's memory does not grow with the batch (0 bytes per sample): does the model's make_batch(n) make n samples?"
        in text
    )
