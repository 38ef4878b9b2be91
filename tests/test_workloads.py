"""The large-model workloads on the CPU: tiny variants train, full sizes are counted on meta.

Each tiny variant (toy-*) is built through the registry and its family's builder, exactly as the trial
process does, and takes real training steps: the loss is finite and every trainable weight moves.
The full-size models are only ever built on the meta device (no storage), to check parameter counts
and shapes against the published figures.

timm imports torchvision when its package loads (FrozenBatchNorm2d in timm.layers, transforms in
timm.data), but the model code of nasnetalarge and resnet50 never calls torchvision. Where no usable
torchvision is installed (none, or the PyPI CUDA wheel, which cannot load on CPU torch), the timm
tests install a stand-in package for the duration of this module: every torchvision name exists and
any use of one raises, so a passing test proves no torchvision code ran.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys

import pytest

torch = pytest.importorskip("torch")

from memprobe.core.workload.registry import load_registry  # noqa: E402
from memprobe.workloads import pix2pixhd, pix2pixhd_nets, translation, vision  # noqa: E402
from memprobe.workloads.base import Amp, make_optimizer  # noqa: E402
from memprobe.workloads.families import BUILDERS  # noqa: E402
from torchvision_standin import StandInFinder, forget, install_standin, torchvision_usable  # noqa: E402

CPU = torch.device("cpu")
META = torch.device("meta")
REAL = {
    "bert-large-squad": "toy-bert-squad",
    "transformer-big": "toy-transformer",
    "nasnet-large": "toy-nasnet",
    "resnet50": "toy-resnet",
    "pix2pixhd": "toy-pix2pixhd",
    "pix2pixhd-1024": "toy-pix2pixhd",
}
TIMM_TOYS = ("toy-nasnet", "toy-resnet")
TORCH_TOYS = ("toy-bert-squad", "toy-transformer", "toy-pix2pixhd")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models gain nothing from threads, and on a shared 2-core machine OpenMP threads that
    spin against other processes make each small op take milliseconds."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --- timm without torchvision ------------------------------------------------------------------


@pytest.fixture(scope="module")
def timm_ready():
    """timm importable for this module's tests: the real torchvision if it works, else the stand-in."""
    if importlib.util.find_spec("timm") is None:
        pytest.skip("timm is not installed")
    if torchvision_usable():
        yield "torchvision"
        return
    # memprobe itself may have put the stand-in in place (an installed torchvision that cannot load:
    # memprobe.workloads.torchvision_guard); then it stays, as it would in memprobe.
    ours = not any(isinstance(f, StandInFinder) for f in sys.meta_path)
    finder = install_standin()
    try:
        vision.load_timm()
        yield "stand-in"
    finally:
        if ours:
            sys.meta_path.remove(finder)
            forget(("torchvision", "timm"))


# --- registry ----------------------------------------------------------------------------------


def test_registry_entries():
    registry = load_registry()
    expected = {
        "bert-large-squad": ("bert-squad", "sequences"),
        "transformer-big": ("transformer-translation", "tokens"),
        "nasnet-large": ("timm-classifier", "images"),
        "resnet50": ("timm-classifier", "images"),
        "pix2pixhd": ("pix2pixhd", "images"),
        "pix2pixhd-1024": ("pix2pixhd", "images"),
    }
    for name, (family, unit) in expected.items():
        w = registry[name]
        assert (w.family, w.unit, w.test_only) == (family, unit, False)
        toy = registry[REAL[name]]
        assert toy.test_only and toy.family == w.family  # same code path, smaller parameters
    assert registry["pix2pixhd"].params["width"] == 2048 and registry["pix2pixhd"].params["height"] == 1024
    assert registry["pix2pixhd-1024"].params["width"] == 1024 and registry["pix2pixhd-1024"].params["height"] == 512
    assert registry["pix2pixhd"].optimizer == {"name": "adam", "lr": 2.0e-4, "betas": [0.5, 0.999]}
    assert registry["nasnet-large"].params["model"] == "nasnetalarge"
    assert registry["nasnet-large"].params["image_size"] == 331
    assert registry["resnet50"].params["model"] == "resnet50" and registry["resnet50"].params["image_size"] == 224
    for name in ("nasnet-large", "resnet50"):
        assert registry[name].optimizer["name"] == "sgd" and registry[name].optimizer["momentum"] == 0.9
    assert registry["transformer-big"].optimizer["betas"] == [0.9, 0.98]
    assert registry["bert-large-squad"].params["seq_len"] == 384


