"""A model of the zoo's own, built the way a user's module is: a U-Net for semantic segmentation at 256x256.

`memprobe scan --model benchmarks/zoo_models/unet.py:build`: four downsamplings from 64 to 1024 channels, batch
norm, transposed-convolution upsampling with skip connections, 21 classes, per-pixel cross entropy, Adam. Nothing
in memprobe knows this model; it stands for "your own module" in the held-out zoo (benchmarks/zoo.py).
"""

import torch
from torch import nn

from memprobe.workloads.base import TrainTask

SIZE = 256
CLASSES = 21


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class UNet(nn.Module):
    def __init__(self, widths=(64, 128, 256, 512, 1024), classes: int = CLASSES) -> None:
        super().__init__()
        self.down = nn.ModuleList()
        cin = 3
        for w in widths:
            self.down.append(_block(cin, w))
            cin = w
        self.pool = nn.MaxPool2d(2)
        self.up = nn.ModuleList()
        self.merge = nn.ModuleList()
        for w in reversed(widths[:-1]):
            self.up.append(nn.ConvTranspose2d(cin, w, 2, stride=2))
            self.merge.append(_block(2 * w, w))
            cin = w
        self.head = nn.Conv2d(cin, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, block in enumerate(self.down):
            x = block(x if i == 0 else self.pool(x))
            skips.append(x)
        skips.pop()
        for up, merge in zip(self.up, self.merge):
            x = merge(torch.cat([up(x), skips.pop()], dim=1))
        return self.head(x)


class SegmentationTask(TrainTask):
    unit = "images"

    def make_batch(self, n):
        x = torch.randn(n, 3, SIZE, SIZE, device=self.device)
        return x, torch.randint(0, CLASSES, (n, SIZE, SIZE), device=self.device)

    def loss(self, batch):
        x, y = batch
        return nn.functional.cross_entropy(self.model(x), y)

    def infer(self, batch):
        return self.model(batch[0])


def build(device, precision):
    return SegmentationTask(UNet().to(device), {"name": "adam", "lr": 1e-3}, device)
