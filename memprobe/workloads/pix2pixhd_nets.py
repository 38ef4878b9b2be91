"""Pix2PixHD's networks: the generator (G1 + local enhancers), the multiscale PatchGAN and the frozen VGG19.

Written here from the paper's description (Wang et al., CVPR 2018); the training step and the parameters are
in pix2pixhd.py.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# VGG19's convolution stack ('features'): numbers are conv output widths, "M" a 2x2 max-pool.
VGG19_LAYOUT: tuple[int | str, ...] = (
    64,
    64,
    "M",
    128,
    128,
    "M",
    256,
    256,
    256,
    256,
    "M",
    512,
    512,
    512,
    512,
    "M",
    512,
    512,
    512,
    512,
    "M",
)
VGG_TAPS = 5  # the perceptual loss compares relu1_1, relu2_1, relu3_1, relu4_1 and relu5_1


# --- generator ---------------------------------------------------------------------------------


def _conv_in_relu(cin: int, cout: int, kernel: int, stride: int = 1) -> list[nn.Module]:
    """A conv + instance norm + ReLU; 7x7 convs use reflection padding, strided 3x3 convs zero padding."""
    if kernel == 7:
        return [nn.ReflectionPad2d(3), nn.Conv2d(cin, cout, 7), nn.InstanceNorm2d(cout), nn.ReLU(True)]
    return [nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2), nn.InstanceNorm2d(cout), nn.ReLU(True)]


def _up_in_relu(cin: int, cout: int) -> list[nn.Module]:
    """A transposed conv that doubles the resolution exactly, + instance norm + ReLU."""
    return [
        nn.ConvTranspose2d(cin, cout, 3, stride=2, padding=1, output_padding=1),
        nn.InstanceNorm2d(cout),
        nn.ReLU(True),
    ]


def _to_rgb(cin: int, out_channels: int) -> list[nn.Module]:
    return [nn.ReflectionPad2d(3), nn.Conv2d(cin, out_channels, 7), nn.Tanh()]


class ResidualBlock(nn.Module):
    """Two reflection-padded 3x3 convs with instance norm, added to the input (Johnson et al. 2016)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.ReflectionPad2d(1),
            nn.Conv2d(channels, channels, 3),
            nn.InstanceNorm2d(channels),
            nn.ReLU(True),
            nn.ReflectionPad2d(1),
            nn.Conv2d(channels, channels, 3),
            nn.InstanceNorm2d(channels),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class GlobalGenerator(nn.Module):
    """G1: downsample `downsamplings` times (doubling the width each time), residual blocks, upsample back.

    With `to_rgb` False it stops at the last upsampling and returns the feature map a local enhancer adds
    to its own (the paper drops G1's output layer when G2 is attached).
    """

    def __init__(
        self, in_channels: int, out_channels: int, ngf: int, downsamplings: int, blocks: int, to_rgb: bool
    ) -> None:
        super().__init__()
        layers = _conv_in_relu(in_channels, ngf, 7)
        for i in range(downsamplings):
            layers += _conv_in_relu(ngf * 2**i, ngf * 2 ** (i + 1), 3, stride=2)
        top = ngf * 2**downsamplings
        layers += [ResidualBlock(top) for _ in range(blocks)]
        for i in range(downsamplings, 0, -1):
            layers += _up_in_relu(ngf * 2**i, ngf * 2 ** (i - 1))
        if to_rgb:
            layers += _to_rgb(ngf, out_channels)
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class LocalEnhancer(nn.Module):
    """G2: a full-resolution front end (7x7 conv to ngf, stride-2 conv to 2 ngf) whose output is summed
    with the coarser generator's features, then residual blocks and one upsampling back to ngf."""

    def __init__(self, in_channels: int, out_channels: int, ngf: int, blocks: int, to_rgb: bool) -> None:
        super().__init__()
        self.front = nn.Sequential(*_conv_in_relu(in_channels, ngf, 7), *_conv_in_relu(ngf, 2 * ngf, 3, stride=2))
        back = [ResidualBlock(2 * ngf) for _ in range(blocks)] + _up_in_relu(2 * ngf, ngf)
        if to_rgb:
            back += _to_rgb(ngf, out_channels)
        self.back = nn.Sequential(*back)

    def forward(self, x: torch.Tensor, coarse: torch.Tensor) -> torch.Tensor:
        return self.back(self.front(x) + coarse)


def _outputs_of_each(stages: nn.ModuleList, x: torch.Tensor) -> list[torch.Tensor]:
    """Run `stages` in sequence and keep every stage's output (discriminator feature matching and
    the perceptual loss read them all)."""
    outputs = []
    for stage in stages:
        x = stage(x)
        outputs.append(x)
    return outputs


def _half(x: torch.Tensor) -> torch.Tensor:
    """Halve the resolution with a 3x3 average (borders average only real pixels)."""
    return F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)


def generator_inputs(p: dict[str, Any]) -> int:
    """The generator's input channels for the settings `p`: the label map, and one for instance edges."""
    return p["label_nc"] + (1 if p["instance_edges"] else 0)