def test_every_family_the_registry_names_has_a_builder_and_no_other():
    from memprobe.core.workload.registry import FAMILIES

    assert sorted(FAMILIES) == sorted(BUILDERS)


def test_every_family_module_imports_without_timm_working():
    # the trial process preloads the family module; vision must load even where timm cannot
    for target in BUILDERS.values():
        module, func = target.split(":")
        assert callable(getattr(importlib.import_module(module), func))


@pytest.mark.skipif(
    importlib.util.find_spec("torchvision") is not None,
    reason="torchvision is installed (working, or replaced by the stand-in when broken), so timm imports",
)
def test_load_timm_says_why_without_torchvision():
    if any(isinstance(f, StandInFinder) for f in sys.meta_path):
        pytest.skip("the stand-in torchvision is active")
    forget(("timm",))
    with pytest.raises(ImportError, match="torchvision"):
        vision.load_timm()


# --- the tiny variants train -------------------------------------------------------------------


def build(name: str, device: torch.device = CPU):
    w = load_registry()[name]
    module, func = BUILDERS[w.family].split(":")
    return getattr(importlib.import_module(module), func)(w.params, w.optimizer, device)


def check_trains(name: str) -> None:
    """Two steps (fp32, then bf16 autocast) through the task's own train_step: losses finite, every
    trainable weight changed (timm's ResNet zero-initialises the last BN of each block, so some
    weights only get a gradient from the second step on), frozen weights untouched. Seeded: at batch 2 a weight's
    gradient can be exactly zero for some random initialisations (a BatchNorm over 1x1 maps, all cut by the ReLU
    after it), and the tests before this one in a worker (pytest -n) decide the generator's state otherwise."""
    torch.manual_seed(0)
    task = build(name)
    task.start()
    batch = task.make_batch(2)
    trainable = {n: p.detach().clone() for n, p in task.model.named_parameters() if p.requires_grad}
    frozen = {n: p.detach().clone() for n, p in task.model.named_parameters() if not p.requires_grad}
    for precision in ("fp32", "bf16"):
        loss = task.train_step(batch, Amp(precision, CPU))
        assert loss.dim() == 0 and math.isfinite(loss.item()), (name, precision, loss)
    params = dict(task.model.named_parameters())
    unchanged = [n for n, before in trainable.items() if torch.equal(before, params[n])]
    assert not unchanged, f"{name}: a step left {unchanged[:3]} unchanged"
    assert all(torch.equal(before, params[n]) for n, before in frozen.items())
    assert all(p.grad is None for p in task.model.parameters())  # zero_grad(set_to_none=True)
    assert len(task.optimizers) >= 1 and all(opt.state for opt in task.optimizers)
    task.stop()
    assert task.optimizers == []
    out = task.infer_step(task.make_batch(3), Amp("fp32", CPU))
    first = out[0] if isinstance(out, tuple) else out
    assert first.shape[0] == 3 and torch.isfinite(first).all()
    info = task.describe()
    assert info["parameters"] > 0 and info["units_per_sample"] == task.units_per_sample
    assert info["optimizer_fused"] is False  # foreach on the CPU, fused on CUDA


@pytest.mark.parametrize("name", TORCH_TOYS)
def test_tiny_variant_trains(name):
    check_trains(name)


@pytest.mark.parametrize("name", TIMM_TOYS)
def test_tiny_timm_variant_trains(name, timm_ready):
    check_trains(name)


def test_units():
    assert build("toy-transformer").units_per_sample == 12  # target tokens per sentence pair
    for name in ("toy-bert-squad", "toy-pix2pixhd"):
        assert build(name).units_per_sample == 1


