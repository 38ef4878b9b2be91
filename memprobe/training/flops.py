"""Count a workload's FLOPs per sample once, with torch.utils.flop_counter, for MFU.

Counted on a small batch (one forward + backward for train, one forward for infer; the optimizer
step is excluded) and divided by the batch. The count depends only on shapes, so it runs wherever the
task lives: on the meta device nothing is allocated and a full-size model (Pix2PixHD at 2048x1024)
is counted on any machine in seconds.

What is counted: matrix multiplications, convolutions and attention (FlopCounterMode's registered
formulas), 2 FLOPs per multiply-add; elementwise work, norms and the optimizer are not. Attention is
counted as the math formulation (two matmuls forward, four backward): the CPU's fused attention
kernel has no registered formula (it would count 0), and CUDA's flash formula adds the recomputation
of the scores in the backward pass, which is hardware work, not model FLOPs. Grouped and depthwise
convolutions use a corrected backward formula (torch's counts the weight gradient of a conv with g
groups g times over: NASNet's separable convs would read as 3.6x the FLOPs they are).
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode, conv_flop_count

from memprobe.workloads.base import Amp, TrainTask

MODES = ("train", "infer")


def _conv_backward_flop(
    grad_out_shape,
    x_shape,
    w_shape,
    _bias,
    _stride,
    _padding,
    _dilation,
    transposed,
    _output_padding,
    groups,
    output_mask,
    out_shape=None,
    **_kwargs,
) -> int:
    """FLOPs of aten.convolution_backward: input gradient + weight gradient, each as many as the
    forward convolution, groups included (torch's own formula multiplies the weight gradient by groups)."""

    def t(shape):  # swap the batch and channel dimensions
        return [shape[1], shape[0], *shape[2:]]

    flops = 0
    if output_mask[0]:
        flops += conv_flop_count(grad_out_shape, w_shape, out_shape[0], not transposed)
    if output_mask[1]:
        if transposed:
            weight = conv_flop_count(t(grad_out_shape), t(x_shape), t(out_shape[1]), transposed=False)
        else:
            weight = conv_flop_count(t(x_shape), t(grad_out_shape), t(out_shape[1]), transposed=False)
        flops += weight // groups
    return flops


def _counter() -> FlopCounterMode:
    return FlopCounterMode(display=False, custom_mapping={torch.ops.aten.convolution_backward: _conv_backward_flop})


def flops_per_sample(task: TrainTask, batch: int = 2, mode: str = "train", precision: str = "fp32") -> float:
    """FLOPs of one sample's training step (forward + backward) or forward pass.

    A task that offers a twin for counting (`flops_twin()`, a context manager giving e.g. a meta-device copy) is
    counted on the twin; otherwise see count_step_flops (`precision`: the autocast it counts under; the count is
    the same in every precision). Raises ValueError for a batch below 1 or an unknown mode.
    """
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got '{mode}'")
    twin = getattr(task, "flops_twin", None)
    if twin is not None:
        with twin() as counted:
            return count_step_flops(counted, batch, mode)
    return count_step_flops(task, batch, mode, precision)


def count_step_flops(task: TrainTask, batch: int = 2, mode: str = "train", precision: str = "fp32") -> float:
    """FLOPs per sample of the task's step at `batch`, counted by running it under FlopCounterMode.

    A task whose step is not "loss, backward" (a GAN with two optimizers) provides
    `forward_backward(batch, amp)`, which runs its forward and backward passes without stepping; the
    others are counted as `task.loss(batch).backward()`, under `precision`'s autocast (no loss scaling: nothing
    steps). The formulas count shapes, so the precision does not change the count; counting in the scan's own
    precision makes the convolutions choose the cuDNN plans (cached by shape and dtype) that its next trial at the
    same batch uses, instead of fp32 ones it never runs (a bf16 batch-1 trial of a small CNN on an H200 then repeated
    3-8 s of set-up that an fp32 one, after an fp32 count, did not: reports/zoo/h200/results). Gradients are cleared
    afterwards and the weights are not changed. Raises ValueError for a batch below 1 or an unknown mode.
    """
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got '{mode}'")
    model = task.model
    was_training = model.training
    inputs = task.make_batch(batch)
    counter = _counter()
    amp = Amp(precision if task.device.type in ("cuda", "cpu") else "fp32", task.device)  # no autocast on meta
    try:
        with sdpa_kernel(SDPBackend.MATH):
            if mode == "train":
                model.train()
                with counter:
                    forward_backward = getattr(task, "forward_backward", None)
                    if forward_backward is not None:
                        forward_backward(inputs, Amp(precision, task.device))
                    else:
                        with amp.autocast():
                            loss = task.loss(inputs)
                        loss.backward()
            else:
                model.eval()
                with torch.no_grad(), counter, amp.autocast():
                    task.infer(inputs)
    finally:
        for p in model.parameters():
            p.grad = None
        model.train(was_training)
    return counter.get_total_flops() / batch


def workload_flops_per_sample(
    family_builder: str,
    params: dict[str, Any],
    optimizer: dict[str, Any],
    mode: str = "train",
    batch: int = 2,
    device: str | torch.device = "meta",
) -> float:
    """Build a workload from its registry entry's family builder ("module:function", as in
    workloads.families.BUILDERS) on `device` (meta by default: nothing is allocated) and count its FLOPs per sample.

    Raises whatever the builder raises; a builder that cannot build on the meta device (one that
    checks its initialised weights' values) needs a real device here.
    """
    module_name, func = family_builder.split(":")
    builder = getattr(importlib.import_module(module_name), func)
    task = builder(params, optimizer, torch.device(device))
    return flops_per_sample(task, batch=batch, mode=mode)
