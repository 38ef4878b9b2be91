"""The harness of the bad-input tables (tests/test_bad_input*.py): files the rows name, and the check every row
must pass: one `Error` line a terminal can show, a non-zero exit, no traceback (torch's logged ones included)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from memprobe.cli import main
from memprobe.core.records.results import SCHEMA, SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[1]
H100_SCAN = next((REPO / "reports" / "h100").glob("*_resnet50_train_*.json"))
_SCAN = json.loads(H100_SCAN.read_text())
MAX_LINE = 500  # no line of an error's output is longer (helpers.MAX_ERROR_CHARS plus what click puts around it)


def _scan_with(field: str, value) -> str:
    data = copy.deepcopy(_SCAN)
    *path, last = field.split(".")
    node = data
    for key in path:
        node = node[key]
    node[last] = value
    return json.dumps(data)


# The head of a user's model file (FILE.py:build) the own-model rows write: a TrainTask of a tiny linear model
TASK = """import torch
from torch import nn
from memprobe.workloads.base import TrainTask


class Task(TrainTask):
    def make_batch(self, n):
        return torch.randn(n, 8, device=self.device), torch.randint(0, 2, (n,), device=self.device)

    def loss(self, batch):
        return nn.functional.cross_entropy(self.model(batch[0]), batch[1])


"""

# Files the rows name as {placeholders}: written into the test's temporary folder (None: an empty folder).
FILES = {
    "empty_dir": None,
    "truncated.json": '{"schema": "memprobe.scan", "schema_version": 1, "status": "comp',
    "foreign.json": json.dumps({"name": "not a memprobe file"}),
    "future.json": json.dumps(
        {"schema": SCHEMA, "schema_version": SCHEMA_VERSION + 1, "workload": {}, "environment": {}, "precisions": {}}
    ),
    "binary.json": b"\xff\xfe\x00garbage",
    "list.json": "[1, 2, 3]",
    "lots.json": _scan_with("precisions.fp16.max_batch", "lots"),
    "negative.json": _scan_with("precisions.fp16.max_batch", -5),
    "one.json": _scan_with("schema_version", "one"),
    "nan.json": _scan_with("precisions.fp16.best_samples_per_s", float("nan")),
    "bad_yaml.yaml": "toy:\n  family: toy-mlp\n  params: {a: [1, 2}\n",
    "unknown_family.yaml": "toy:\n  family: no-such-family\n  unit: samples\n  params: {}\n  optimizer: {name: sgd}\n",
    "bad_unit.yaml": "ok:\n  family: toy-mlp\n  unit: samples\n  params: {}\n  optimizer: {name: sgd}\n"
    "toy:\n  family: toy-mlp\n  unit: parsecs\n  params: {}\n  optimizer: {name: sgd}\n",
    "duplicate.yaml": "toy:\n  family: toy-mlp\n  unit: samples\n  params: {}\n  optimizer: {name: sgd}\n"
    "toy:\n  family: toy-mlp\n  unit: samples\n  params: {}\n  optimizer: {name: sgd}\n",
    "params_list.yaml": "toy:\n  family: toy-mlp\n  unit: samples\n  params: [1, 2]\n  optimizer: {name: sgd}\n",
    "not_mapping.yaml": "- just\n- a list\n",
    "unknown_key.yaml": "toy:\n  family: toy-mlp\n  unit: samples\n  params: {}\n  optimizer: {name: sgd}\n  colour: red\n",
    "unknown_type.json": json.dumps({"model_type": "gpt3000", "n_layer": 2}),
    "negative_layers.json": json.dumps({"model_type": "bert", "num_hidden_layers": -3}),
    "exits.py": "import sys\n\ndef build(device, precision):\n    sys.exit(3)\n",
    "exits_on_import.py": "import sys\nsys.exit(5)\n\ndef build(device, precision):\n    pass\n",
    "charts_blocked/max_batch.png/inside": "a folder where a chart file goes",
    "a_file": "not a folder",
}


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """A temporary working directory holding the FILES; the CLI runs from there (not the repository)."""
    for name, content in FILES.items():
        path = tmp_path / name
        if content is None:
            path.mkdir()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def fill(arg: str, workdir: Path) -> str:
    """An argument with its {placeholders} replaced: {H100} a real result file, {tmp} the folder, {name} a file of
    FILES (also inside an argument: hf-config:{name})."""

    def one(found: re.Match) -> str:
        name = found.group(1)
        if name == "H100":
            return str(H100_SCAN)
        return str(workdir) if name == "tmp" else str(workdir / name)

    return re.sub(r"\{([^{}]+)\}", one, arg)


def check(
    workdir: Path,
    argv: list[str],
    fragment: str,
    capfd: pytest.CaptureFixture | None = None,
    code: int | None = None,
) -> None:
    """Run the CLI and assert the bad input gives one short Error line naming `fragment`, a non-zero exit (`code`
    where given: README's exit codes), and no traceback (also none that torch logs straight to the process's
    stderr, when `capfd` is given)."""
    result = CliRunner().invoke(main, [fill(a, workdir) for a in argv])
    assert isinstance(result.exception, SystemExit), f"traceback instead of an error: {result.exception!r}"
    assert result.exit_code != 0, result.output
    assert code is None or result.exit_code == code, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1, result.output
    assert fragment in result.output, result.output
    assert max(len(line) for line in result.output.splitlines()) <= MAX_LINE, result.output
    if capfd is not None:
        logged = capfd.readouterr()
        assert "Traceback" not in logged.err + logged.out, logged.err[-2000:]
