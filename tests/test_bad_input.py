"""Every CLI option's bad values, tried as a new user would: each is a one-line error and a non-zero exit,
never a traceback (issue 16). One table; each row runs the CLI through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from memprobe.cli import main
from memprobe.results import SCHEMA, SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[1]
H100_SCAN = next((REPO / "reports" / "h100").glob("*_resnet50_train_*.json"))

# Files the rows name as {placeholders}: written into the test's temporary folder.
FILES = {
    "empty_dir": None,
    "truncated.json": '{"schema": "memprobe.scan", "schema_version": 1, "status": "comp',
    "foreign.json": json.dumps({"name": "not a memprobe file"}),
    "future.json": json.dumps({"schema": SCHEMA, "schema_version": SCHEMA_VERSION + 1, "workload": {}, "environment": {},
                               "precisions": {}}),
    "binary.json": b"\xff\xfe\x00garbage",
    "list.json": "[1, 2, 3]",
    "bad_yaml.yaml": "toy:\n  family: toy-mlp\n  params: {a: [1, 2}\n",
    "unknown_family.yaml": "toy:\n  family: no-such-family\n  unit: samples\n  params: {}\n  optimizer: {name: sgd}\n",
    "bad_unit.yaml": "ok:\n  family: toy-mlp\n  unit: samples\n  params: {}\n  optimizer: {name: sgd}\n"
                     "toy:\n  family: toy-mlp\n  unit: parsecs\n  params: {}\n  optimizer: {name: sgd}\n",
    "duplicate.yaml": "toy:\n  family: toy-mlp\n  unit: samples\n  params: {}\n  optimizer: {name: sgd}\n"
                      "toy:\n  family: toy-mlp\n  unit: samples\n  params: {}\n  optimizer: {name: sgd}\n",
    "params_list.yaml": "toy:\n  family: toy-mlp\n  unit: samples\n  params: [1, 2]\n  optimizer: {name: sgd}\n",
    "not_mapping.yaml": "- just\n- a list\n",
    "unknown_key.yaml": "toy:\n  family: toy-mlp\n  unit: samples\n  params: {}\n  optimizer: {name: sgd}\n  colour: red\n",
}

# (id, argv, a fragment the one-line error must contain)
CASES = [
    # --model
    ("scan-unknown-model", ["scan", "--model", "gpt-17"], "unknown model 'gpt-17'"),
    ("scan-empty-model", ["scan", "--model", ","], "no model given"),
    ("predict-unknown-model", ["predict", "--model", "resnet5"], "unknown model 'resnet5'"),
    # --precision
    ("scan-bad-precision", ["scan", "--model", "toy", "--precision", "fp8"], "unknown precision fp8"),
    ("scan-empty-precision", ["scan", "--model", "toy", "--precision", ","], "unknown precision (none)"),
    ("predict-bad-precision", ["predict", "--model", "toy", "--precision", "int4"], "unknown precision(s) int4"),
    ("report-bad-precision", ["report", "{H100}", "--precision", "fp64"], "unknown precision(s) fp64"),
    # --mode, --device, --format
    ("scan-bad-mode", ["scan", "--model", "toy", "--mode", "finetune"], "'finetune' is not one of"),
    ("scan-bad-device", ["scan", "--model", "toy", "--device", "tpu"], "'tpu' is not one of"),
    ("report-bad-format", ["report", "{H100}", "--format", "xlsx"], "'xlsx' is not one of"),
    ("guide-bad-format", ["guide", "--format", "pdf"], "'pdf' is not one of"),
    # batch sizes and counts
    ("scan-batch-zero", ["scan", "--model", "toy", "--batch", "0"], "batch sizes must be at least 1"),
    ("scan-batch-negative", ["scan", "--model", "toy", "--batch", "8,-4"], "batch sizes must be at least 1"),
    ("scan-batch-garbage", ["scan", "--model", "toy", "--batch", "lots"], "expected comma-separated integers"),
    ("scan-batch-float", ["scan", "--model", "toy", "--batch", "1.5"], "expected comma-separated integers"),
    ("scan-steps-too-few", ["scan", "--model", "toy", "--steps", "2"], "--steps"),
    ("scan-steps-garbage", ["scan", "--model", "toy", "--steps", "three"], "--steps"),
    ("scan-warmup-negative", ["scan", "--model", "toy", "--warmup", "-1"], "--warmup"),
    ("scan-timed-steps-zero", ["scan", "--model", "toy", "--timed-steps", "0"], "--timed-steps"),
    ("scan-max-batch-zero", ["scan", "--model", "toy", "--max-batch", "0"], "--max-batch"),
    ("scan-max-trials-one", ["scan", "--model", "toy", "--max-trials", "1"], "--max-trials"),
    ("scan-soak-negative", ["scan", "--model", "toy", "--soak", "-1"], "--soak"),
    ("scan-soak-garbage", ["scan", "--model", "toy", "--soak", "forever"], "--soak"),
    ("predict-steps-too-few", ["predict", "--model", "toy", "--steps", "1"], "--steps"),
    # memory sizes and caps
    ("predict-memory-zero", ["predict", "--model", "bert-large", "--memory", "0"], "must be larger than 0"),
    ("predict-memory-zero-gib", ["predict", "--model", "toy", "--memory", "0GiB"], "must be larger than 0"),
    ("predict-memory-negative", ["predict", "--model", "toy", "--memory", "-24GiB"], "not a size"),
    ("predict-memory-garbage", ["predict", "--model", "toy", "--memory", "lots"], "not a size: 'lots'"),
    ("predict-memory-unit", ["predict", "--model", "toy", "--memory", "24 parsecs"], "not a size"),
    ("predict-memory-empty", ["predict", "--model", "toy", "--memory", ","], "give at least one memory size"),
    ("predict-unknown-gpu", ["predict", "--model", "toy", "--gpu", "H900"], "unknown GPU 'H900'"),
    ("scan-memory-cap-garbage", ["scan", "--model", "toy", "--memory-cap", "big"], "not a size: 'big'"),
    ("scan-memory-cap-zero", ["scan", "--model", "toy", "--memory-cap", "0"], "--memory-cap must be larger than 0"),
    ("scan-memory-cap-on-cpu", ["scan", "--model", "toy", "--device", "cpu", "--cpu-memory-budget", "8MiB",
                                "--memory-cap", "1GiB"], "needs --device cuda"),
    ("scan-cpu-without-budget", ["scan", "--model", "toy", "--device", "cpu"], "needs --cpu-memory-budget"),
    ("scan-cpu-budget-garbage", ["scan", "--model", "toy", "--device", "cpu", "--cpu-memory-budget", "x"],
     "not a size: 'x'"),
    ("scan-cpu-budget-zero", ["scan", "--model", "toy", "--device", "cpu", "--cpu-memory-budget", "0MiB"],
     "--cpu-memory-budget must be larger than 0"),
    # malformed models.yaml: the file, the entry and its line are named
    ("models-bad-yaml", ["list", "--models", "{bad_yaml.yaml}"], "line 3"),
    ("models-unknown-family", ["scan", "--model", "toy", "--models", "{unknown_family.yaml}"],
     "entry 'toy' (line 1): unknown family 'no-such-family'"),
    ("models-bad-unit", ["predict", "--model", "toy", "--models", "{bad_unit.yaml}"], "entry 'toy' (line 6): unit"),
    ("models-duplicate", ["list", "--models", "{duplicate.yaml}"], "line 6: duplicate entry 'toy' (first at line 1)"),
    ("models-params-list", ["list", "--models", "{params_list.yaml}"], "entry 'toy' (line 1): params must be a mapping"),
    ("models-not-mapping", ["list", "--models", "{not_mapping.yaml}"], "not_mapping.yaml"),
    ("models-unknown-key", ["list", "--models", "{unknown_key.yaml}"], "entry 'toy' (line 1)"),
    ("models-missing-file", ["list", "--models", "{tmp}/nowhere.yaml"], "nowhere.yaml"),
    # result files
    ("report-missing-file", ["report", "{tmp}/nowhere.json"], "nowhere.json: cannot read"),
    ("report-truncated", ["report", "{truncated.json}"], "truncated.json: not a JSON file"),
    ("report-foreign", ["report", "{foreign.json}"], "not a memprobe result file"),
    ("report-future-schema", ["report", "{future.json}"], "is newer than this memprobe reads"),
    ("report-binary", ["report", "{binary.json}"], "binary.json: not a JSON file"),
    ("report-list", ["report", "{list.json}"], "not a memprobe result file"),
    ("report-empty-folder", ["report", "{empty_dir}"], "no memprobe result files in"),
    ("report-scans-empty-folder", ["report", "--scans", "{empty_dir}"], "no memprobe result files in"),
    ("report-unknown-reference", ["report", "{H100}", "--reference", "Voodoo 2"], "reference GPU 'Voodoo 2'"),
    ("guide-empty-folder", ["guide", "{empty_dir}"], "no memprobe result files in"),
    ("guide-future-schema", ["guide", "{future.json}"], "is newer than this memprobe reads"),
    ("predict-compare-foreign", ["predict", "--model", "toy", "--compare", "{foreign.json}"], "not a memprobe result file"),
    ("predict-compare-other-model", ["predict", "--model", "toy", "--compare", "{H100}"], "is a scan of resnet50, not of toy"),
    ("predict-compare-missing", ["predict", "--model", "toy", "--compare", "{tmp}/gone.json"], "does not exist"),
    # budgets
    ("guide-budget-negative", ["guide", "--budget", "-100"], "--budget"),
    ("guide-budget-garbage", ["guide", "--budget", "cheap"], "--budget"),
    # relative paths, run from another working directory
    ("relative-report-path", ["report", "reports/h100"], "reports/h100"),
    ("relative-models-path", ["list", "--models", "models.yaml"], "models.yaml"),
    ("relative-compare-path", ["predict", "--model", "resnet50", "--compare", "reports/h100/x.json"], "does not exist"),
]


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """A temporary working directory holding the FILES; the CLI runs from there (not the repository)."""
    for name, content in FILES.items():
        path = tmp_path / name
        if content is None:
            path.mkdir()
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _fill(arg: str, workdir: Path) -> str:
    if arg == "{H100}":
        return str(H100_SCAN)
    if arg.startswith("{tmp}"):
        return str(workdir) + arg[len("{tmp}"):]
    if arg.startswith("{") and arg.endswith("}"):
        return str(workdir / arg[1:-1])
    return arg


@pytest.mark.parametrize("argv, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_a_non_zero_exit(workdir, argv, fragment):
    result = CliRunner().invoke(main, [_fill(a, workdir) for a in argv])
    assert isinstance(result.exception, SystemExit), f"traceback instead of an error: {result.exception!r}"
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1, result.output
    assert fragment in result.output, result.output
