"""Decoder-only LLM fine-tuning (Llama architecture, transformers LlamaForCausalLM) with random weights.

The model is built from a LlamaConfig with the published hyper-parameters of the model named in the
registry (no download), on the meta device and then initialised on the trial's device. One step is
causal-LM loss over every position of full-length synthetic sequences (no padding: the worst case),
backward, AdamW. Weights stay float32 (the master weights); bf16/fp16 come from autocast, as in the
rest of memprobe. Attention is PyTorch's scaled_dot_product_attention (flash/efficient on CUDA).

Memory-saving settings, each a registry parameter so it is recorded with the result:
- checkpointing: true: activation checkpointing per decoder layer (transformers'
  gradient_checkpointing_enable, non-reentrant);
- lora: r: LoRA adapters of rank r on every attention and MLP projection through `peft` (the `lora`
  extra); the frozen base weights are stored in `lora_base_dtype` (bf16 by default, as a LoRA user
  loads them), the adapters in float32, and only the adapters are given to AdamW.
The search can run over the batch (axis: batch; sequences of seq_len tokens) or over the sequence
length (axis: seq_len; `batch` sequences per step): `n` in make_batch is then the sequence length.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Any, Iterator

import torch

# Imported at module load: the trial process preloads this module before setup (see bert.py).
from memprobe.workloads.torchvision_guard import ensure_loadable

ensure_loadable()  # before timm or transformers imports torchvision (see torchvision_guard.py)
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from .base import TrainTask, make_optimizer, materialize, model_config  # noqa: E402
from .generation import WEIGHT_DTYPES, GenerateTask, GenerationSettings  # noqa: E402

AXES = ("batch", "seq_len")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def llama_config(params: dict[str, Any]) -> LlamaConfig:
    """The LlamaConfig of a registry entry's params (hidden, layers, heads, kv_heads, ffn, vocab, ...).

    Raises KeyError for a missing size and ValueError when hidden is not a multiple of heads.
    """
    hidden, heads = int(params["hidden"]), int(params["heads"])
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
    # rope_theta: transformers 5 types it out of LlamaConfig's signature (into rope_parameters); it still takes it
    config = LlamaConfig(  # type: ignore[call-arg]
        vocab_size=int(params["vocab"]),
        hidden_size=hidden,
        intermediate_size=int(params["ffn"]),
        num_hidden_layers=int(params["layers"]),
        num_attention_heads=heads,
        num_key_value_heads=int(params.get("kv_heads", heads)),
        head_dim=hidden // heads,
        max_position_embeddings=max(131072, int(params.get("seq_len", 2048))),
        rms_norm_eps=float(params.get("rms_norm_eps", 1e-5)),
        rope_theta=float(params.get("rope_theta", 500000.0)),
        tie_word_embeddings=bool(params.get("tied_embeddings", False)),
        attention_dropout=0.0,
        use_cache=False,  # training: no key/value cache is kept
    )
    config.use_cache = False
    return config


def _lora_rank(params: dict[str, Any]) -> int | None:
    value = params.get("lora")
    if value in (None, False, 0):
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"lora must be a positive rank r (e.g. 16) or null, got {value!r}")
    return value


def _apply_lora(model: torch.nn.Module, rank: int, alpha: float | None, dropout: float) -> torch.nn.Module:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:
        raise ImportError(f"lora needs peft (pip install 'memprobe[lora]'): {exc}") from exc
    config = LoraConfig(
        r=rank,
        lora_alpha=alpha if alpha is not None else 2 * rank,  # type: ignore[arg-type]  # peft says int; a float works
        lora_dropout=dropout,
        target_modules=list(LORA_TARGETS),
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


@contextmanager
def _no_packed_sequence_check() -> Iterator[None]:
    """transformers looks for packed sequences in the position ids with `.all()`, a value the meta
    device cannot give; our sequences are never packed, so that check answers "none" while counting."""
    import transformers.masking_utils as masking

    if not hasattr(masking, "find_packed_sequence_indices"):
        yield
        return
    original = masking.find_packed_sequence_indices
    masking.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking.find_packed_sequence_indices = original


class LlamaTask(TrainTask):
    """Causal-LM fine-tuning step of a Llama-architecture model; `n` is the batch or the sequence length."""

    unit = "tokens"

    def __init__(self, params: dict[str, Any], optimizer: dict[str, Any], device: torch.device) -> None:
        self.params = dict(params)
        self.axis = str(params.get("axis", "batch"))
        if self.axis not in AXES:
            raise ValueError(f"axis must be one of {', '.join(AXES)}, got '{self.axis}'")
        self.seq_len = int(params.get("seq_len", 2048))
        self.rows = int(params.get("batch", 1))  # sequences per step when the search is over the length
        if self.seq_len < 1 or self.rows < 1:
            raise ValueError("seq_len and batch must be at least 1")
        self.checkpointing = bool(params.get("checkpointing", False))
        self.lora = _lora_rank(params)
        self.base_dtype = _DTYPES[str(params.get("lora_base_dtype", "bf16"))] if self.lora else torch.float32
        config = llama_config(params)
        self.vocab = config.vocab_size
        with torch.device("meta"):
            model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa")
        if device.type != "meta":  # on meta (parameter and FLOP counts) there is nothing to initialise
            materialize(model, device, model.init_weights)
        if self.lora:
            model.to(self.base_dtype)
            model = _apply_lora(model, self.lora, params.get("lora_alpha"), float(params.get("lora_dropout", 0.05)))
            for p in model.parameters():  # the adapters train in float32, whatever the base is stored in
                if p.requires_grad:
                    p.data = p.data.float()
        if self.checkpointing:
            # Non-reentrant checkpointing needs no input that requires grad (LoRA's frozen embeddings).
            with warnings.catch_warnings():  # newer transformers renamed it; the old name works in all
                warnings.simplefilter("ignore", FutureWarning)
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        per_n = self.seq_len if self.axis == "batch" else self.rows  # tokens per unit of n
        super().__init__(model, optimizer, device, units_per_sample=float(per_n))
        # Over the sequence length, FLOPs per unit of n grow with n (attention is quadratic).
        self.flops_vary_with_n = self.axis == "seq_len"

    def shape(self, n: int) -> tuple[int, int]:
        """(sequences, tokens per sequence) of a step at n."""
        return (n, self.seq_len) if self.axis == "batch" else (self.rows, n)

    def make_batch(self, n: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, self.vocab, self.shape(n), device=self.device)
        # No attention_mask: every position is a real token, and with none the sdpa path is causal
        # without materialising a mask. labels = input_ids: the model shifts them itself.
        return {"input_ids": ids, "labels": ids}

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(**batch, use_cache=False).loss

    def infer(self, batch: dict[str, torch.Tensor]) -> Any:
        return self.model(input_ids=batch["input_ids"], use_cache=False).logits

    def start(self) -> None:
        """Fresh optimizer state for the trainable parameters only (all of them, or the LoRA adapters)."""
        self.model.train()
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizers = [make_optimizer(trainable, self.optimizer_spec, self.device)]

    @contextmanager
    def flops_twin(self) -> Iterator["LlamaTask"]:
        """A twin of this task on the meta device, for counting FLOPs (training/flops.py): nothing is allocated,
        so any length can be counted beside a model that fills the GPU. Checkpointing is off in the twin, so
        its recomputation is not counted: model FLOPs, not hardware FLOPs."""
        twin = LlamaTask({**self.params, "checkpointing": False}, self.optimizer_spec, torch.device("meta"))
        with _no_packed_sequence_check():
            yield twin

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        info.update(
            attention=model_config(self.model)._attn_implementation,
            axis=self.axis,
            seq_len=None if self.axis == "seq_len" else self.seq_len,
            batch=self.rows if self.axis == "seq_len" else None,
            checkpointing=self.checkpointing,
            lora_rank=self.lora,
            trainable_parameters=trainable,
            frozen_weights_dtype=str(self.base_dtype).replace("torch.", "") if self.lora else None,
        )
        return info


def generation_task(params: dict[str, Any], settings: GenerationSettings, device: torch.device, precision: str | None):
    """Greedy generation by the Llama architecture of `params`, its weights in `precision`'s dtype (built on the meta
    device in that dtype, then initialised on `device`: no float32 copy ever exists). Raises ValueError when the
    prompt and the new tokens pass the model's positions."""
    config = llama_config({k: v for k, v in params.items() if k != "seq_len"})
    config.use_cache = True
    limit = config.max_position_embeddings
    prompt = settings.prompt_len or 0
    if prompt + settings.new_tokens > limit:
        raise ValueError(
            f"a prompt of {prompt} and {settings.new_tokens} new tokens pass the model's {limit} positions"
        )
    with torch.device("meta"):
        model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa")
    model.to(WEIGHT_DTYPES[precision or "fp32"])
    if device.type != "meta":
        materialize(model, device, model.init_weights)
    axis = str(params.get("axis", "batch"))
    return GenerateTask(model, settings, device, config.vocab_size, axis, int(params.get("batch", 1)))


def build(
    params: dict[str, Any], optimizer: dict[str, Any], device: torch.device, precision: str | None = None
) -> TrainTask:
    """A Llama-architecture causal-LM fine-tuning task on `device` (cpu, cuda, or meta for counting), or with
    `generate` params a generation task whose weights are in `precision`'s dtype (workloads/generation.py).

    Raises ValueError for bad params (axis, sizes, lora rank, a generation past the positions) and ImportError when
    lora is asked for and peft is not installed.
    """
    settings = GenerationSettings.from_params(params)
    if settings is not None:
        return generation_task(params, settings, device, precision)
    return LlamaTask(params, optimizer, device)