# --- Pix2PixHD ---------------------------------------------------------------------------------


def test_pix2pixhd_generator_matches_paper_scale():
    # global generator at ngf 64 (4 downsamplings to 1024, 9 residual blocks, no output layer):
    # 182,537,344; local enhancer at ngf 32 (front, 3 residual blocks, up, RGB): 319,715
    g = pix2pixhd.generator_parameters()
    assert g == 182_857_059
    assert abs(g - 183e6) / 183e6 < 0.01


def test_pix2pixhd_full_size_on_meta():
    task = build("pix2pixhd", META)
    info = task.describe()
    assert info["generator_parameters"] == 182_857_059
    assert info["discriminator_parameters"] == 3 * 2_801_601  # three 2.8 M PatchGANs
    assert info["resolution"] == "2048x1024" and info["input_channels"] == 36
    assert info["channels_last"] is False  # CUDA only
    label, real = task.make_batch(1)
    assert label.shape == (1, 36, 1024, 2048) and real.shape == (1, 3, 1024, 2048)
    with torch.no_grad():
        assert task.model.generator(label).shape == (1, 3, 1024, 2048)
        preds = task.model.discriminator(torch.cat([label, real], 1))
    assert [p[-1].shape[1] for p in preds] == [1, 1, 1]
    widths = [[f.shape[1] for f in p] for p in preds]
    assert widths == [[64, 128, 256, 512, 1]] * 3
    assert build("pix2pixhd-1024", META).describe()["generator_parameters"] == 182_857_059


def test_pix2pixhd_tiny_shapes():
    task = build("toy-pix2pixhd")
    label, real = task.make_batch(2)
    assert label.shape == (2, 36, 32, 64) and real.shape == (2, 3, 32, 64)
    # one-hot labels: exactly one of the 35 label channels is set per pixel; the edge map is binary
    assert torch.equal(label[:, :35].sum(1), torch.ones(2, 32, 64))
    assert set(label[:, 35].unique().tolist()) <= {0.0, 1.0}
    model = task.model
    with torch.no_grad():
        fake = model.generator(label)
        assert fake.shape == real.shape and fake.abs().max() <= 1  # tanh
        preds = model.discriminator(torch.cat([label, fake], 1))
        assert len(preds) == 3 and all(len(p) == 3 + 2 for p in preds)  # 3 strided + 1 + prediction
        heights = [p[-1].shape[2] for p in preds]
        assert heights[0] > heights[1] > heights[2]  # 1, 1/2, 1/4 scale
        feats = model.vgg(real)
    assert [f.shape[1] for f in feats] == [8, 16, 32, 64, 64]  # relu1_1 .. relu5_1 at width 8
    assert [f.shape[2] for f in feats] == [32, 16, 8, 4, 2]
    assert not any(p.requires_grad for p in model.vgg.parameters())


def test_pix2pixhd_vgg19_layout():
    # the full VGG19 conv stack up to relu5_1: 13 convs with the standard widths
    vgg = pix2pixhd_nets.VGG19Features(64).to(META)
    convs = [m.out_channels for m in vgg.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs == [64, 64, 128, 128, 256, 256, 256, 256, 512, 512, 512, 512, 512]
    assert sum(p.numel() for p in vgg.parameters()) == 12_944_960


def test_pix2pixhd_step_updates_g_and_d_with_one_scaler():
    torch.manual_seed(0)
    task = build("toy-pix2pixhd")
    task.start()
    opt_g, opt_d = task.optimizers
    assert opt_g.defaults["betas"] == (0.5, 0.999) and opt_d.defaults["lr"] == 2e-4
    assert {id(p) for p in opt_g.param_groups[0]["params"]} == {id(p) for p in task.model.generator.parameters()}
    assert {id(p) for p in opt_d.param_groups[0]["params"]} == {id(p) for p in task.model.discriminator.parameters()}
    g_before = [p.detach().clone() for p in task.model.generator.parameters()]
    d_before = [p.detach().clone() for p in task.model.discriminator.parameters()]
    batch = task.make_batch(2)
    amp = Amp("fp16", CPU)
    # fp16 with one GradScaler for both optimizers; a low initial scale so that the first steps are
    # not all skipped for overflow while the scaler backs off (which takes ~8 steps from 2**16 here)
    amp.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4)
    for _ in range(2):
        assert math.isfinite(task.train_step(batch, amp).item())
    assert opt_g.state and opt_d.state
    assert all(not torch.equal(b, p) for b, p in zip(g_before, task.model.generator.parameters(), strict=True))
    assert all(not torch.equal(b, p) for b, p in zip(d_before, task.model.discriminator.parameters(), strict=True))


