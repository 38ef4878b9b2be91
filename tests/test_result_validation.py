"""Result files are checked on reading (types and ranges of every field the tools use): a bad file is one warning
line naming it and what is wrong, the rest is reported, a folder of mixed files never fails as a whole."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from memprobe.cli import main
from memprobe.core.records.results import ResultFileError, find_result_files, read_result

REPO = Path(__file__).resolve().parents[1]
GOOD = (
    REPO / "tests" / "data" / "nvidia-h100-80gb-hbm3_resnet50_train_20261121-184725.json"
)  # a frozen copy: reports/ is tidied
BASE = json.loads(GOOD.read_text())


def _set(data: dict, dotted: str, value) -> dict:
    out = copy.deepcopy(data)
    *path, last = dotted.split(".")
    node = out
    for key in path:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out


# (field, bad value, fragment of the message)
BAD_FIELDS = [
    ("precisions.fp16.max_batch", "lots", "precisions.fp16.max_batch must be an integer >= 0 or null, got 'lots'"),
    ("precisions.fp16.max_batch", -5, "max_batch must be an integer >= 0 or null, got -5"),
    ("precisions.fp16.max_batch", 1.5, "max_batch must be an integer"),
    ("precisions.fp16.max_batch", True, "max_batch must be an integer"),
    ("precisions.fp16.status", "great", "precisions.fp16.status must be one of pending, done, error, interrupted"),
    ("precisions.fp16.status", 3, "status must be one of pending, done, error, interrupted, got 3"),
    ("precisions.fp16.capacity_bytes", "80GB", "capacity_bytes must be an integer >= 1 or null"),
    ("precisions.fp16.capacity_bytes", 0, "capacity_bytes must be an integer >= 1 or null"),
    ("precisions.fp16.throughput", [1, 2], "throughput must be a mapping or null"),
    ("precisions.fp16.throughput.samples_per_s", "fast", "throughput.samples_per_s must be a number >= 0 or null"),
    ("precisions.fp16.throughput.samples_per_s", float("nan"), "samples_per_s must be a number, got nan"),
    ("precisions.fp16.throughput.samples_per_s", -1.0, "samples_per_s must be a number >= 0"),
    ("precisions.fp16.attempts", "many", "attempts must be a list"),
    ("precisions.fp16.attempts.0", 7, "attempts[0] must be a mapping"),
    ("precisions.fp16.attempts.0.batch", "one", "attempts[0].batch must be an integer >= 0"),
    ("precisions.fp16.attempts.0.peak_reserved", -1, "attempts[0].peak_reserved must be an integer >= 0"),
    ("precisions.fp16.memory_model.peak_reserved", 5, "memory_model.peak_reserved must be a mapping"),
    ("precisions.fp16.memory_model.peak_reserved.per_sample_bytes", "x", "per_sample_bytes must be a number"),
    ("precisions.fp16.proof.fits", "yes", "proof.fits must be an integer >= 0 or null"),
    ("precisions.fp16.proof.checks", {}, "proof.checks must be a list"),
    ("precisions.fp16.curve", {}, "curve must be a list"),
    ("precisions.fp16.best_batch", 0, "best_batch must be an integer >= 1 or null"),
    ("precisions.fp16.error", None, "error must be a string"),
    ("precisions.fp16", [], "precision 'fp16' is not a mapping"),
    ("workload.name", 5, "workload.name must be a name of 1 to 100 printable characters without '|', got 5"),
    ("workload.name", "", "workload.name must be a name of 1 to 100 printable characters"),
    ("workload.params", "none", "workload.params must be a mapping"),
    ("environment.gpu", "H100", "environment.gpu must be a mapping"),
    ("environment.gpu.name", 100, "environment.gpu.name must be a name of 1 to 100 printable characters"),
    ("environment.gpu.total_bytes", "80GB", "environment.gpu.total_bytes must be an integer >= 1"),
    ("settings", [], "settings must be a mapping"),
    ("settings.world_size", 0, "settings.world_size must be an integer >= 1"),
    ("settings.precisions", ["fp8"], "settings.precisions[0] must be one of fp32, tf32, fp16, bf16"),
    ("workload.params.axis", "width", "workload.params.axis must be one of batch, seq_len or null, got 'width'"),
    ("precisions.fp16.settings.task.parameters", -1, "precisions.fp16.settings.task.parameters must be an integer"),
    ("precisions.fp16.settings.flops_per_sample", "many", "settings.flops_per_sample must be a number >= 0"),
    ("status", "done!", "status must be one of partial, complete, failed"),
    ("created", 2026, "created must be a date and time (ISO 8601"),
    ("schema_version", "one", "'one' is not a valid schema version"),
    ("schema_version", 0, "0 is not a valid schema version"),
    ("schema_version", True, "True is not a valid schema version"),
    ("schema_version", 99, "schema version 99 is newer than this memprobe reads"),
    ("workload", [], "'workload' must be a mapping"),
]


@pytest.mark.parametrize("field, value, fragment", BAD_FIELDS, ids=[f"{f}={v!r}" for f, v, _ in BAD_FIELDS])
def test_a_bad_field_is_named(tmp_path, field, value, fragment):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_set(BASE, field, value)))
    with pytest.raises(ResultFileError) as info:
        read_result(path)
    assert fragment in str(info.value) and str(path) in str(info.value)
    assert len(str(info.value)) < 400


def test_every_committed_result_file_passes():
    files = [f for f in find_result_files([REPO / "reports"]) if '"memprobe.scan"' in f.read_text()]
    assert len(files) > 30
    for f in files:
        read_result(f)


def test_a_long_bad_value_is_quoted_shortened(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_set(BASE, "precisions.fp16.max_batch", "x" * 10000)))
    with pytest.raises(ResultFileError) as info:
        read_result(path)
    assert len(str(info.value)) < 300


@pytest.fixture
def mixed(tmp_path) -> Path:
    """A folder with two good files and three bad ones."""
    for good in sorted((REPO / "reports" / "h100").glob("*_bert-large_train_*.json"))[:1] + [GOOD]:
        (tmp_path / good.name).write_text(good.read_text())
    (tmp_path / "lots.json").write_text(json.dumps(_set(BASE, "precisions.fp16.max_batch", "lots")))
    (tmp_path / "negative.json").write_text(json.dumps(_set(BASE, "precisions.fp16.max_batch", -5)))
    (tmp_path / "one.json").write_text(json.dumps(_set(BASE, "schema_version", "one")))
    return tmp_path


@pytest.mark.parametrize(
    "argv", [["report"], ["report", "--scans"], ["guide"], ["report", "--llm"], ["report", "--format", "json"]]
)
def test_a_folder_of_mixed_files_reports_the_good_ones_and_names_the_bad(mixed, argv):
    result = CliRunner().invoke(main, argv + [str(mixed)])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning: skipped")]
    assert len(warnings) == 3
    assert any("lots.json" in w and "max_batch" in w for w in warnings)
    assert any("one.json" in w and "not a valid schema version" in w for w in warnings)
    rest = "\n".join(line for line in result.output.splitlines() if not line.startswith("warning: skipped"))
    assert "Traceback" not in result.output and "lots" not in rest and "| -5" not in rest
    if argv != ["report", "--llm"]:
        assert "resnet50" in result.output and "bert-large" in result.output


def test_a_bad_file_among_good_named_files_is_skipped(mixed):
    result = CliRunner().invoke(main, ["report", "--scans", str(mixed / GOOD.name), str(mixed / "negative.json")])
    assert result.exit_code == 0 and "warning: skipped" in result.output and "| -5" not in result.output


def test_only_bad_files_is_one_error_line(mixed):
    result = CliRunner().invoke(main, ["report", str(mixed / "lots.json"), str(mixed / "one.json")])
    assert result.exit_code == 1
    assert [line for line in result.output.splitlines() if line.startswith("Error")] == [
        f"Error: no memprobe result files in {mixed / 'lots.json'}, {mixed / 'one.json'} (2 skipped, above)"
    ]


def test_predict_compare_with_a_bad_file_is_one_line(mixed):
    result = CliRunner().invoke(main, ["predict", "--model", "resnet50", "--compare", str(mixed / "lots.json")])
    assert result.exit_code == 1 and "max_batch must be an integer" in result.output
    assert "Traceback" not in result.output
