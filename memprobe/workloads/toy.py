"""A tiny MLP classifier: the test workload. Same code path as the real ones, runs in milliseconds."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .base import TrainTask


class ToyTask(TrainTask):
    unit = "samples"

    def __init__(self, params: dict[str, Any], optimizer: dict[str, Any], device: torch.device) -> None:
        features, hidden, classes = int(params["features"]), int(params["hidden"]), int(params["classes"])
        layers: list[nn.Module] = []
        width = features
        for _ in range(int(params.get("layers", 2))):
            layers += [nn.Linear(width, hidden), nn.GELU()]
            width = hidden
        layers.append(nn.Linear(width, classes))
        with device:
            model = nn.Sequential(*layers)
        super().__init__(model, optimizer, device)
        self.features, self.classes = features, classes

    def make_batch(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(n, self.features, device=self.device)
        y = torch.randint(0, self.classes, (n,), device=self.device)
        return x, y

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.model(x), y)

    def infer(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return self.model(batch[0])


def build(params: dict[str, Any], optimizer: dict[str, Any], device: torch.device) -> ToyTask:
    return ToyTask(params, optimizer, device)
