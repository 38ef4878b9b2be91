"""LLM fine-tuning workloads (workloads/llm.py) on tiny Llama configs, their variants and nothing-fits.

The tiny configs (toy-llama: hidden 64, 2 layers, vocab 256) run through the same code as llama-1b
and llama-8b: the trial worker's Session in-process with the CPU fake allocator. transformers'
Llama config imports torchvision through its video utilities; where no usable torchvision is
installed the stand-in package is used, as for timm (see test_workloads.py).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from memprobe.core.process.protocol import FlopsRequest, MeasureRequest, Ready, SetupRequest, TrialRequest  # noqa: E402
from memprobe.core.workload.registry import load_registry  # noqa: E402
from memprobe.core.workload.variants import VariantRequest, apply_variant  # noqa: E402
from torchvision_standin import forget, install_standin, torchvision_usable  # noqa: E402

BUDGET = 64 * 2**20
REGISTRY = load_registry()
TOY = REGISTRY["toy-llama"]
HAS_PEFT = importlib.util.find_spec("peft") is not None


@pytest.fixture(autouse=True, scope="module")
def llm():
    """memprobe.workloads.llm importable (the real torchvision if it works, else the stand-in); one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    finder = None if torchvision_usable() else install_standin()
    try:
        from memprobe.workloads import llm as module

        yield module
    finally:
        torch.set_num_threads(threads)
        if finder is not None:
            sys.meta_path.remove(finder)
            forget(("torchvision",))


def build(llm, workload=TOY, device="cpu", **params):
    return llm.build({**workload.params, **params}, workload.optimizer, torch.device(device))


def session_for(workload, precision="bf16", budget=BUDGET):
    from memprobe.probe.child.worker import Session

    s = Session()
    info = s.setup(SetupRequest(workload, precision, "train", "cpu", budget))
    assert isinstance(info, Ready), info
    s.info = info
    return s


def trial(session, n):
    return session.trial(TrialRequest(batch=n, steps=3)).to_dict()


# --- the published architectures ----------------------------------------------------------------


def test_registry_has_the_llama_entries_with_published_hyper_parameters():
    one, eight = REGISTRY["llama-1b"], REGISTRY["llama-8b"]
    assert (one.family, one.unit, eight.unit) == ("llama-causal-lm", "tokens", "tokens")
    assert {k: one.params[k] for k in ("hidden", "layers", "heads", "kv_heads", "ffn", "vocab", "tied_embeddings")} == {
        "hidden": 2048,
        "layers": 16,
        "heads": 32,
        "kv_heads": 8,
        "ffn": 8192,
        "vocab": 128256,
        "tied_embeddings": True,
    }
    assert {
        k: eight.params[k] for k in ("hidden", "layers", "heads", "kv_heads", "ffn", "vocab", "tied_embeddings")
    } == {
        "hidden": 4096,
        "layers": 32,
        "heads": 32,
        "kv_heads": 8,
        "ffn": 14336,
        "vocab": 128256,
        "tied_embeddings": False,
    }
    assert (one.params["seq_len"], REGISTRY["llama-1b-4k"].params["seq_len"]) == (2048, 4096)
    assert REGISTRY["toy-llama"].test_only and not one.test_only


def test_full_size_models_have_the_published_parameter_counts(llm):
    # Built on the meta device: nothing allocated. Llama 3.2 1B: 1.24B (tied); Llama 3.1 8B: 8.03B.
    assert build(llm, REGISTRY["llama-1b"], "meta").describe()["parameters"] == 1_235_814_400
    assert build(llm, REGISTRY["llama-8b"], "meta").describe()["parameters"] == 8_030_261_248


# --- the tiny config trains through the same code ------------------------------------------------


