"""Imports only go down the layers, for every import in every module (inside functions too):

    cli, api                   (the top: anything below)
    request                    (scan's, predict's and plan's typed requests, built one way for cli and api)
    planning                   (plan's rows: measured from result files, predicted by predict)
    probe | predict | compare  (probe and predict never import each other; compare reads records: core only)
    training                   (the step, mixed precision, the DDP/FSDP wrapper, FLOP counting)
    workloads
    core                       (records and rules; no torch)

A child process started by module name (`python -m memprobe.predict.need`) is not an import: that is how probe
uses predict's trace without depending on it.

Within probe, only probe/child/ (what runs in a trial process or a torchrun rank) imports torch: the scan's own
process never does, so it starts fast and holds no GPU memory. And probe/child/ imports nothing of probe outside it:
a trial process or a rank needs only what lies below probe (core, workloads, training) and the child folder, and the
messages between both sides are core's (core/process/protocol.py, core/process/rank_record.py).

The tests have a rule of their own: no file in tests/ imports a test module (test_*). The fakes and helpers that
several test modules share live in tests/fakes.py, the fixtures in tests/conftest.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "memprobe"
TESTS = Path(__file__).resolve().parent

# What each layer may import (besides itself and the standard library).
ALLOWED = {
    "core": set(),
    "workloads": {"core"},
    "training": {"core", "workloads"},
    "probe": {"core", "workloads", "training"},
    "predict": {"core", "workloads", "training"},
    "compare": {"core"},
    "request": {"core", "workloads", "training", "probe", "predict", "planning"},
    "cli": {"core", "workloads", "training", "probe", "predict", "compare", "planning", "request", "api"},
    "api": {"core", "workloads", "training", "probe", "predict", "compare", "planning", "request"},
    "planning": {"core", "workloads", "training", "predict", "compare"},
}
ROOT_NAMES = {"__version__"}  # the only names a layer may take from the package root (memprobe/__init__.py)


def _layer(module: str) -> str:
    """memprobe.probe.scan -> probe; memprobe.api -> api; memprobe / memprobe.__main__ -> the root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] != "__main__" else "root"


def _module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def memprobe_imports(path: Path, root: Path = PACKAGE) -> list[tuple[int, str, list[str]]]:
    """(line, imported module, names) for every import of memprobe in the file, at any depth."""
    tree = ast.parse(path.read_text())
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names if a.name.split(".")[0] == "memprobe"]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative: resolve against the file's package
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([module] if module else []))
            if module.split(".")[0] != "memprobe":
                continue
            names = [a.name for a in node.names]
            if module == "memprobe" and not set(names) <= ROOT_NAMES:
                found += [(node.lineno, f"memprobe.{n}", []) for n in names]  # `from memprobe import api`
            elif module.count(".") == 1 and _layer(module) in ALLOWED and module.split(".")[1] in ALLOWED:
                # `from memprobe.core import outcomes`: the submodules are what is imported
                found += [(node.lineno, f"{module}.{n}", []) for n in names]
            else:
                found.append((node.lineno, module, names))
    return found


def violations(package: Path = PACKAGE) -> list[str]:
    """Every import that goes up or sideways, as 'file:line: layer imports module'."""
    out = []
    for path in sorted(package.rglob("*.py")):
        layer = _layer(_module_name(path, package))
        for line, module, names in memprobe_imports(path, package):
            target = _layer(module)
            if target == layer or (module == "memprobe" and set(names) <= ROOT_NAMES):
                continue
            if layer == "root":  # memprobe/__init__.py and __main__.py: the entry points, on top of everything
                continue
            if target not in ALLOWED.get(layer, set()):
                out.append(f"{path.relative_to(package.parent)}:{line}: {layer} imports {module}")
    return out


def test_every_import_goes_down_the_layers():
    assert violations() == []


def test_the_layers_have_no_cycle():
    """The allowed table itself is a DAG, so no chain of allowed imports comes back."""

    def reaches(start: str, goal: str, seen: frozenset = frozenset()) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in ALLOWED.get(start, ()))

    assert [layer for layer in ALLOWED if reaches(layer, layer)] == []
    assert not reaches("probe", "predict") and not reaches("predict", "probe")


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from memprobe.predict.need import trial_need_bytes\n", ["probe imports memprobe.predict.need"]),
        ("def f():\n    from memprobe.cli import main\n", ["probe imports memprobe.cli.main"]),  # inside a function
        ("import memprobe.compare.guide\n", ["probe imports memprobe.compare.guide"]),
        ("from memprobe import api\n", ["probe imports memprobe.api"]),
        ("from ...predict import summary\n", ["probe imports memprobe.predict.summary"]),  # relative, two levels up
        ("from memprobe.core.text.units import gib\nfrom memprobe import __version__\n", []),
    ],
)
def test_the_check_catches_an_import_that_goes_the_wrong_way(tmp_path, source, expected):
    (tmp_path / "memprobe" / "probe" / "distributed").mkdir(parents=True)
    (tmp_path / "memprobe" / "probe" / "distributed" / "bad.py").write_text(source)
    assert [v.split(": ", 1)[1] for v in violations(tmp_path / "memprobe")] == expected


# --- tests/: no test module imports another -------------------------------------------------------------------


