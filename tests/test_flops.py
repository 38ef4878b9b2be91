"""FLOPs per sample (memprobe.training.flops): tiny workloads on the CPU, full sizes on the meta device.

The full-size counts are checked against closed-form matmul counts (Transformer-Big, BERT-Large SQuAD)
and against the published Pix2PixHD figure (about 11.6 TFLOP per training image at 2048x1024).
"""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from memprobe.core.workload.registry import load_registry  # noqa: E402
from memprobe.training.flops import flops_per_sample, workload_flops_per_sample  # noqa: E402
from memprobe.workloads.base import TrainTask  # noqa: E402
from memprobe.workloads.families import BUILDERS  # noqa: E402

CPU = torch.device("cpu")
META = torch.device("meta")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models gain nothing from threads; on a busy 2-core machine spinning OpenMP threads slow them."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def build(name: str, device: torch.device = CPU):
    w = load_registry()[name]
    module, func = BUILDERS[w.family].split(":")
    return getattr(importlib.import_module(module), func)(w.params, w.optimizer, device)


@pytest.mark.parametrize("name", ["toy", "toy-bert-squad", "toy-transformer", "toy-pix2pixhd"])
def test_per_sample_count_does_not_depend_on_the_batch(name):
    task = build(name)
    weights = [p.detach().clone() for p in task.model.parameters()]
    two, four = flops_per_sample(task, 2), flops_per_sample(task, 4)
    assert two > 0 and four == pytest.approx(two, rel=0.01)
    infer = flops_per_sample(task, 2, mode="infer")
    assert 0 < infer < two
    # counting neither steps an optimizer nor leaves gradients behind
    assert all(torch.equal(w, p) for w, p in zip(weights, task.model.parameters(), strict=True))
    assert all(p.grad is None for p in task.model.parameters())
    assert task.model.training  # the mode it had before


def test_train_is_forward_plus_backward():
    # linear layers whose input needs no gradient: backward = weight gradients only, except for the
    # layers after the first, which also pass the gradient on; toy MLP 64 -> 256 -> 256 -> 256 -> 10
    task = build("toy")
    forward = 2 * (64 * 256 + 256 * 256 + 256 * 256 + 256 * 10)
    assert flops_per_sample(task, 2, mode="infer") == forward
    backward = 2 * forward - 2 * 64 * 256  # no input gradient for the first layer
    assert flops_per_sample(task, 2) == forward + backward


class DepthwiseTask(TrainTask):
    """A grouped and a depthwise conv on an input that needs its gradient: backward = 2 x forward."""

    def __init__(self) -> None:
        model = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, groups=4), torch.nn.Conv2d(16, 16, 3, groups=16))
        super().__init__(model, {"name": "sgd"}, CPU)

    def make_batch(self, n: int) -> torch.Tensor:
        return torch.randn(n, 8, 12, 12, requires_grad=True)

    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        return self.model(batch).square().mean()

    def infer(self, batch: torch.Tensor) -> torch.Tensor:
        return self.model(batch)


def test_grouped_convolution_backward_is_counted_once():
    # torch's own formula counts a grouped conv's weight gradient `groups` times over
    task = DepthwiseTask()
    assert flops_per_sample(task, 2) == 3 * flops_per_sample(task, 2, mode="infer")


def test_bad_arguments():
    task = build("toy")
    with pytest.raises(ValueError, match="batch"):
        flops_per_sample(task, 0)
    with pytest.raises(ValueError, match="mode"):
        flops_per_sample(task, 2, mode="serve")


def test_transformer_big_matches_closed_form():
    s = t = 128
    d, f, v, layers = 1024, 4096, 32768, 6
    encoder = layers * 2 * s * (4 * d * d + 2 * d * f)
    decoder = layers * 2 * t * (8 * d * d + 2 * d * f)
    output = 2 * t * v * d
    attention = layers * 4 * d * (s * s + t * t + t * s)  # QK^T and AV, encoder / decoder self / cross
    forward = encoder + decoder + output + attention  # 54.9 GFLOP per sentence pair
    task = build("transformer-big", META)
    assert flops_per_sample(task, 2, mode="infer") == forward
    assert flops_per_sample(task, 2) == 3 * forward  # 164.7 GFLOP, 1.29 GFLOP per target token


def test_bert_large_squad_matches_closed_form():
    s, d, f, layers = 384, 1024, 4096, 24
    forward = layers * (2 * s * (4 * d * d + 2 * d * f) + 4 * s * s * d) + 2 * s * d * 2  # + span head
    task = build("bert-large-squad", META)
    assert flops_per_sample(task, 2, mode="infer") == forward  # 0.246 TFLOP per sequence
    assert flops_per_sample(task, 2) == 3 * forward


def test_pix2pixhd_full_resolution_on_meta():
    # The published figure: about 11.6 TFLOP per training image at 2048x1024, which is what a backward of the
    # generator loss into D's weights too gives (11.57); this step restricts that backward to G's
    # weights (D's gradient from G's loss is discarded anyway), so it counts 11.23.
    w = load_registry()["pix2pixhd"]
    train = workload_flops_per_sample(BUILDERS[w.family], w.params, w.optimizer, mode="train", batch=1)
    assert train == pytest.approx(11.23e12, rel=0.005)
    assert train == pytest.approx(11.6e12, rel=0.04)
    infer = workload_flops_per_sample(BUILDERS[w.family], w.params, w.optimizer, mode="infer", batch=1)
    assert infer == pytest.approx(1.496e12, rel=0.005)  # the generator alone