@pytest.mark.parametrize("extra", [{}, {"checkpointing": True}, {"axis": "seq_len", "batch": 2}])
def test_tiny_llama_trains_every_parameter(llm, extra):
    from memprobe.workloads.base import Amp

    task = build(llm, **extra)
    task.start()
    before = {name: p.detach().clone() for name, p in task.model.named_parameters()}
    amp = Amp("bf16", task.device)
    batch = task.make_batch(5)
    losses = [float(task.train_step(batch, amp)) for _ in range(3)]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]  # the same batch three times: the loss goes down
    unchanged = [n for n, p in task.model.named_parameters() if torch.equal(before[n], p)]
    assert unchanged == []
    # n is the batch, or the sequence length at `batch` sequences
    assert tuple(batch["input_ids"].shape) == ((2, 5) if extra.get("axis") else (5, 32))
    assert task.units_per_sample == (2 if extra.get("axis") else 32)
    assert task.describe()["checkpointing"] == bool(extra.get("checkpointing"))


def test_bad_params_are_value_errors(llm):
    with pytest.raises(ValueError, match="axis"):
        build(llm, axis="tokens")
    with pytest.raises(ValueError, match="lora"):
        build(llm, lora=-1)
    with pytest.raises(ValueError, match="multiple of heads"):
        build(llm, hidden=66)


def test_checkpointing_lowers_the_peak_and_raises_the_edge():
    plain = session_for(replace(TOY, params={**TOY.params, "seq_len": 256}))
    try:
        plain_peak = trial(plain, 4)["peak_allocated"]
    finally:
        plain.close()
    ckpt = session_for(replace(TOY, params={**TOY.params, "seq_len": 256, "checkpointing": True}))
    try:
        ckpt_peak = trial(ckpt, 4)["peak_allocated"]
    finally:
        ckpt.close()
    assert ckpt_peak < 0.8 * plain_peak


def test_sequence_length_search_trials_and_timed_run_report_tokens_and_flops_at_n():
    variant = apply_variant(TOY, VariantRequest(search="seq-len", batch=2), ["bf16"])
    s = session_for(variant, budget=16 * 2**20)
    try:
        assert s.info.task["axis"] == "seq_len" and s.info.task["batch"] == 2
        assert trial(s, 64)["outcome"] == "fit"
        assert trial(s, 100_000)["outcome"] == "oom"
        # FLOPs per unit of n vary with n: not counted once, but at each timed n
        assert s.flops(FlopsRequest()).flops_per_sample is None
        m = s.measure(MeasureRequest(batch=64, warmup=1, steps=2)).to_dict()
        assert m["outcome"] == "fit", m
        assert m["units_per_step"] == 128 and m["unit"] == "tokens"
        assert m["units_per_s"] == pytest.approx(2 * m["samples_per_s"])
        m2 = s.measure(MeasureRequest(batch=256, warmup=1, steps=2)).to_dict()
        assert m2["flops_per_sample"] > m["flops_per_sample"]  # attention grows with the length
    finally:
        s.close()


def test_flops_per_sequence_are_counted_on_a_meta_twin_and_do_not_depend_on_the_batch(llm):
    from memprobe.training.flops import flops_per_sample

    task = build(llm)
    two, three = flops_per_sample(task, 2), flops_per_sample(task, 3)
    # equal up to a term that does not grow with the batch: transformers 5.17's rotary embedding counts one bmm
    # of inv_freq and the positions (512 FLOPs here) per forward, whatever the batch
    assert two == pytest.approx(three, rel=1e-4) and two > 0
    params = sum(p.numel() for n, p in task.model.named_parameters() if "embed" not in n)
    # at least the 6 x parameters x tokens of the matmuls (the tied head counts), plus attention
    assert two >= 6 * params * 32
    ckpt = build(llm, checkpointing=True)
    assert flops_per_sample(ckpt, 2) == two  # model FLOPs: the recomputation is not counted


@pytest.mark.skipif(not HAS_PEFT, reason="peft (the lora extra) is not installed")
def test_lora_trains_only_the_adapters_on_a_frozen_bf16_base(llm):
    from memprobe.workloads.base import Amp

    task = build(llm, lora=4)
    task.start()
    info = task.describe()
    assert info["lora_rank"] == 4 and info["frozen_weights_dtype"] == "bfloat16"
    assert 0 < info["trainable_parameters"] < info["parameters"] / 5
    trainable = [p for p in task.model.parameters() if p.requires_grad]
    assert all(p.dtype == torch.float32 for p in trainable)
    assert all(p.dtype == torch.bfloat16 for p in task.model.parameters() if not p.requires_grad)
    (optimizer,) = task.optimizers
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(trainable)
    frozen = {n: p.detach().clone() for n, p in task.model.named_parameters() if not p.requires_grad}
    amp = Amp("bf16", task.device)
    batch = task.make_batch(3)
    for _ in range(3):
        task.train_step(batch, amp)
    assert all(torch.equal(frozen[n], p) for n, p in task.model.named_parameters() if n in frozen)
    assert len(optimizer.state) == len(trainable)