def imports_of_test_modules(folder: Path = TESTS) -> list[str]:
    """Every import of a test module (test_*) by a file under `folder`, at any depth, as 'file:line: imports name'.
    importlib.import_module and __import__ of a literal name count too."""
    out = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module] if node.module else [a.name for a in node.names]  # `from . import test_x`
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names = [node.args[0].value]
            else:
                continue
            out += [
                f"{path.relative_to(folder)}:{node.lineno}: imports {name}"
                for name in names
                if name.split(".")[0].startswith("test_")
            ]
    return out


def test_no_test_module_imports_another():
    """A test module is for pytest to collect: importing one from another ties collection (and xdist's scheduling)
    to its import side effects, and hides which names are shared. Shared fakes go in tests/fakes.py."""
    assert imports_of_test_modules() == []


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from test_scan import World\n", ["test_new.py:1: imports test_scan"]),
        ("import pytest\n\n\ndef f():\n    import test_scan\n", ["test_new.py:5: imports test_scan"]),
        ("from .test_scan import World\n", ["test_new.py:1: imports test_scan"]),
        ("from . import test_scan\n", ["test_new.py:1: imports test_scan"]),
        ("import importlib\nscan = importlib.import_module('test_scan')\n", ["test_new.py:2: imports test_scan"]),
        ("from fakes import World\nfrom conftest import RecordingProgress\nimport testing_helpers\n", []),
    ],
    ids=["from-import", "inside-a-function", "relative", "relative-name", "import_module", "fakes-and-conftest"],
)
def test_the_check_catches_an_import_of_a_test_module(tmp_path, source, expected):
    (tmp_path / "test_new.py").write_text(source)
    assert imports_of_test_modules(tmp_path) == expected


def _probe_imports(package: Path, child: bool) -> list[tuple[str, int, str]]:
    """(module, line, name imported) of every import (at any depth) in probe/child/ (`child`) or in the rest of
    probe/."""
    out = []
    for path in sorted((package / "probe").rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.startswith("probe/child/") != child:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                out += [(rel, node.lineno, a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{a.name}" for a in node.names] if node.module == "memprobe.probe" else []
                out += [(rel, node.lineno, n) for n in names or [("." * node.level) + (node.module or "")]]
    return out


def torch_imports(package: Path = PACKAGE) -> list[str]:
    """Where a module of probe/ outside probe/child/ imports torch or probe/child/ (at any depth; a child is started
    by module name, not imported)."""
    return [
        f"{rel}:{line}: imports {n}"
        for rel, line, n in _probe_imports(package, child=False)
        if n.split(".")[0] == "torch" or n.startswith("memprobe.probe.child")
    ]


def parent_imports(package: Path = PACKAGE) -> list[str]:
    """Where a module of probe/child/ imports a module of probe outside probe/child/ (at any depth; relative
    imports count as the parent's too, they cannot be told apart cheaply)."""
    return [
        f"{rel}:{line}: imports {n}"
        for rel, line, n in _probe_imports(package, child=True)
        if n.startswith(".") or (n.startswith("memprobe.probe.") and not n.startswith("memprobe.probe.child"))
    ]


def test_the_child_side_imports_nothing_of_the_parent_side():
    assert parent_imports() == []


def test_the_child_check_catches_an_import_of_the_parent_side(tmp_path):
    (tmp_path / "probe" / "child").mkdir(parents=True)
    (tmp_path / "probe" / "child" / "worker.py").write_text(
        "from memprobe.probe.child import measure\nfrom memprobe.core import protocol\n"
        "def f():\n    from memprobe.probe.options import ScanOptions\n"
    )
    (tmp_path / "probe" / "child" / "rank.py").write_text("from memprobe.probe import runner\n")
    (tmp_path / "probe" / "scan.py").write_text("from memprobe.probe.options import ScanOptions\n")
    assert parent_imports(tmp_path) == [
        "probe/child/rank.py:1: imports memprobe.probe.runner",
        "probe/child/worker.py:4: imports memprobe.probe.options",
    ]


def test_only_probe_child_imports_torch():
    assert torch_imports() == []


def test_the_torch_check_catches_an_import_outside_the_child_folder(tmp_path):
    (tmp_path / "probe" / "child").mkdir(parents=True)
    (tmp_path / "probe" / "child" / "worker.py").write_text("import torch\n")
    (tmp_path / "probe" / "device.py").write_text("def torch_environment():\n    import torch\n")
    (tmp_path / "probe" / "scan.py").write_text("def f():\n    from torch.cuda import memory\n")
    (tmp_path / "probe" / "group.py").write_text("from memprobe.probe.child.served_rank import decide\n")
    assert torch_imports(tmp_path) == [
        "probe/device.py:2: imports torch",
        "probe/group.py:1: imports memprobe.probe.child.served_rank",
        "probe/scan.py:2: imports torch.cuda",
    ]


def test_the_scan_side_of_probe_does_not_load_torch():
    """Importing every probe module outside probe/child/ leaves torch unloaded (nothing reaches it indirectly)."""
    import pkgutil
    import subprocess
    import sys

    import memprobe.probe

    modules = [
        m.name for m in pkgutil.walk_packages(memprobe.probe.__path__, "memprobe.probe.") if ".child" not in m.name
    ]
    code = f"import sys\nfor m in {modules!r}:\n    __import__(m)\nprint('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False" and len(modules) > 20
