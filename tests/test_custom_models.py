"""Models outside the registry, resolved without torch: timm:NAME, hf:NAME, hf-config:PATH,
FILE.py:FUNC, pkg.mod:FUNC, models.yaml entries of the timm / hf / module families, and their one-line errors.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memprobe.core.records.results import ScanResult, read_result
from memprobe.core.workload.registry import FAMILIES, RegistryError, load_registry
from memprobe.workloads.custom import (
    CustomModelError,
    CustomOptions,
    load_hf_config,
    packaged_hf_configs,
    prepare,
    resolve,
    select_models,
    target_of,
)

REPO = Path(__file__).resolve().parents[1]
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


def error_lines(result):
    return [line for line in result.output.splitlines() if line.startswith("Error")]


def test_importing_memprobe_and_resolving_names_does_not_import_torch():
    code = (
        "import sys, memprobe, memprobe.workloads.custom, memprobe.api, memprobe.cli\n"
        "from memprobe.workloads.custom import resolve\n"
        "resolve('timm:convnext_large'); resolve('hf:gpt2-large'); resolve('examples/my_model.py:build')\n"
        "assert callable(memprobe.find_max_batch) and callable(memprobe.predict_max_batch)\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_custom_families_are_registered():
    assert {"timm", "hf", "module"} <= set(FAMILIES)


# --- names -> workloads --------------------------------------------------------------------------


def test_timm_name():
    w = resolve("timm:convnext_large", CustomOptions(input_size=(3, 384, 384)))
    assert (w.name, w.family, w.unit) == ("timm:convnext_large", "timm", "images")
    assert w.params == {"model": "convnext_large", "input_size": [3, 384, 384], "channels_last": True}
    assert w.optimizer["name"] == "sgd" and w.optimizer["momentum"] == 0.9
    assert resolve("timm:vit_large_patch16_224").params["input_size"] is None  # timm's pretrained_cfg decides
    assert resolve("timm:resnet50", CustomOptions(optimizer="adamw")).optimizer["name"] == "adamw"


def test_hf_name_embeds_the_packaged_config():
    w = resolve("hf:gpt2-large", CustomOptions(seq_len=1024))
    assert (w.family, w.unit, w.optimizer["name"]) == ("hf", "sequences", "adamw")
    config = w.params["config"]
    # GPT-2 large's published hyper-parameters (36 layers, 1280 wide, 20 heads, 50257 tokens, 1024 positions)
    assert (config["n_layer"], config["n_embd"], config["n_head"], config["vocab_size"], config["n_positions"]) == (
        36,
        1280,
        20,
        50257,
        1024,
    )
    assert w.params["task"] == "causal-lm" and w.params["seq_len"] == 1024
    assert w.params["config_source"] == "packaged gpt2-large.json"
    json.dumps(w.to_dict())  # serialisable: it travels to the trial processes and into the result file


def test_packaged_configs():
    assert {"gpt2-large", "bert-large-uncased", "llama-3.2-1b"} <= set(packaged_hf_configs())
    llama, _ = load_hf_config("llama-3.2-1b")
    assert (llama["hidden_size"], llama["num_hidden_layers"], llama["num_key_value_heads"]) == (2048, 16, 8)


def test_hf_config_path(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_GPT2))
    for text in (f"hf-config:{path}", f"hf-config:{tmp_path}"):  # the file, or its folder
        w = resolve(text, CustomOptions(task="seq-cls", seq_len=16))
        assert w.params["config"] == TINY_GPT2 and w.params["task"] == "seq-cls"
        assert w.params["config_source"] == str(path)


def test_hf_name_without_local_config_is_one_line_saying_how(monkeypatch):
    monkeypatch.setattr("memprobe.workloads.custom._cached_hf_config", lambda name: None)
    with pytest.raises(CustomModelError) as info:
        resolve("hf:meta-llama/Llama-3.1-405B")
    message = str(info.value)
    assert "\n" not in message and "downloads nothing" in message and "hf-config:PATH" in message


@pytest.mark.parametrize(
    "text, words",
    [
        ("hf-config:/nonexistent/config.json", "cannot read"),
        ("timm:", "needs a model name"),
        ("./no_such_file.py:build", "no file"),
        ("examples/my_model.py:not-a-name", "expected FILE.py:FUNCTION"),
        ("no_such_package_xyz.mod:build", "no module named"),
    ],
)
def test_bad_names(text, words):
    with pytest.raises(CustomModelError, match=words):
        resolve(text)


def test_not_a_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 4}))
    with pytest.raises(CustomModelError, match="no 'model_type'"):
        resolve(f"hf-config:{path}")


def test_module_targets_are_made_absolute(monkeypatch):
    monkeypatch.chdir(REPO)
    w = resolve("examples/my_model.py:build")
    assert w.family == "module" and w.name == "examples/my_model.py:build"
    assert Path(w.params["target"].rpartition(":")[0]).is_absolute()
    assert w.params["target"] == f"{(Path.cwd() / 'examples' / 'my_model.py').resolve()}:build"
    assert resolve("json:loads").params["target"] == "json:loads"


def test_options_that_do_not_apply_are_refused():
    with pytest.raises(CustomModelError, match="--task"):
        resolve("timm:resnet50", CustomOptions(task="qa"))
    with pytest.raises(CustomModelError, match="--input-size"):
        resolve("hf:gpt2-large", CustomOptions(input_size=(3, 224, 224)))
    with pytest.raises(CustomModelError, match="registry"):
        select_models(load_registry(), "bert-large", CustomOptions(seq_len=128))


def test_select_mixes_registry_and_custom_names():
    chosen = select_models(load_registry(), "toy,timm:resnet50,toy")
    assert [w.name for w in chosen] == ["toy", "timm:resnet50"]
    with pytest.raises(RegistryError, match="timm:NAME"):
        select_models(load_registry(), "nosuch")


def build_here(device, precision):  # for target_of
    return None


def test_target_of_functions():
    assert target_of(build_here) == f"{__name__}:build_here"
    with pytest.raises(CustomModelError, match="top-level function"):
        target_of(lambda device, precision: None)

    def local(device, precision):
        return None

    with pytest.raises(CustomModelError, match="top-level function"):
        target_of(local)


# --- models.yaml entries of the custom families --------------------------------------------------


def test_registry_entries_of_custom_families(tmp_path):
    (tmp_path / "models.yaml").write_text(f"""
