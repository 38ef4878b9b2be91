"""Small tensors made from values alone are computed for real beside their fakes (predict/fake_mode.py shadows),
so a data-dependent read answers with the value the step would see on a GPU, not a guess."""

from __future__ import annotations

import torch
from torch import nn

from memprobe.predict.fake_mode import FakeCudaMode
from memprobe.predict.session import fake_session


class LayerDrop(nn.Module):
    """What BART, Whisper, wav2vec2 and their relatives do in training: skip a layer with probability p."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        if self.training and torch.rand([]) < self.p:
            return x
        return self.linear(x)


class Ops(FakeCudaMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def observe(self, func, args, kwargs, out) -> None:
        self.ops.append(str(func))


def test_layerdrop_zero_runs_every_layer_and_one_skips_it():
    for p, runs in ((0.0, True), (1.0, False)):
        with fake_session(), Ops() as mode:
            layer = LayerDrop(p)
            layer(torch.randn(4, 8))
        assert ("aten.addmm.default" in mode.ops) is runs, p
        assert mode.answers[("computed", "exactly")] == 1


def test_values_computed_from_small_tensors_are_exact():
    with fake_session(), FakeCudaMode() as mode:
        n = torch.arange(5).sum()
        assert n.item() == 10
        assert bool((torch.ones(3) * 2 == 2).all())
        assert torch.full((2,), 7.0)[1].item() == 7.0
        big = torch.ones(1000)
        assert big.sum().item() == 0.0  # a large tensor has no shadow: answered as before, as a guess
    assert mode.answers[("computed", "exactly")] == 3 and mode.answers[("value", 0.0)] == 1


def test_random_shadows_are_the_same_every_time():
    values = []
    for _ in range(2):
        with fake_session(), FakeCudaMode():
            values.append([torch.rand([]).item() for _ in range(3)])
    assert values[0] == values[1] and len(set(values[0])) == 3


def test_an_in_place_change_from_an_unknown_value_drops_the_shadow():
    with fake_session(), FakeCudaMode() as mode:
        t = torch.zeros(2)
        t.add_(torch.ones(1000)[:2])  # a slice of a large tensor: no shadow
        t.sum().item()
    assert mode.answers[("computed", "exactly")] == 0
