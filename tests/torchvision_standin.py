"""A stand-in torchvision for where no usable one is installed (used by the tests and benchmarks).

timm imports torchvision when its package loads (FrozenBatchNorm2d in timm.layers, transforms in
timm.data), but the model code of nasnetalarge and resnet50 never calls torchvision. On a machine
whose only torchvision wheel is a CUDA build that cannot load on CPU torch, `install_standin()` puts
a package in its place: every torchvision name exists and any use of one raises, so code that runs
with it provably ran no torchvision code.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types


def torchvision_usable() -> bool:
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - missing, or a wheel built for another torch
        return False
    return True


class _Absent(type):
    """Any torchvision name: importable, subclassable, usable as a dict key; calling it raises."""

    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Absent(name, (), {})

    def __call__(cls, *args, **kwargs):
        raise RuntimeError(f"torchvision is not installed here: {cls.__name__} is a test stand-in")


class _AbsentModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Absent(name, (), {})


class StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _AbsentModule(spec.name)
        module.__path__ = []
        module.__version__ = "0+stand-in"
        return module

    def exec_module(self, module) -> None:
        pass


def forget(prefixes: tuple[str, ...]) -> None:
    for name in [n for n in sys.modules if n.split(".")[0] in prefixes]:
        del sys.modules[name]


def install_standin() -> StandInFinder:
    """Make `import torchvision` give the stand-in (forgetting any half-imported real one); returns
    the finder, to remove from sys.meta_path when done."""
    finder = StandInFinder()
    forget(("torchvision",))
    sys.meta_path.insert(0, finder)
    return finder