convnext:
  family: timm
  unit: images
  params: {{model: convnext_large, input_size: [3, 384, 384]}}
  optimizer: {{name: adamw, lr: 1.0e-4}}
gpt2:
  family: hf
  unit: sequences
  params: {{config: gpt2-large, task: causal-lm, seq_len: 512}}
  optimizer: {{name: adamw, lr: 1.0e-4}}
mine:
  family: module
  unit: samples
  params: {{target: {REPO / "examples" / "my_model.py"}:build}}
  optimizer: {{name: adamw}}
""")
    registry = load_registry(tmp_path / "models.yaml")
    convnext, gpt2, mine = select_models(registry, "convnext,gpt2,mine")
    assert convnext.params["input_size"] == [3, 384, 384]
    assert gpt2.params["config"]["n_layer"] == 36 and gpt2.params["seq_len"] == 512
    assert mine.params["target"].endswith("my_model.py:build")


@pytest.mark.parametrize(
    "family, params, words",
    [
        ("timm", "{input_size: [3, 224, 224]}", "params.model"),
        ("timm", "{model: resnet50, input_size: [224, 224]}", r"\[C, H, W\]"),
        ("hf", "{task: causal-lm}", "params.config"),
        ("hf", "{config: gpt2-large, task: translate}", "unknown task"),
        ("module", "{}", "params.target"),
    ],
)
def test_bad_registry_entries_of_custom_families(tmp_path, family, params, words):
    (tmp_path / "models.yaml").write_text(
        f"m:\n  family: {family}\n  unit: samples\n  params: {params}\n  optimizer: {{name: sgd}}\n"
    )
    with pytest.raises(CustomModelError, match=words):
        prepare(load_registry(tmp_path / "models.yaml")["m"])


# --- the CLI's one-line errors ------------------------------------------------------------------


@pytest.mark.parametrize("command", ["scan", "predict"])
def test_cli_missing_hf_config_is_one_line(run, command, monkeypatch):
    monkeypatch.setattr("memprobe.workloads.custom._cached_hf_config", lambda name: None)
    result = run(
        command,
        "--model",
        "hf:not-packaged-model",
        "--device" if command == "scan" else "--steps",
        "cpu" if command == "scan" else "3",
    )
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = error_lines(result)
    assert "hf-config:PATH" in line


def test_cli_bad_input_size(run):
    result = run("predict", "--model", "timm:resnet50", "--input-size", "224,224")
    assert result.exit_code == 2 and "C,H,W" in result.output


# --- ScanResult conveniences -------------------------------------------------------------------


def test_scan_result_conveniences_on_a_committed_file():
    path = next((REPO / "reports" / "h100").glob("*_bert-large-squad_train_*.json"))
    result = read_result(path)
    first = next(iter(result.precisions.values()))
    assert result.max_batch == first.max_batch and result.max_batch > 0
    assert result.throughput == pytest.approx(first.throughput.samples_per_s)
    again = ScanResult.from_dict(json.loads(result.to_json()))
    assert again.to_dict() == result.to_dict()
    none = ScanResult({"name": "x"}, {}, {})
    assert none.max_batch is None and none.throughput is None


def test_minus_one_is_not_set_for_an_optional_size_but_no_count_a_model_needs(tmp_path):
    """transformers writes -1 for an optional size left to the model (deberta-v3's max_relative_positions)."""
    ok = tmp_path / "deberta.json"
    ok.write_text('{"model_type": "deberta-v2", "max_relative_positions": -1, "num_hidden_layers": 2}')
    config, _ = load_hf_config(str(ok), is_path=True)
    assert config["max_relative_positions"] == -1
    bad = tmp_path / "bad.json"
    bad.write_text('{"model_type": "bert", "num_hidden_layers": -1}')
    with pytest.raises(CustomModelError, match="'num_hidden_layers' is -1; a size or count cannot be negative"):
        load_hf_config(str(bad), is_path=True)
