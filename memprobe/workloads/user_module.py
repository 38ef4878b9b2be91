"""The user's own model: `FILE.py:build` or `pkg.mod:build`, where build(device, precision) returns a task.

The task is the project's interface: a TrainTask (model, make_batch(n), loss(batch); override
train_step for several optimizers, as GANs need), or any object with `.model`, `.make_batch(n)` and
`.loss(batch)`, trained with the entry's optimizer. Anything the user's code raises that is not out
of memory is a UserModelError carrying its traceback (outcome `user-error`), never taken for an OOM; a
sys.exit() in it is such an error too, not memprobe's own exit.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

from memprobe.core.outcomes import ERROR, classify_error

from .base import TrainTask, UserModelError

TRACEBACK_CHARS = 8000  # the end of a longer traceback is kept: the user's frames are at the bottom


def user_traceback() -> str:
    """The traceback of the exception being handled, trimmed to its last TRACEBACK_CHARS characters."""
    text = traceback.format_exc()
    return text if len(text) <= TRACEBACK_CHARS else "...\n" + text[-TRACEBACK_CHARS:]


def load_target(target: str) -> Callable[..., Any]:
    """Import `FILE.py:function` or `pkg.mod:function` (a dotted qualname is followed). Raises UserModelError
    with the traceback when the module cannot be imported or has no such function."""
    module_name, _, qualname = target.rpartition(":")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            # A name of its own, so `if __name__ == "__main__":` in the file does not run here.
            name = f"memprobe_user_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
            module = sys.modules.get(name)
            if module is None:
                spec = importlib.util.spec_from_file_location(name, path)
                if spec is None or spec.loader is None:
                    raise ImportError(f"cannot import {path}")
                module = importlib.util.module_from_spec(spec)
                sys.path.insert(0, str(path.parent))  # its sibling modules import as they do when it runs
                sys.modules[name] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    del sys.modules[name]
                    raise
        else:
            module = importlib.import_module(module_name)
    except SystemExit as exc:  # sys.exit() at import must not end memprobe with the user's status and no word
        raise UserModelError(f"importing {module_name} called sys.exit({exc.code!r})", user_traceback()) from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed to import: they need its traceback
        raise UserModelError(f"importing {module_name} raised {type(exc).__name__}: {exc}", user_traceback()) from exc
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise UserModelError(f"{module_name} has no {qualname}")
    if not callable(found):
        raise UserModelError(f"{target} is a {type(found).__name__}, not a function")
    return found


class _ObjectTask(TrainTask):
    """A TrainTask around an object with .model, .make_batch(n) and .loss(batch)."""

    def __init__(self, made: Any, optimizer: dict[str, Any], device: torch.device) -> None:
        super().__init__(
            made.model,
            dict(getattr(made, "optimizer", None) or optimizer),
            device,
            float(getattr(made, "units_per_sample", 1.0)),
        )
        self.made = made
        self.unit = str(getattr(made, "unit", "samples"))

    def make_batch(self, n: int) -> Any:
        return self.made.make_batch(n)

    def loss(self, batch: Any) -> torch.Tensor:
        return self.made.loss(batch)

    def infer(self, batch: Any) -> Any:
        if hasattr(self.made, "infer"):
            return self.made.infer(batch)
        return super().infer(batch)


def as_task(made: Any, optimizer: dict[str, Any], device: torch.device, target: str) -> TrainTask:
    """The TrainTask for what the user's build returned. Raises UserModelError when it is not one, cannot
    be wrapped into one, or holds its parameters on another device than `device`."""
    if isinstance(made, TrainTask):
        task = made
    elif (
        isinstance(getattr(made, "model", None), torch.nn.Module)
        and callable(getattr(made, "make_batch", None))
        and callable(getattr(made, "loss", None))
    ):
        task = _ObjectTask(made, optimizer, device)
    else:
        raise UserModelError(
            f"{target} returned {type(made).__name__}; expected a memprobe TrainTask "
            "(memprobe.workloads.base) or an object with .model (a torch Module), "
            ".make_batch(n) and .loss(batch)"
        )
    if device.type != "meta":
        elsewhere = sorted({p.device.type for p in task.model.parameters()} - {device.type})
        if elsewhere:
            raise UserModelError(
                f"{target} returned a model with parameters on {', '.join(elsewhere)}, "
                f"not on the device it was given ({device}): move it with .to(device)"
            )
    return task


def build(
    params: dict[str, Any], optimizer: dict[str, Any], device: torch.device, precision: str | None = None
) -> TrainTask:
    """Call the user's build(device, precision) named by params.target and return its task, marked as user
    code (a trial's non-OOM error is then `user-error`, with its traceback). `precision` is None where one
    build serves several precisions (predict). Raises UserModelError with the traceback."""
    target = params["target"]
    function = load_target(target)
    try:
        made = function(device, precision)
    except SystemExit as exc:
        raise UserModelError(f"{target} called sys.exit({exc.code!r})", user_traceback()) from None
    except Exception as exc:  # noqa: BLE001 - whatever the user's build raises, they need its traceback
        if classify_error(type(exc).__name__, str(exc)) != ERROR:
            raise  # out of memory (the model alone does not fit) or a crash: not the user's bug
        raise UserModelError(f"{target} raised {type(exc).__name__}: {exc}", user_traceback()) from exc
    task = as_task(made, optimizer, device, target)
    task.user_code = True
    for name in ("make_batch", "loss", "train_step", "infer"):
        setattr(task, name, _no_exit(getattr(task, name), f"{target}'s {name}"))
    return task


class UserExit(RuntimeError):
    """The user's make_batch, loss or train_step called sys.exit(): an error of their code, not memprobe's exit."""


def _no_exit(method: Callable[..., Any], what: str) -> Callable[..., Any]:
    """`method` with a SystemExit it raises turned into UserExit (a RuntimeError a trial classifies as the user's
    error), so sys.exit() in the user's step neither ends a trial process silently nor memprobe itself."""

    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except SystemExit as exc:
            raise UserExit(f"{what} called sys.exit({exc.code!r})") from None

    return guarded
