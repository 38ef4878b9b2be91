"""Pix2PixHD (Wang et al., CVPR 2018), label map -> photo, written here from the paper's description.

One training step is a generator update followed by a discriminator update, both losses computed
from one forward pass (so the generator's graph, three discriminator passes and the VGG pass are
alive together, which is what makes this model famous for needing ~21 GB at batch 1 in FP32):

- generator G = G1 (global generator at half resolution: 7x7 conv, 4 stride-2 downsamplings to
  1024 channels, 9 residual blocks, 4 transposed-conv upsamplings) + G2 (one local enhancer at full
  resolution: 7x7 conv to ngf, one stride-2 conv, element-wise sum with G1's last feature map,
  3 residual blocks, one upsampling, 7x7 conv to RGB, tanh). Instance norm, ReLU, reflection pad.
- discriminator D = three 70x70-style PatchGANs (4x4 convs, ndf 64, 3 strided layers, LeakyReLU 0.2,
  instance norm) on the image at 1, 1/2 and 1/4 scale; each returns its intermediate features.
- losses: LSGAN; discriminator feature matching (x10); VGG19 perceptual loss (x10) with a VGG19
  written here with random frozen weights (no torchvision, no download).
- Adam(0.5, 0.999) for G and D, one GradScaler shared by both optimizers under fp16.

The input is 35 one-hot label channels plus one instance-boundary channel (Cityscapes at 2048x1024).
This module holds the parameters and the training step; the networks are in pix2pixhd_nets.py.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Sequence, cast

import torch
import torch.nn.functional as F

from .base import Amp, TrainTask, make_optimizer, on_cuda
from .pix2pixhd_nets import Generator, Pix2PixHD, init_weights

DEFAULTS: dict[str, Any] = {
    "width": 2048,
    "height": 1024,
    "label_nc": 35,
    "instance_edges": True,
    "output_nc": 3,
    "ngf": 32,
    "local_enhancers": 1,
    "global_downsamplings": 4,
    "global_blocks": 9,
    "local_blocks": 3,
    "ndf": 64,
    "d_layers": 3,
    "d_scales": 3,
    "vgg_width": 64,
    "lambda_feat": 10.0,
    "lambda_vgg": 10.0,
    "edge_density": 0.05,
    "channels_last": True,
}


def _params(params: dict[str, Any]) -> dict[str, Any]:
    """Defaults filled in, types fixed. Raises ValueError for a resolution the generator cannot halve
    down to its bottleneck, or an unknown key."""
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"pix2pixhd: unknown parameter(s) {', '.join(sorted(unknown))}")
    p = {**DEFAULTS, **params}
    for key in (
        "width",
        "height",
        "label_nc",
        "output_nc",
        "ngf",
        "local_enhancers",
        "global_downsamplings",
        "global_blocks",
        "local_blocks",
        "ndf",
        "d_layers",
        "d_scales",
        "vgg_width",
    ):
        p[key] = int(p[key])
    for key in ("lambda_feat", "lambda_vgg", "edge_density"):
        p[key] = float(p[key])
    p["instance_edges"], p["channels_last"] = bool(p["instance_edges"]), bool(p["channels_last"])
    factor = 2 ** (p["local_enhancers"] + p["global_downsamplings"])
    if p["width"] % factor or p["height"] % factor:
        raise ValueError(
            f"pix2pixhd: {p['width']}x{p['height']} must be divisible by {factor} "
            f"(2^(local_enhancers + global_downsamplings))"
        )
    # reflection padding of 1 needs a bottleneck of at least 2x2
    if p["width"] // factor < 2 or p["height"] // factor < 2:
        raise ValueError(f"pix2pixhd: {p['width']}x{p['height']} leaves a bottleneck smaller than 2x2")
    return p


def _lsgan(preds: list[list[torch.Tensor]], target: float) -> torch.Tensor:
    """Least-squares GAN loss summed over the discriminator scales (the last stage is the prediction)."""
    # sum() from 0 over tensors gives a tensor: the cast says so, and changes no op of the traced step
    return cast(torch.Tensor, sum(F.mse_loss(feats[-1], torch.full_like(feats[-1], target)) for feats in preds))


class Pix2PixHDTask(TrainTask):
    model: Pix2PixHD
    unit = "images"
    compile_targets = ("generator", "discriminator", "vgg")  # the container itself has no forward

    def __init__(self, params: dict[str, Any], optimizer: dict[str, Any], device: torch.device) -> None:
        p = _params(params)
        # Built directly on the device (on CUDA the init runs there in milliseconds; on the meta
        # device nothing is allocated, for parameter and FLOP counts at full size).
        with device:
            model = Pix2PixHD(p)
            init_weights(model)
        self.channels_last = p["channels_last"] and on_cuda(device)
        if self.channels_last:
            # Module.to takes memory_format; torch's typed overloads leave it out
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        super().__init__(model, optimizer, device)
        self.p = p
        self.in_channels = p["label_nc"] + (1 if p["instance_edges"] else 0)
        self.g_params = list(model.generator.parameters())
        self.d_params = list(model.discriminator.parameters())

    # -- inputs -----------------------------------------------------------------------------------
    def _format(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def make_batch(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(label map, real photo): 35 one-hot label channels + an instance-boundary channel, and an
        RGB image in tanh's range, all at full resolution."""
        h, w, d = self.p["height"], self.p["width"], self.device
        ids = torch.randint(0, self.p["label_nc"], (n, 1, h, w), device=d)
        labels = torch.zeros(n, self.p["label_nc"], h, w, device=d).scatter_(1, ids, 1.0)
        if self.p["instance_edges"]:
            edges = (torch.rand(n, 1, h, w, device=d) < self.p["edge_density"]).float()
            labels = torch.cat([labels, edges], dim=1)
        real = torch.rand(n, self.p["output_nc"], h, w, device=d) * 2 - 1
        return self._format(labels), self._format(real)

    # -- losses -----------------------------------------------------------------------------------
    def losses(self, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(generator loss, discriminator loss) from one forward pass (called inside autocast).

        The generator loss does not reach D's weights through `fake.detach()`, but it does through
        D(label, fake): `backward_and_step` restricts that backward to G's parameters.
        """
        label, real = batch
        model = self.model
        fake = model.generator(label)
        pred_real = model.discriminator(torch.cat([label, real], dim=1))
        pred_fake_d = model.discriminator(torch.cat([label, fake.detach()], dim=1))
        pred_fake_g = model.discriminator(torch.cat([label, fake], dim=1))
        loss_d = 0.5 * (_lsgan(pred_real, 1.0) + _lsgan(pred_fake_d, 0.0))

        gan = _lsgan(pred_fake_g, 1.0)
        # feature matching: every stage but the prediction, real features as fixed targets
        fm = sum(
            F.l1_loss(f, r.detach())
            for fs, rs in zip(pred_fake_g, pred_real, strict=True)
            for f, r in zip(fs[:-1], rs[:-1], strict=True)
        )
        with torch.no_grad():
            vgg_real = model.vgg(real)
        vgg = sum(F.l1_loss(f, r) for f, r in zip(model.vgg(fake), vgg_real, strict=True))
        loss_g = gan + self.p["lambda_feat"] * fm + self.p["lambda_vgg"] * vgg
        return loss_g, loss_d

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Both losses summed: a single number for callers that want one (the step uses them apart)."""
        loss_g, loss_d = self.losses(batch)
        return loss_g + loss_d

    def _backward(self, loss: torch.Tensor, params: Sequence[torch.Tensor], amp: Amp | None) -> None:
        scaled = amp.scaler.scale(loss) if amp is not None and amp.scaler is not None else loss
        scaled.backward(inputs=params)

    def forward_backward(
        self, batch: tuple[torch.Tensor, torch.Tensor], amp: Amp | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward and both backward passes without optimizer steps (what flops.py counts)."""
        with amp.autocast() if amp is not None else nullcontext():
            loss_g, loss_d = self.losses(batch)
        self._backward(loss_g, self.g_params, amp)
        self._backward(loss_d, self.d_params, amp)
        return loss_g.detach(), loss_d.detach()

    def start(self) -> None:
        """Fresh Adam state for G and for D (it appears at the first step)."""
        self.model.train()
        self.optimizers = [
            make_optimizer(self.g_params, self.optimizer_spec, self.device),
            make_optimizer(self.d_params, self.optimizer_spec, self.device),
        ]

    def train_step(self, batch: tuple[torch.Tensor, torch.Tensor], amp: Amp) -> torch.Tensor:
        """Generator update, then discriminator update; one GradScaler (amp) serves both optimizers
        and is updated once per step. Returns the generator's loss."""
        opt_g, opt_d = self.optimizers
        with amp.autocast():
            loss_g, loss_d = self.losses(batch)
        # D's weights get no gradient from G's loss: the backward is restricted to G's parameters
        # (a careful user's choice; the alternative computes D weight gradients only to discard them).
        self._backward(loss_g, self.g_params, amp)
        amp.step(opt_g)
        self._backward(loss_d, self.d_params, amp)
        amp.step(opt_d)
        amp.update()
        opt_g.zero_grad(set_to_none=True)
        opt_d.zero_grad(set_to_none=True)
        return loss_g.detach()

    def infer(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Synthesis: the generator alone."""
        return self.model.generator(batch[0])

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        count = lambda m: sum(q.numel() for q in m.parameters())  # noqa: E731
        info.update(
            parameters=count(self.model.generator) + count(self.model.discriminator),
            generator_parameters=count(self.model.generator),
            discriminator_parameters=count(self.model.discriminator),
            vgg_parameters_frozen=count(self.model.vgg),
            resolution=f"{self.p['width']}x{self.p['height']}",
            input_channels=self.in_channels,
            channels_last=self.channels_last,
            norm="instance",
            optimizers=2,
            step="G update then D update, losses from one forward",
        )
        return info


def build(params: dict[str, Any], optimizer: dict[str, Any], device: torch.device) -> Pix2PixHDTask:
    """The Pix2PixHD task on `device` (cpu, cuda or meta). Raises ValueError for bad parameters."""
    return Pix2PixHDTask(params, optimizer, device)


def generator_parameters(params: dict[str, Any] | None = None) -> int:
    """Parameter count of the generator for `params` (defaults: the paper's 2048x1024 setting),
    counted on the meta device without allocating."""
    p = _params(params or {})
    with torch.device("meta"):
        g = Generator.of(p)
    return sum(q.numel() for q in g.parameters())