def test_pix2pixhd_rejects_bad_parameters():
    with pytest.raises(ValueError, match="divisible by 32"):
        pix2pixhd.build({"width": 1000, "height": 512}, {"name": "adam"}, META)
    with pytest.raises(ValueError, match="unknown parameter"):
        pix2pixhd.build({"resolution": 512}, {"name": "adam"}, META)


# --- Transformer-Big ---------------------------------------------------------------------------


def test_transformer_big_parameters():
    # shared embedding 32768 x 1024 (also the output projection) = 33,554,432
    # encoder layer: self-attention 4 (1024^2 + 1024) + FFN 2 (1024 x 4096) + 4096 + 1024 + 2 LayerNorms
    #   = 12,596,224 (x6); decoder layer adds encoder-decoder attention: 16,796,672 (x6)
    # total 209,911,808: fairseq's transformer_vaswani_wmt_en_de_big with a 32768 joined dictionary
    # (the paper's 213 M used a 37000 vocabulary: 4232 x 1024 more)
    task = build("transformer-big", META)
    assert task.describe()["parameters"] == 209_911_808
    assert 33_554_432 + 6 * 12_596_224 + 6 * 16_796_672 == 209_911_808
    embeddings = [m for m in task.model.modules() if isinstance(m, torch.nn.Embedding)]
    assert len(embeddings) == 1  # tied: one matrix for encoder, decoder and output projection
    pre = translation.build({"pre_norm": True}, {"name": "adam"}, META)
    assert pre.describe()["parameters"] == 209_911_808 + 2 * 2048  # a final LayerNorm per stack


def test_transformer_big_describe_reports_tokens():
    info = build("transformer-big", META).describe()
    assert info["tokens_per_sample"] == 128 and info["target_tokens_per_sample"] == 128
    assert info["units_per_sample"] == 128 and info["attention"] == "sdpa" and info["norm"] == "post-norm"
    assert info["dropout"] == 0.3 and info["label_smoothing"] == 0.1


def test_transformer_decoder_is_causal_and_logits_tied():
    task = build("toy-transformer")
    model = task.model.eval()
    batch = task.make_batch(2)
    with torch.no_grad():
        logits = model(batch["src"], batch["prev_tgt"])
        assert logits.shape == (2, 12, 1000)
        changed = batch["prev_tgt"].clone()
        changed[:, 6:] = translation.FIRST_TOKEN + 1
        other = model(batch["src"], changed)
    assert torch.allclose(logits[:, :6], other[:, :6], atol=1e-5)  # earlier positions do not see later ones
    assert not torch.allclose(logits[:, 6:], other[:, 6:])
    assert torch.equal(batch["prev_tgt"][:, 1:], batch["tgt"][:, :-1])  # teacher forcing: shifted right


# --- BERT SQuAD --------------------------------------------------------------------------------


def test_bert_large_squad_full_size_on_meta():
    task = build("bert-large-squad", META)
    info = task.describe()
    # BERT-Large encoder and embeddings (no pooler) + the 1024 -> 2 span head
    assert info["parameters"] == 334_094_338
    assert info["attention"] == "sdpa" and info["seq_len"] == 384
    batch = task.make_batch(4)
    assert batch["input_ids"].shape == (4, 384)


def test_bert_squad_answers_lie_in_the_passage():
    batch = build("toy-bert-squad").make_batch(64)
    start, end = batch["start_positions"], batch["end_positions"]
    assert (start >= 16).all() and (end >= start).all() and (end < 64).all()
    assert (batch["token_type_ids"][:, :16] == 0).all() and (batch["token_type_ids"][:, 16:] == 1).all()


