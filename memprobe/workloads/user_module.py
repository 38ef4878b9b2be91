"""The user's own model: `FILE.py:build` or `pkg.mod:build`, where build(device, precision) returns a task.

The task is the project's interface: a TrainTask (model, make_batch(n), loss(batch); override
train_step for several optimizers, as GANs need), or any object with `.model`, `.make_batch(n)` and
`.loss(batch)`, trained with the entry's optimizer. Anything the user's code raises that is not out
of memory is a UserModelError carrying its traceback (outcome `user-error`), never taken for an OOM; a
sys.exit() in it is such an error too, not memprobe's own exit.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import logging
import os
import sys
import threading
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn

import torch
from torch.overrides import TorchFunctionMode

from memprobe.core.process.interrupts import user_raised
from memprobe.core.process.outcomes import described
from memprobe.core.workload.registry import OPTIMIZERS

from .base import TrainTask, UserModelError, model_error

TRACEBACK_CHARS = 8000  # the end of a longer traceback is kept: the user's frames are at the bottom


def user_traceback() -> str:
    """The traceback of the exception being handled, trimmed to its last TRACEBACK_CHARS characters."""
    text = traceback.format_exc()
    return text if len(text) <= TRACEBACK_CHARS else "...\n" + text[-TRACEBACK_CHARS:]


class UserExit(RuntimeError):
    """The user's code tried to end the process (sys.exit(), os._exit()) or raised a KeyboardInterrupt no Ctrl-C
    sent: an error of their code, not memprobe's exit nor an interrupt."""


_REAL_EXIT = os._exit


@contextmanager
def user_code(what: str) -> Iterator[None]:
    """Run the user's code (`what`: whose, for the message) so that it cannot end memprobe's process behind its
    back: sys.exit() and os._exit() (in this thread; os._exit would leave no word and exit 0) and a
    KeyboardInterrupt no signal sent (core.interrupts.user_raised) raise UserExit. A real Ctrl-C passes."""
    owner = threading.get_ident()
    before = os._exit

    def refused(status: int) -> NoReturn:
        if threading.get_ident() != owner:  # another thread (memprobe's lifeline watcher, say) really ends it
            _REAL_EXIT(status)
        raise UserExit(f"{what} called os._exit({status!r})")

    os._exit = refused
    try:
        yield
    except SystemExit as exc:
        raise UserExit(f"{what} called sys.exit({exc.code!r})") from None
    except KeyboardInterrupt:
        if not user_raised():
            raise
        raise UserExit(f"{what} raised KeyboardInterrupt (no Ctrl-C came): find what raises it") from None
    finally:
        os._exit = before


def _import(module_name: str) -> Any:
    """The module of `FILE.py` (under a name of its own) or of a dotted module name."""
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
    return module


def load_target(target: str) -> Callable[..., Any]:
    """Import `FILE.py:function` or `pkg.mod:function` (a dotted qualname is followed). Raises UserModelError
    with the traceback when the module cannot be imported or has no such function."""
    module_name, _, qualname = target.rpartition(":")
    try:
        with user_code(f"importing {module_name}"):  # sys.exit() at import must not end memprobe
            module = _import(module_name)
    except UserExit as exc:  # sys.exit() or os._exit() at import, or a KeyboardInterrupt of its own (user_code)
        raise UserModelError(str(exc), user_traceback()) from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed to import: they need its traceback
        raise UserModelError(f"importing {module_name} raised {described(exc)}", user_traceback()) from exc
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise UserModelError(f"{module_name} has no {qualname}")
    if inspect.isclass(found):
        instance = found.__name__ if found.__name__ != "build" else "task (the class renamed)"
        raise UserModelError(
            f"{target} is a class, not a build function: memprobe calls build(device, precision) and trains the "
            f"task it returns; write such a function returning a {instance} and name it"
        )
    if not callable(found):
        raise UserModelError(f"{target} is a {type(found).__name__}, not a function")
    try:
        inspect.signature(found).bind(None, None)
    except TypeError:
        raise UserModelError(
            f"{target}{inspect.signature(found)} cannot be called as build(device, precision): give it those "
            "two parameters"
        ) from None
    except ValueError:  # a callable with no signature Python can read (a builtin): called as it is
        pass
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


