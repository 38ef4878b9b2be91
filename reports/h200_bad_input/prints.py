import torch
from torch import nn
from memprobe.workloads.base import TrainTask


class Task(TrainTask):
    def make_batch(self, n):
        return torch.randn(n, 1024, device=self.device), torch.randint(0, 10, (n,), device=self.device)

    def loss(self, batch):
        return nn.functional.cross_entropy(self.model(batch[0]), batch[1])


def model(device):
    return nn.Sequential(nn.Linear(1024, 8192), nn.ReLU(), nn.Linear(8192, 10)).to(device)

import os

def build(device, precision):
    print("hello from build")
    os.makedirs("/tmp/memprobe-elsewhere", exist_ok=True)
    os.chdir("/tmp/memprobe-elsewhere")
    return Task(model(device), {"name": "adamw"}, device)