# --- timm classifiers --------------------------------------------------------------------------


def test_timm_full_size_on_meta(timm_ready):
    nasnet = build("nasnet-large", META)
    assert nasnet.describe()["parameters"] == 88_753_150  # timm's nasnetalarge: 88.75 M
    assert nasnet.make_batch(2)[0].shape == (2, 3, 331, 331)
    resnet = build("resnet50", META)
    assert resnet.describe()["parameters"] == 25_557_032  # ResNet-50: 25.56 M
    info = resnet.describe()
    assert info["timm_model"] == "resnet50" and info["resolution"] == "224x224" and info["channels_last"] is False


def test_timm_flops_on_meta(timm_ready):
    from memprobe.training.flops import flops_per_sample

    # published forward cost: ResNet-50 4.09 GMACs at 224, NASNet-A Large 23.8 GMACs at 331
    resnet = build("resnet50", META)
    forward = flops_per_sample(resnet, 2, "infer")
    assert forward == pytest.approx(2 * 4.09e9, rel=0.01)
    assert flops_per_sample(resnet, 2) == pytest.approx(3 * forward, rel=0.01)
    nasnet = build("nasnet-large", META)
    forward = flops_per_sample(nasnet, 1, "infer")
    assert forward == pytest.approx(2 * 23.8e9, rel=0.01)
    # depthwise convs: backward ~ 2x forward once torch's grouped-conv weight-gradient count is fixed
    assert flops_per_sample(nasnet, 1) == pytest.approx(3 * forward, rel=0.01)


def test_flops_are_counted_alike_under_every_precision(timm_ready):
    # the count runs under the scan's own autocast (its cuDNN plans are the next trial's); the formulas count shapes
    from memprobe.training.flops import flops_per_sample

    resnet = build("toy-resnet", CPU)
    fp32 = flops_per_sample(resnet, 2)
    assert fp32 > 0 and flops_per_sample(resnet, 2, precision="bf16") == fp32
    assert flops_per_sample(resnet, 2, "infer", precision="bf16") == flops_per_sample(resnet, 2, "infer")
    assert flops_per_sample(build("resnet50", META), 1, precision="bf16") > 0  # no autocast on the meta device


def test_sgd_is_never_fused_even_on_cuda():
    # fused SGD advances its momentum on the steps an fp16 GradScaler skips (seen on the H100: every
    # resnet50 fp16 update skipped); Adam and AdamW stay fused on CUDA
    params = [torch.nn.Parameter(torch.zeros(2))]
    sgd = make_optimizer(params, {"name": "sgd", "lr": 0.1}, torch.device("cuda"))
    assert not sgd.defaults.get("fused") and sgd.defaults.get("foreach") is True
    adamw = make_optimizer(params, {"name": "adamw", "lr": 0.1}, torch.device("cuda"))
    assert adamw.defaults.get("fused") is True


# --- --compile ---------------------------------------------------------------------------------


def test_compiled_toy_step_trains_and_says_what_was_compiled():
    # a real torch.compile (inductor, C++ on the CPU): the step still trains the same parameters
    task = build("toy")
    task.compile()
    assert task.describe()["compiled"] == [type(task.model).__name__]
    task.start()
    before = [p.detach().clone() for p in task.model.parameters()]
    loss = task.train_step(task.make_batch(4), Amp("fp32", CPU))
    assert torch.isfinite(loss)
    assert all(not torch.equal(b, p) for b, p in zip(before, task.model.parameters()))
    assert all(opt.state for opt in task.optimizers)


def test_pix2pixhd_compiles_its_three_networks_not_the_container():
    task = build("toy-pix2pixhd")
    assert task.compile_targets == ("generator", "discriminator", "vgg")
    for name in task.compile_targets:
        assert isinstance(task.model.get_submodule(name), torch.nn.Module)
    assert build("toy").describe()["compiled"] is None  # eager unless asked
