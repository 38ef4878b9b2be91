"""The laptop install: an installed torchvision that cannot load with this torch is replaced by a
stand-in, so timm and transformers import and `memprobe predict` runs; a working or absent one is left alone.

Each case runs in a fresh interpreter with a fake `torchvision` package first on the path.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
REPO = Path(__file__).resolve().parents[1]

BROKEN = 'raise RuntimeError("operator torchvision::nms does not exist")\n'
WORKING = '__version__ = "0.28.0"\nclass ops:\n    @staticmethod\n    def nms(*a):\n        return "real nms"\n'


def run_with(tmp_path: Path, package: str | None, code: str) -> subprocess.CompletedProcess:
    if package is not None:
        (tmp_path / "torchvision").mkdir()
        (tmp_path / "torchvision" / "__init__.py").write_text(package)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)]),
        "OMP_NUM_THREADS": "1",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),  # where the note is remembered as said: this test's own
    }
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        cwd=tmp_path,
    )


def test_a_torchvision_that_cannot_load_gets_the_stand_in(tmp_path):
    done = run_with(
        tmp_path,
        BROKEN,
        """
        import memprobe.workloads.bert  # a family module that imports transformers: it installs the guard first
        from memprobe.workloads.torchvision_guard import standin_reason
        print("REASON", standin_reason())
        import torchvision
        try:
            torchvision.ops.nms(1, 2, 0.5)
        except RuntimeError as exc:
            print("RAISES", "stand-in" in str(exc))
        from transformers import BertForPreTraining  # what failed on the laptop
        print("BERT ok")
    """,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (
        "REASON the installed torchvision does not load with this torch (RuntimeError: operator torchvision::nms"
        in done.stdout
    )
    assert "RAISES True" in done.stdout and "BERT ok" in done.stdout


def test_timm_imports_with_the_stand_in(tmp_path):
    if importlib.util.find_spec("timm") is None:
        pytest.skip("timm is not installed")
    done = run_with(
        tmp_path,
        BROKEN,
        """
        import memprobe.workloads
        from memprobe.workloads.vision import load_timm
        timm = load_timm()
        print("MODEL", type(timm.create_model("resnet18", pretrained=False)).__name__)
    """,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "MODEL ResNet" in done.stdout


def test_a_working_torchvision_is_used_as_it_is(tmp_path):
    done = run_with(
        tmp_path,
        WORKING,
        """
        from memprobe.workloads.torchvision_guard import ensure_loadable, standin_reason
        ensure_loadable()  # what every family module that imports timm or transformers does first
        import torchvision
        print("REASON", standin_reason(), torchvision.ops.nms())
    """,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "REASON None real nms" in done.stdout


def test_predict_notes_the_stand_in(tmp_path):
    done = run_with(
        tmp_path,
        BROKEN,
        """
        from click.testing import CliRunner
        from memprobe.cli import main
        for _ in range(2):
            result = CliRunner().invoke(main, ["predict", "--model", "toy", "--memory", "8GiB", "--precision", "fp32"])
            print("EXIT", result.exit_code)
            print(result.output)
    """,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("EXIT 0") == 2, done.stdout[-2000:]
    # said by the first command of this environment, not again by the second
    assert done.stdout.count("note: the installed torchvision does not load with this torch") == 1
    assert len(list((tmp_path / "cache" / "memprobe").glob("torchvision-note-*"))) == 1
