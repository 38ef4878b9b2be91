"""A model of your own for memprobe: `memprobe scan --model examples/my_model.py:build`."""

import torch
from torch import nn

from memprobe.workloads.base import TrainTask


class MyTask(TrainTask):
    def make_batch(self, n):  # synthetic worst-case inputs for batch n, on the device
        x = torch.randn(n, 256, 1024, device=self.device)
        return x, torch.randint(0, 1000, (n,), device=self.device)

    def loss(self, batch):  # forward + loss; memprobe adds autocast, backward and the optimizer step
        x, y = batch
        return nn.functional.cross_entropy(self.model(x).mean(dim=1), y)


def build(device, precision):  # precision: fp32/tf32/fp16/bf16 (None when predict builds once for all)
    layer = nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True, norm_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, 12, enable_nested_tensor=False), nn.Linear(1024, 1000))
    return MyTask(model.to(device), {"name": "adamw", "lr": 1e-4}, device)