class Generator(nn.Module):
    """G1 with `local_enhancers` local enhancers (the paper's 2048x1024 setting uses one, ngf 32, so G1
    runs at 1024x512 with 64 base channels)."""

    @classmethod
    def of(cls, p: dict[str, Any]) -> "Generator":
        """The generator of the workload's settings `p` (the Pix2PixHD module's and the parameter count's)."""
        keys = ("output_nc", "ngf", "local_enhancers", "global_downsamplings", "global_blocks", "local_blocks")
        return cls(generator_inputs(p), *(p[k] for k in keys))

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        ngf: int,
        local_enhancers: int,
        global_downsamplings: int,
        global_blocks: int,
        local_blocks: int,
    ) -> None:
        super().__init__()
        self.local_enhancers = local_enhancers
        self.global_g = GlobalGenerator(
            in_channels,
            out_channels,
            ngf * 2**local_enhancers,
            global_downsamplings,
            global_blocks,
            to_rgb=local_enhancers == 0,
        )
        # coarsest first: enhancer i works at 1 / 2**(local_enhancers - 1 - i) of the full resolution
        self.enhancers = nn.ModuleList(
            LocalEnhancer(
                in_channels,
                out_channels,
                ngf * 2 ** (local_enhancers - 1 - i),
                local_blocks,
                to_rgb=i == local_enhancers - 1,
            )
            for i in range(local_enhancers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pyramid = [x]
        for _ in range(self.local_enhancers):
            pyramid.append(_half(pyramid[-1]))
        out = self.global_g(pyramid[-1])
        for i, enhancer in enumerate(self.enhancers):
            out = enhancer(pyramid[self.local_enhancers - 1 - i], out)
        return out


# --- discriminator ------------------------------------------------------------------------------


class PatchDiscriminator(nn.Module):
    """A PatchGAN: 4x4 convs, `layers` stride-2 stages (width doubling up to 512) then one stride-1
    stage, LeakyReLU 0.2, instance norm after the first; a 1-channel real/fake map at the end.

    forward returns every stage's output: the feature-matching loss compares them, the last is the
    prediction.
    """

    def __init__(self, in_channels: int, ndf: int, layers: int) -> None:
        super().__init__()
        # padding 2 = ceil((4 - 1) / 2): stride-1 stages do not shrink the map at small scales
        stages = [nn.Sequential(nn.Conv2d(in_channels, ndf, 4, stride=2, padding=2), nn.LeakyReLU(0.2, True))]
        width = ndf
        for i in range(1, layers + 1):
            nxt = min(width * 2, 512)
            stride = 2 if i < layers else 1
            stages.append(
                nn.Sequential(
                    nn.Conv2d(width, nxt, 4, stride=stride, padding=2), nn.InstanceNorm2d(nxt), nn.LeakyReLU(0.2, True)
                )
            )
            width = nxt
        stages.append(nn.Sequential(nn.Conv2d(width, 1, 4, stride=1, padding=2)))
        self.stages = nn.ModuleList(stages)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return _outputs_of_each(self.stages, x)


class MultiscaleDiscriminator(nn.Module):
    """`scales` PatchGANs of the same architecture on the input at 1, 1/2, 1/4 ... resolution."""

    def __init__(self, in_channels: int, ndf: int, layers: int, scales: int) -> None:
        super().__init__()
        self.ds = nn.ModuleList(PatchDiscriminator(in_channels, ndf, layers) for _ in range(scales))

    def forward(self, x: torch.Tensor) -> list[list[torch.Tensor]]:
        out = []
        for i, d in enumerate(self.ds):
            if i:
                x = _half(x)
            out.append(d(x))
        return out


# --- VGG19 for the perceptual loss --------------------------------------------------------------


class VGG19Features(nn.Module):
    """VGG19's conv stack up to relu5_1 (the deepest layer the perceptual loss reads; the three convs
    after it would be dead weight), returning the five relu_1 activations. `width` scales every conv
    width (64 = the real VGG19) so test variants stay small."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        scale = width / 64
        slices: list[nn.Sequential] = []
        current: list[nn.Module] = []
        cin, first_in_block = 3, True
        for item in VGG19_LAYOUT:
            if isinstance(item, str):  # "M"
                current.append(nn.MaxPool2d(2))
                first_in_block = True
                continue
            cout = max(1, int(item * scale))
            current += [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(True)]
            cin = cout
            if first_in_block:
                slices.append(nn.Sequential(*current))
                current, first_in_block = [], False
                if len(slices) == VGG_TAPS:
                    break
        self.slices = nn.ModuleList(slices)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return _outputs_of_each(self.slices, x)


# --- the whole model ----------------------------------------------------------------------------


class Pix2PixHD(nn.Module):
    """G, D and the frozen VGG in one module, so that .train(), .to() and parameter counts see all."""

    def __init__(self, p: dict[str, Any]) -> None:
        super().__init__()
        in_channels = generator_inputs(p)
        self.generator = Generator.of(p)
        # D sees the label map and the image stacked (a conditional GAN)
        self.discriminator = MultiscaleDiscriminator(
            in_channels + p["output_nc"], p["ndf"], p["d_layers"], p["d_scales"]
        )
        self.vgg = VGG19Features(p["vgg_width"])
        self.vgg.requires_grad_(False)

    def train(self, mode: bool = True) -> "Pix2PixHD":
        super().train(mode)
        self.vgg.eval()  # a fixed feature extractor, never in training mode
        return self


def init_weights(model: nn.Module) -> None:
    """N(0, 0.02) conv weights and zero biases (the DCGAN/pix2pix convention the paper builds on);
    He init for the VGG so its random features neither vanish nor explode over 13 layers."""
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                if name.startswith("vgg."):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                else:
                    nn.init.normal_(m.weight, 0.0, 0.02)
                if m.bias is not None:  # every conv here has one
                    nn.init.zeros_(m.bias)
