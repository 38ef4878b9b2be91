"""The layout's promises: pure modules import without torch, modules stay small and say their job, functions stay
short."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "memprobe"
# Modules that must not import torch: the whole core and compare layers, the CLI (fast, runs on a laptop) and the
# requests it builds, the scan's parent process (it never touches the GPU), predict's allocator model.
PURE = sorted(
    {
        f"memprobe.{layer}.{p.stem}"
        for layer in ("core", "compare", "cli")
        for p in (PACKAGE / layer).glob("*.py")
        if p.stem != "__init__"
    }
    | {
        "memprobe.cli",
        "memprobe.request",
        "memprobe.probe.device",
        "memprobe.probe.search",
        "memprobe.probe.proof",
        "memprobe.probe.scan",
        "memprobe.probe.scan_trials",
        "memprobe.probe.hint",
        "memprobe.probe.runner",
        "memprobe.probe.nothing_fits",
        "memprobe.predict.allocator",
        "memprobe.predict.torch_internals",
    }
)
MAX_LINES = 450
MAX_FUNCTION_LINES = 80  # a function longer than this does more than one job: split it by job


def test_pure_modules_import_with_torch_blocked():
    code = (
        "import sys; sys.modules['torch'] = None\n"  # any `import torch` now raises ImportError
        f"import importlib\nfor m in {PURE!r}: importlib.import_module(m)\n"
        "assert 'torch' not in [k for k, v in sys.modules.items() if v is not None]"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.stat().st_size)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_is_small_and_says_its_job(path: Path):
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_LINES, f"{path.name} has {len(text.splitlines())} lines"
    doc = ast.get_docstring(ast.parse(text))
    assert doc and doc.strip().splitlines()[0].strip(), f"{path.name} has no one-line docstring saying its job"


def _long_functions(text: str) -> list[str]:
    """The functions (methods and nested ones too) in `text` longer than MAX_FUNCTION_LINES, with their length."""
    return [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines, from line {node.lineno})"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and (node.end_lineno or node.lineno) - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def test_no_function_is_longer_than_80_lines():
    long = {str(p.relative_to(PACKAGE)): found for p in _modules() if (found := _long_functions(p.read_text()))}
    assert long == {}, f"split these by job (at most {MAX_FUNCTION_LINES} lines a function): {long}"


def test_the_function_length_check_sees_long_functions():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    assert _long_functions(f"def long():\n{body}\n") == [f"long ({MAX_FUNCTION_LINES + 1} lines, from line 1)"]
    assert _long_functions("class C:\n    def short(self):\n        return 1\n") == []


def test_subsystems_are_folders():
    for sub in ("probe", "predict", "compare", "workloads"):
        assert (PACKAGE / sub / "__init__.py").exists()


def test_no_module_of_the_package_is_named_like_an_api_function():
    # Importing memprobe.<name> binds the module to the package attribute <name>: an API function of that name
    # (memprobe.plan once) would stop being callable after the module's first import.
    import memprobe

    clashes = [n for n in memprobe.__all__ if (PACKAGE / n).is_dir() or (PACKAGE / f"{n}.py").exists()]
    assert clashes == []
