"""Let timm and transformers import where the installed torchvision cannot load with this torch.

`pip install torch==2.13.0 && pip install -e .` on a CPU-only machine gets CPU torch from the local
index but the PyPI torchvision wheel (timm requires torchvision), a CUDA build whose custom ops do not
register against CPU torch: `import torchvision` raises, so timm cannot import and transformers refuses
BERT. No memprobe workload calls torchvision (timm imports it at package load; transformers probes it),
so where an installed torchvision fails to import, `ensure_loadable()` puts a stand-in package in its
place: every torchvision name exists and any use of one raises, so work that completes with it provably
ran no torchvision code. A missing torchvision is left missing (timm then says so), and a working one is
used as it is. The command that says so says it once per environment (`first_notice`): a marker in the user's cache
folder remembers it was said, so not every later command repeats it.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from pathlib import Path

STANDIN_VERSION = "0+memprobe-stand-in"
_state: dict[str, str | None] = {"reason": None}


class _Absent(type):
    """Any torchvision name: importable, subclassable, usable as a dict key; calling it raises."""

    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Absent(name, (), {})

    def __call__(cls, *args, **kwargs):
        raise RuntimeError(
            f"torchvision cannot load with this torch, so memprobe put a stand-in in its place: "
            f"{cls.__name__} is not available ({_state['reason'] or 'stand-in installed'})"
        )


class _AbsentModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Absent(name, (), {})


class StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers every `torchvision` and `torchvision.*` import with a stand-in module."""

    def find_spec(self, fullname, path, target=None):
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _AbsentModule(spec.name)
        module.__path__ = []
        module.__version__ = STANDIN_VERSION
        return module

    def exec_module(self, module) -> None:
        pass


def forget(prefixes: tuple[str, ...]) -> None:
    """Drop these top-level packages (and their submodules) from sys.modules."""
    for name in [n for n in sys.modules if n.split(".")[0] in prefixes]:
        del sys.modules[name]


def install_standin() -> StandInFinder:
    """Make `import torchvision` give the stand-in (forgetting any half-imported real one); returns the
    finder, to remove from sys.meta_path when done. Idempotent."""
    for finder in sys.meta_path:
        if isinstance(finder, StandInFinder):
            return finder
    finder = StandInFinder()
    forget(("torchvision",))
    sys.meta_path.insert(0, finder)
    return finder


def torchvision_usable() -> bool:
    """True when a real torchvision imports here."""
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - missing, or a wheel built for another torch
        return False
    return not getattr(sys.modules.get("torchvision"), "__version__", "").startswith("0+")


def ensure_loadable() -> str | None:
    """Install the stand-in when a torchvision is installed but fails to import; returns why (one line),
    or None when nothing was done (torchvision works, is absent, or the stand-in is already in place)."""
    if any(isinstance(f, StandInFinder) for f in sys.meta_path):
        return _state["reason"]
    if "torchvision" in sys.modules or importlib.util.find_spec("torchvision") is None:
        return None
    try:
        import torchvision  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any failure to load means "not usable with this torch"
        _state["reason"] = (
            f"the installed torchvision does not load with this torch "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''})"
        )
        install_standin()
        return _state["reason"]
    return None


def standin_reason() -> str | None:
    """Why the stand-in is active, or None when it is not."""
    return _state["reason"] if any(isinstance(f, StandInFinder) for f in sys.meta_path) else None


def notice_marker(reason: str) -> Path:
    """Where `first_notice` remembers that `reason` was said in this environment (this Python's prefix): a file in
    the user's cache folder ($XDG_CACHE_HOME/memprobe, else ~/.cache/memprobe)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = hashlib.sha1(f"{sys.prefix}\n{reason}".encode()).hexdigest()[:16]
    return Path(cache) / "memprobe" / f"torchvision-note-{key}"


def first_notice(reason: str) -> bool:
    """Whether the note about the stand-in is new here: True the first time `reason` is asked about in this
    environment (the marker is then written), False after. True when the marker cannot be written or read: a note
    said every time is better than one never said."""
    marker = notice_marker(reason)
    try:
        if marker.exists():
            return False
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(reason + "\n", encoding="utf-8")
    except OSError:
        return True
    return True
