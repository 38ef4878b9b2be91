"""Every private PyTorch name that predict/ and training/ touch is listed in torch_internals and present."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from memprobe.predict import torch_internals as ti

PACKAGE = Path(__file__).resolve().parents[1] / "memprobe"
SCANNED = sorted([*(PACKAGE / "predict").glob("*.py"), *(PACKAGE / "training").glob("*.py")])
ROOTS = ("torch", "transformers")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _chain(node: ast.AST) -> list[str] | None:
    """a.b.c as ["a", "b", "c"]; None when the chain does not start at a plain name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Names bound to torch/transformers modules or objects: `import torch.distributed as dist`, `from torch
    import nn`, and module-level `aten = torch.ops.aten`."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in ROOTS:
                    out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ROOTS:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            chain = _chain(node.value)
            if chain and chain[0] in out:
                out[node.targets[0].id] = ".".join([out[chain[0]], *chain[1:]])
    return out


def _defined_here() -> set[str]:
    """Private names memprobe defines itself (functions, attributes it assigns): not PyTorch's."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def scan(path: Path, defined: set[str]) -> tuple[set[str], set[str], set[str]]:
    """(private torch/transformers paths, private attributes read on other objects, every torch.ops chain)
    used in one module."""
    tree = ast.parse(path.read_text())
    for parent in ast.walk(tree):  # so that only the outermost attribute of a chain is read
        for child in ast.iter_child_nodes(parent):
            child.parent = parent  # type: ignore[attr-defined]
    aliases = _aliases(tree)
    other_modules = {
        a.asname or a.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names
    } - set(aliases)  # os._exit and the like: not PyTorch's
    paths, attributes, ops = set(), set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ROOTS:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if any(_private(p) for p in full.split(".")):
                    paths.add(full)
        elif isinstance(node, ast.Attribute) and not isinstance(getattr(node, "parent", None), ast.Attribute):
            chain = _chain(node)
            if chain and chain[0] in aliases:
                full = ".".join([aliases[chain[0]], *chain[1:]])
                if full.startswith("torch.ops."):
                    ops.add(full)
                if any(_private(p) for p in full.split(".")):
                    paths.add(full)
            elif chain is None or chain[0] not in other_modules:  # self._lib._destroy: _destroy is torch's
                attributes |= {p for p in (chain[1:] if chain else [node.attr]) if _private(p) and p not in defined}
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
            and node.args[1].value not in defined
        ):
            attributes.add(node.args[1].value)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "internal"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            paths.add(node.args[0].value)
    return paths, attributes, ops


def _scan_all() -> dict[Path, tuple[set[str], set[str], set[str]]]:
    defined = _defined_here()
    return {path: scan(path, defined) for path in SCANNED}


def _listed(path: str) -> bool:
    return any(path == p or path.startswith(p + ".") for p in ti.PATHS)


def test_every_private_name_used_is_listed():
    unlisted = []
    listed_parts = {part for p in ti.PATHS for part in p.split(".")}
    for path, (paths, attributes, _) in _scan_all().items():
        where = path.relative_to(PACKAGE)
        unlisted += [f"{where}: {p}" for p in sorted(paths) if not _listed(p)]
        unlisted += [f"{where}: .{a}" for a in sorted(attributes) if a not in listed_parts]
    assert not unlisted, "private PyTorch names used but not in torch_internals.INTERNALS: " + ", ".join(unlisted)


def test_the_scan_sees_private_names():
    """The scan would catch a new private name: it finds ones known to be used (else the test above is empty)."""
    found = {name for paths, attrs, _ in _scan_all().values() for name in paths | attrs}
    assert {
        "torch._C._ExcludeDispatchKeyGuard",
        "torch.ops.aten._unsafe_index.Tensor",
        "_destroy",
        "_is_view",
        "_cdata",
        "_is_param",
        "torch.utils._pytree.tree_flatten",
        "torch.nn.modules.batchnorm._BatchNorm",
    } <= found


def test_scan_flags_an_unlisted_name(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "import torch\nfrom torch import nn\naten = torch.ops.aten\n"
        "x = torch._C._new_thing\ny = aten._new_kernel.default\nz = obj._new_attr\n"
        "w = getattr(obj, '_other', None)\nv = nn.modules._private_mod.Thing\n"
    )
    paths, attributes, _ = scan(module, set())
    assert paths == {"torch._C._new_thing", "torch.ops.aten._new_kernel.default", "torch.nn.modules._private_mod.Thing"}
    assert attributes == {"_new_attr", "_other"}
    assert not any(_listed(p) for p in paths)


def test_every_torch_op_used_resolves():
    """Public ATen ops too: one renamed would fail in the middle of a trace, so it fails here first."""
    pytest.importorskip("torch")
    missing = []
    for path, (_, _, ops) in _scan_all().items():
        for dotted in sorted(ops):
            try:
                ti._resolve(dotted)
            except (ImportError, AttributeError):
                missing.append(f"{path.name}: {dotted}")
    assert not missing, "torch ops missing from the installed torch: " + ", ".join(missing)


@pytest.mark.parametrize("group", ti.GROUPS)
def test_torch_internals_all_present(group):
    pytest.importorskip("torch")
    assert ti.missing_internals((group,)) == []
    ti.require_internals((group,))


def test_every_listed_internal_is_used():
    """A name no longer used is taken off the list (the list says what predict relies on, no more)."""
    text = "\n".join(p.read_text() for p in SCANNED if p.name != "torch_internals.py")
    unused = [
        e.path for e in ti.INTERNALS if e.path.rsplit(".", 1)[-1] not in text and e.path.split(".")[-2] not in text
    ]
    assert not unused, f"listed in torch_internals but not used: {unused}"


def test_each_internal_says_what_uses_it():
    assert all(e.used_by and e.group in ti.GROUPS for e in ti.INTERNALS)
    assert len(ti.PATHS) == len(ti.INTERNALS), "a path is listed twice"


def test_missing_torch_internal_is_a_clear_error(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(ti, "PATHS", ti.PATHS | {"torch._C._no_such_thing"})
    with pytest.raises(ti.TorchInternalsError, match=re.escape(f"torch {torch.__version__}: torch._C._no_such_thing")):
        ti.internal("torch._C._no_such_thing")
    with pytest.raises(ValueError, match="not listed"):
        ti.internal("torch._C._not_listed")
    gone = ti.Internal("torch.ops.aten._no_such_kernel.default", "a test")
    monkeypatch.setattr(ti, "INTERNALS", (*ti.INTERNALS, gone, ti.Internal("FakeTensor._no_such_attr", "a test")))
    ti.require_internals.cache_clear()
    with pytest.raises(ti.TorchInternalsError, match=r"torch\.ops\.aten\._no_such_kernel\.default, FakeTensor\._no_s"):
        ti.require_internals()
    ti.require_internals.cache_clear()


def test_fake_session_refuses_when_an_internal_is_missing(monkeypatch):
    pytest.importorskip("torch")
    from memprobe.predict.session import fake_session

    monkeypatch.setattr(ti, "INTERNALS", (*ti.INTERNALS, ti.Internal("torch._C._gone_in_a_future_release", "a test")))
    ti.require_internals.cache_clear()
    try:
        with pytest.raises(ti.TorchInternalsError, match="_gone_in_a_future_release"), fake_session():
            pass
    finally:
        ti.require_internals.cache_clear()


def test_fake_session_refuses_a_transformers_without_is_fake_tensor(monkeypatch):
    pytest.importorskip("transformers")
    import transformers.utils.import_utils as utils

    from memprobe.predict.session import fake_session

    monkeypatch.delattr(utils, "is_fake_tensor")
    ti.require_internals.cache_clear()
    try:
        with (
            pytest.raises(ti.TorchInternalsError, match="transformers.utils.import_utils.is_fake_tensor"),
            fake_session(),
        ):
            pass
    finally:
        ti.require_internals.cache_clear()


def test_predict_notes_a_torch_it_is_not_tested_on(monkeypatch):
    torch = pytest.importorskip("torch")
    from memprobe.predict.torch_internals import untested_torch_note

    monkeypatch.setattr(torch, "__version__", "2.13.0+cpu")
    assert untested_torch_note() is None
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu128")
    assert "tested on torch 2.13" in untested_torch_note() and "compared with its headers" in untested_torch_note()
    monkeypatch.setattr(torch, "__version__", "2.12.1")
    assert "nothing was checked for it" in untested_torch_note()
