"""Any timm model by name (`timm:NAME`), random weights, trained on synthetic images with cross entropy.

The input size defaults to the model's pretrained_cfg input size (nothing is downloaded: only the
config that ships inside timm is read); channels_last on CUDA; SGD momentum unless the entry says
otherwise. An unknown name is a UserModelError naming close matches.

A model whose config has no classifier (num_classes 0: eva02_base_patch14_224 and other pre-training backbones) is
built with a DEFAULT_CLASSES-class linear head, as a fine-tuning run would add; one that still has none after that
is trained on a loss on its features (the mean square of what it returns). describe() says which (`head`).
"""

from __future__ import annotations

import difflib
import re
import traceback
from typing import Any

import torch

from .base import TrainTask, UserModelError, model_error, on_cuda, one_line
from .vision import ClassifierTask, load_timm

DEFAULT_CLASSES = 1000  # the head given to a model whose timm config has no classifier (ImageNet's classes)


def check_name(timm, name: str) -> None:
    """Raise UserModelError when timm has no model called `name`, naming the closest ones. A pretrained source
    (hf-hub:, local-dir:) is refused as such: memprobe builds an architecture with random weights, offline."""
    if timm.is_model(name):
        return
    source, colon, rest = name.partition(":")
    if colon and source.replace("_", "-") in ("hf-hub", "local-dir"):
        arch = rest.rpartition("/")[2].partition(".")[0]
        use = f": give the architecture, e.g. timm:{arch}" if arch and timm.is_model(arch) else ": give a timm name"
        raise UserModelError(
            f"'{name}' is where timm loads pretrained weights from ({source}:), which memprobe does not (it builds "
            f"the architecture with random weights, offline){use}"
        )
    close = difflib.get_close_matches(name, timm.list_models(), n=4, cutoff=0.6)
    stem = re.split(r"[^A-Za-z0-9]", name)[0] or name
    hint = (
        f"; close: {', '.join(close)}"
        if close
        else f"; `python -c \"import timm; print(timm.list_models('*{stem}*'))\"` lists names like it"
    )
    raise UserModelError(f"timm {timm.__version__} has no model '{name}'{hint}")


class TimmTask(ClassifierTask):
    """Any timm model by name: ClassifierTask's batches and loss, at the input size the model was made for."""

    # timm's code run on the user's choice of model and input size: a step that raises (not out of memory) is theirs
    # to fix, said in one line with the traceback in the result (training/step.py), like a user module's
    user_code = True

    def __init__(self, params: dict[str, Any], optimizer: dict[str, Any], device: torch.device) -> None:
        timm = load_timm()
        self.arch = str(params["model"])
        check_name(timm, self.arch)
        kwargs = dict(params.get("kwargs") or {})
        if params.get("classes") is not None:
            kwargs["num_classes"] = int(params["classes"])
        self.head = "timm's classifier"
        if "num_classes" not in kwargs and _config_classes(timm, self.arch) == 0:
            kwargs["num_classes"] = DEFAULT_CLASSES
            self.head = f"a {DEFAULT_CLASSES}-class linear head added (timm's config has no classifier)"
        with device:
            model = _create(timm, self.arch, kwargs, params.get("input_size"))
        size = params.get("input_size") or model.pretrained_cfg.get("input_size") or (3, 224, 224)
        self.input_size = tuple(int(v) for v in size)
        self.classes = int(getattr(model, "num_classes", 0) or 0)
        if self.classes < 1:
            self.head = "no classifier: the loss is the mean square of the model's output features"
        self.channels_last = bool(params.get("channels_last", True)) and on_cuda(device)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        TrainTask.__init__(self, model, optimizer, device)  # not ClassifierTask's: the model is built above
        self.timm_version = timm.__version__

    def make_batch(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.classes > 0:
            return super().make_batch(n)
        x = torch.randn(n, *self.input_size, device=self.device)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, torch.zeros(n, dtype=torch.long, device=self.device)  # no labels: the loss needs none

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        if self.classes > 0:
            return super().loss(batch)
        return _feature_loss(self.model(batch[0]))  # the model has no classifier: a loss on its features

    def describe(self) -> dict[str, Any]:
        info = TrainTask.describe(self)
        info.update(
            timm_model=self.arch,
            timm_version=self.timm_version,
            input_size=list(self.input_size),
            classes=self.classes,
            head=self.head,
            channels_last=self.channels_last,
        )
        return info


def _feature_loss(out: Any) -> torch.Tensor:
    """The mean square of a model's output features (a tensor, or the tensors of a list, tuple or dict), in fp32."""
    if isinstance(out, torch.Tensor):
        return out.float().pow(2).mean()
    parts = out.values() if isinstance(out, dict) else out
    tensors = [t for t in parts if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not tensors:
        raise UserModelError(f"the model returned {type(out).__name__} with no features to train on")
    return sum((t.float().pow(2).mean() for t in tensors), torch.zeros((), device=tensors[0].device))


def _config_classes(timm, name: str) -> int | None:
    """The classes of the classifier in `name`'s pretrained config as timm ships it (0: none), None when it says none."""
    try:
        cfg = timm.models.get_pretrained_cfg(name)
    except Exception:  # noqa: BLE001 - a config timm cannot give: the model's own default stands
        return None
    classes = getattr(cfg, "num_classes", None) if cfg is not None else None
    return classes if isinstance(classes, int) else None


def _create(timm, name: str, kwargs: dict[str, Any], input_size: list[int] | None):
    """timm.create_model with random weights; a given input size is passed as img_size to the models
    that take one (ViT-style models size their position embedding by it; CNNs take any size)."""
    if input_size is not None and "img_size" not in kwargs:
        try:
            return timm.create_model(name, pretrained=False, img_size=tuple(input_size[1:]), **kwargs)
        except TypeError as exc:
            if "img_size" not in str(exc):
                raise
    return timm.create_model(name, pretrained=False, **kwargs)


def build(params: dict[str, Any], optimizer: dict[str, Any], device: torch.device) -> TimmTask:
    """A timm model on `device` (cpu, cuda or meta). Raises UserModelError for an unknown name or a model that timm
    cannot build as asked (what timm raised, in one line, its traceback in `details`), ImportError when timm cannot
    be imported; out of memory and CUDA errors as raised."""
    try:
        return TimmTask(params, optimizer, device)
    except (UserModelError, ImportError):
        raise
    except Exception as exc:
        if not model_error(exc):
            raise  # out of memory, a CUDA error: not the model's fault
        raise UserModelError(
            f"timm {load_timm().__version__} cannot build '{params.get('model')}': {type(exc).__name__}: "
            f"{one_line(exc)}",
            traceback.format_exc(),
        ) from exc
