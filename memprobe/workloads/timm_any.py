"""Any timm model by name (`timm:NAME`), random weights, trained on synthetic images with cross entropy.

The input size defaults to the model's pretrained_cfg input size (nothing is downloaded: only the
config that ships inside timm is read); channels_last on CUDA; SGD momentum unless the entry says
otherwise. An unknown name is a UserModelError naming close matches.
"""

from __future__ import annotations

import difflib
from typing import Any

import torch

from .base import TrainTask, UserModelError
from .vision import ClassifierTask, load_timm


def check_name(timm, name: str) -> None:
    """Raise UserModelError when timm has no model called `name`, naming the closest ones."""
    if timm.is_model(name):
        return
    close = difflib.get_close_matches(name, timm.list_models(), n=4, cutoff=0.6)
    hint = (
        f"; close: {', '.join(close)}"
        if close
        else "; `python -c \"import timm; print(timm.list_models('*vit*'))\"` lists names"
    )
    raise UserModelError(f"timm {timm.__version__} has no model '{name}'{hint}")


class TimmTask(ClassifierTask):
    """Any timm model by name: ClassifierTask's batches and loss, at the input size the model was made for."""

    def __init__(self, params: dict[str, Any], optimizer: dict[str, Any], device: torch.device) -> None:
        timm = load_timm()
        self.arch = str(params["model"])
        check_name(timm, self.arch)
        kwargs = dict(params.get("kwargs") or {})
        if params.get("classes") is not None:
            kwargs["num_classes"] = int(params["classes"])
        with device:
            model = _create(timm, self.arch, kwargs, params.get("input_size"))
        size = params.get("input_size") or model.pretrained_cfg.get("input_size") or (3, 224, 224)
        self.input_size = tuple(int(v) for v in size)
        self.classes = int(model.num_classes)
        self.channels_last = bool(params.get("channels_last", True)) and device.type == "cuda"
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        TrainTask.__init__(self, model, optimizer, device)  # not ClassifierTask's: the model is built above
        self.timm_version = timm.__version__

    def describe(self) -> dict[str, Any]:
        info = TrainTask.describe(self)
        info.update(
            timm_model=self.arch,
            timm_version=self.timm_version,
            input_size=list(self.input_size),
            classes=self.classes,
            channels_last=self.channels_last,
        )
        return info


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
    """A timm model on `device` (cpu, cuda or meta). Raises UserModelError for an unknown name, ImportError
    when timm cannot be imported, and what timm.create_model raises for bad arguments."""
    return TimmTask(params, optimizer, device)
