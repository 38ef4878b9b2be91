"""A 0-dim draw of U[0, 1) is read at its largest value, and what is computed from such scalars alone for real
(predict/fake_mode.py): LayerDrop's `if torch.rand([]) < self.layerdrop` runs every layer, the most memory, the
same trace every time (transformers 5.17's BART: answered True before, every layer skipped, 395 predicted for 142)."""

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


def test_layerdrop_runs_every_layer_whatever_its_probability_below_one():
    for p in (0.0, 0.1, 0.9):
        with fake_session(), Ops() as mode:
            LayerDrop(p)(torch.randn(4, 8))
        assert "aten.addmm.default" in mode.ops, p


def test_a_draw_is_read_the_same_every_time():
    values = []
    for _ in range(2):
        with fake_session(), FakeCudaMode():
            values.append(torch.rand([]).item())
    assert values[0] == values[1] and 0.999 < values[0] < 1.0


def _bucket(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x > 0, x, torch.tensor(0).type_as(x))  # torch.tensor inside: a real tensor under TorchScript


def test_functions_a_library_scripts_run_as_python_inside_a_session():
    """deberta-v2 scripts its position-bucket helpers with @torch.jit.script; the TorchScript interpreter's
    torch.tensor makes a real tensor that fake tensors refuse, so scripting is off while a model is built."""
    with fake_session(), FakeCudaMode():
        scripted = torch.jit.script(_bucket)
        assert not isinstance(scripted, torch.jit.ScriptFunction)
        assert scripted(torch.arange(4)).shape == (4,)
    assert isinstance(torch.jit.script(_bucket), torch.jit.ScriptFunction)  # on again after the session


def test_a_constant_made_under_the_mode_keeps_its_value_through_in_place_adds():
    """transformers' StaticCache counts its tokens in `torch.tensor(0)` and adds each forward's length in place; the
    chunks of a chunked prefill ask `count == 0` to decide whether they may skip the mask. Read as an answer (True),
    every chunk looked like the first one."""
    with fake_session(), FakeCudaMode() as mode:
        count = torch.tensor(0, dtype=torch.long)
        assert bool(count == 0)
        count.add_(16)
        assert not bool(count == 0) and int(count) == 16
        assert count.to("cpu").item() == 16
    assert not any(key == "value" for key, _ in mode.answers)