def _check_optimizer(task: TrainTask | None, spec: Any, target: str) -> None:
    """Raises UserModelError when the optimizer a task is trained with is not a spec memprobe can build (a mapping
    whose name is sgd, adam or adamw); a task that makes its own optimizers (start() of its own) is left alone."""
    if task is not None and type(task).start is not TrainTask.start:
        return
    if isinstance(spec, dict) and spec.get("name") in OPTIMIZERS:
        return
    raise UserModelError(
        f"{target}: the task's optimizer is {str(spec)[:80]!r}; give a mapping such as "
        f"{{'name': 'adamw', 'lr': 1e-4}} (name: {', '.join(OPTIMIZERS)})"
    )


def as_task(made: Any, optimizer: dict[str, Any], device: torch.device, target: str) -> TrainTask:
    """The TrainTask for what the user's build returned. Raises UserModelError when it is not one, cannot
    be wrapped into one, or holds its parameters on another device than `device`."""
    if isinstance(made, TrainTask):
        task = made
        _check_optimizer(task, task.optimizer_spec, target)
        if not isinstance(task.model, torch.nn.Module):
            raise UserModelError(
                f"{target} returned a task whose model is a {type(task.model).__name__}, not a torch Module"
            )
        missing = [m for m in ("make_batch", "loss") if getattr(type(task), m) is getattr(TrainTask, m)]
        if type(task).train_step is not TrainTask.train_step and "loss" in missing:
            missing.remove("loss")  # a train_step of its own (a GAN's) need not go through loss()
        if missing:
            raise UserModelError(
                f"{target} returned a {type(task).__name__} that does not define {' and '.join(missing)}: "
                "a TrainTask subclass writes make_batch(n) (the batch of n synthetic samples) and loss(batch)"
            )
    elif (
        isinstance(getattr(made, "model", None), torch.nn.Module)
        and callable(getattr(made, "make_batch", None))
        and callable(getattr(made, "loss", None))
    ):
        _check_optimizer(None, getattr(made, "optimizer", None) or optimizer, target)
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
    placement = _Placement(device)
    try:
        with user_code(target), placement.watching():
            made = function(device, precision)
    except UserExit as exc:
        raise UserModelError(str(exc), user_traceback()) from None
    except Exception as exc:  # noqa: BLE001 - whatever the user's build raises, they need its traceback
        if not model_error(exc):
            raise  # out of memory (the model alone does not fit) or a crash: not the user's bug
        raise UserModelError(f"{target} raised {described(exc)}", user_traceback()) from exc
    task = as_task(made, optimizer, device, target)
    placement.check(task, target)
    task.user_code = True
    for name in ("make_batch", "loss", "train_step", "infer"):
        setattr(task, name, _guarded(getattr(task, name), f"{target}'s {name}"))
    return task


class _Placement(TorchFunctionMode):
    """Whether a build placed anything on the device it was given (an op given that device: `model.to(device)`,
    `device=device`, `with device:`). On a GPU, as_task refuses a model left elsewhere; on the CPU (predict's fake
    tensors, `scan --device cpu`) a model that ignores `device` is where it would be anyway, so only this can tell:
    check() logs a warning, as predict's answer is then for a model the scan on a GPU would refuse."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device, self.placed = device, False

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if not self.placed:
            self.placed = any(_names_device(v, self.device) for v in (*args, *kwargs.values()))
        return func(*args, **kwargs)

    def watching(self) -> Any:
        """The context to run the build in: this mode on the CPU; nothing on a GPU, where as_task checks the
        parameters themselves."""
        return self if self.device.type == "cpu" else contextlib.nullcontext()

    def check(self, task: TrainTask, target: str) -> None:
        if self.device.type != "cpu" or self.placed or target in _WARNED:
            return
        if not any(True for _ in task.model.parameters()):
            return
        _WARNED.add(target)
        logging.getLogger(__name__).warning(
            f"{target}: build(device, precision) never put the model on the device it was given (no "
            "model.to(device), device=device or `with device:`): on a GPU its weights would stay in CPU memory and "
            "the scan refuses it; this prediction counts them as if on the GPU"
        )


_WARNED: set[str] = set()  # targets warned of once in this process (predict builds a model once per session)


def _names_device(value: Any, device: torch.device) -> bool:
    if isinstance(value, torch.device):
        return value.type == device.type
    return isinstance(value, str) and value.split(":")[0] == device.type


def _guarded(method: Callable[..., Any], what: str) -> Callable[..., Any]:
    """`method` run as user_code: its sys.exit(), os._exit() or KeyboardInterrupt of its own becomes UserExit (a
    RuntimeError a trial classifies as the user's error), ending neither a trial process silently nor memprobe."""

    def guarded(*args: Any, **kwargs: Any) -> Any:
        with user_code(what):
            return method(*args, **kwargs)

    return guarded