@pytest.mark.skipif(not HAS_PEFT, reason="peft (the lora extra) is not installed")
def test_lora_lowers_the_peak_and_checkpointing_lowers_it_further():
    # At seq 32 weights, gradients and Adam's moments dominate: LoRA drops most of them. At seq 256
    # activations dominate (LoRA adds a few of its own): checkpointing drops most of those.
    peaks = {}
    for name, seq, request in (
        ("plain", 32, VariantRequest()),
        ("lora", 32, VariantRequest(lora=4)),
        ("lora-256", 256, VariantRequest(lora=4)),
        ("lora+ckpt-256", 256, VariantRequest(lora=4, checkpointing=True)),
    ):
        workload = replace(TOY, params={**TOY.params, "seq_len": seq})
        s = session_for(apply_variant(workload, request, ["bf16"]), budget=1 << 30)
        try:
            peaks[name] = trial(s, 4)["peak_allocated"]
        finally:
            s.close()
    assert peaks["lora"] < peaks["plain"]
    assert peaks["lora+ckpt-256"] < 0.8 * peaks["lora-256"]


# --- predict handles them -------------------------------------------------------------------------


def test_predict_traces_the_tiny_llama_in_both_axes():
    from memprobe.predict.need import trial_need_bytes

    by_batch = [trial_need_bytes(TOY, "bf16", n) for n in (1, 8)]
    assert 0 < by_batch[0] < by_batch[1]
    seq = apply_variant(TOY, VariantRequest(search="seq-len", batch=1), ["bf16"])
    by_length = [trial_need_bytes(seq, "bf16", n) for n in (32, 512)]
    assert by_length[0] < by_length[1]


# --- the whole scan over the sequence length, in trial processes ---------------------------------


@pytest.fixture
def standin_for_workers(tmp_path, monkeypatch):
    """Trial processes import transformers' Llama too: where no usable torchvision is installed, a
    sitecustomize on their PYTHONPATH installs the stand-in (a usable or absent one is left alone)."""
    tests = str(__import__("pathlib").Path(__file__).parent)
    (tmp_path / "sitecustomize.py").write_text(
        f"import sys\nsys.path.insert(0, {tests!r})\n"
        "from torchvision_standin import install_standin, torchvision_usable\n"
        "if not torchvision_usable():\n    install_standin()\n"
    )
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + (os.pathsep + path if path else ""))


@pytest.mark.slow
def test_sequence_length_scan_proves_the_edge_in_fresh_processes(standin_for_workers, tmp_path):
    from conftest import RecordingProgress
    from memprobe.core.records.results import read_result
    from memprobe.probe.scan import ScanOptions, scan_workload

    variant = apply_variant(TOY, VariantRequest(search="seq-len", batch=1), ["bf16"])
    opts = ScanOptions(precisions=["bf16"], device="cpu", cpu_budget_bytes=6 * 2**20, warmup=1, timed_steps=1)
    result, path = scan_workload(variant, opts, tmp_path, RecordingProgress())
    assert path.name.startswith("cpu_toy-llama-maxseq-b1_train_")
    p = read_result(path).precisions["bf16"]
    assert p.status == "done" and p.max_batch > 32, p.error
    assert (p.proof.fits, p.proof.fails) == (p.max_batch, p.max_batch + 1) and p.proof.verified
    assert all(c.fresh for c in p.proof.checks)
    assert p.settings.task.extra["axis"] == "seq_len" and p.settings.flops_per_sample is None
    # the timed run at the proven length: tokens per step = the length x 1 sequence, FLOPs counted there
    assert p.throughput.units_per_step == p.max_batch and p.throughput.flops_per_sample > 0
