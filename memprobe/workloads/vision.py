"""Image classifiers from timm (nasnetalarge, resnet50, ...) with random weights, trained with cross entropy.

Synthetic ImageNet-style inputs at the model's full resolution, channels_last on CUDA (model and
inputs: cuDNN's fast NHWC convolution kernels, what a careful user runs), SGD with momentum.

timm is imported when this module loads (the trial process preloads it, so a spare process pays the
import while another is measured), but a failure is kept and raised only when a timm workload is built:
timm imports torchvision at package load, and a missing or broken torchvision (the PyPI CUDA wheel on a
CPU torch) must not make the rest of memprobe unimportable.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F

from .base import TrainTask, on_cuda
from .torchvision_guard import ensure_loadable

ensure_loadable()  # before timm imports torchvision (see torchvision_guard.py)
try:
    import timm as _imported

    _timm: ModuleType | None = _imported
    _TIMM_ERROR: Exception | None = None
except Exception as exc:  # noqa: BLE001 - any import failure is reported when a timm model is built
    _timm = None
    _TIMM_ERROR = exc


def load_timm():
    """The timm module. Raises ImportError naming the cause when timm cannot be imported (tried again
    here, in case what was missing at module load is importable now)."""
    if _timm is not None:
        return _timm
    try:
        import timm
    except Exception as exc:  # noqa: BLE001
        raise ImportError(
            f"timm cannot be imported ({type(exc).__name__}: {exc}); timm imports torchvision at package "
            f"load, so it needs a torchvision built for this torch (first failure: {_TIMM_ERROR!r})"
        ) from exc
    return timm


class ClassifierTask(TrainTask):
    unit = "images"

    def __init__(self, params: dict[str, Any], optimizer: dict[str, Any], device: torch.device) -> None:
        timm = load_timm()
        self.arch = str(params["model"])
        self.image_size = int(params["image_size"])
        self.classes = int(params.get("classes", 1000))
        self.input_size: tuple[int, ...] = (3, self.image_size, self.image_size)
        kwargs = dict(params.get("kwargs", {}))
        # Built directly on the device: timm's own init runs there (fast on CUDA; nothing is allocated
        # on the meta device, for parameter and FLOP counts).
        with device:
            model = timm.create_model(self.arch, pretrained=False, num_classes=self.classes, **kwargs)
        self.channels_last = bool(params.get("channels_last", True)) and on_cuda(device)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        super().__init__(model, optimizer, device)
        self.timm_version = timm.__version__

    def make_batch(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(n, *self.input_size, device=self.device)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, self.classes, (n,), device=self.device)
        return x, y

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.model(x), y)

    def infer(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return self.model(batch[0])

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info.update(
            timm_model=self.arch,
            timm_version=self.timm_version,
            resolution=f"{self.image_size}x{self.image_size}",
            classes=self.classes,
            channels_last=self.channels_last,
        )
        return info


def build(params: dict[str, Any], optimizer: dict[str, Any], device: torch.device) -> ClassifierTask:
    """A timm classifier on `device` (cpu, cuda or meta). Raises ImportError when timm cannot be
    imported, and whatever timm.create_model raises for an unknown model or bad arguments."""
    return ClassifierTask(params, optimizer, device)
