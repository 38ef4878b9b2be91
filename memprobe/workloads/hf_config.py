"""Any transformers architecture from its config (`hf:NAME`, `hf-config:PATH`), random weights, sdpa attention.

The config arrives as a mapping (memprobe.workloads.custom read it from a local file: nothing is downloaded).
The task head picks the Auto class and the synthetic batch: causal-lm (labels = inputs), masked-lm
(15% of positions labelled), seq-cls (2 labels), qa (start/end positions), seq2seq (target as long
as the source). Every sequence is full length, the worst case. The KV cache is off, as in training.
"""

from __future__ import annotations

import difflib
import inspect
import traceback
from typing import Any

import torch

# Imported at module load, not in the builder: the fork server preloads this module, so a fresh trial
# process does not pay transformers' import (seconds) again.
from memprobe.workloads.torchvision_guard import ensure_loadable

ensure_loadable()  # before timm or transformers imports torchvision (see torchvision_guard.py)
import transformers  # noqa: E402
from transformers import (  # noqa: E402
    # resolving the Auto classes loads their mapping modules now
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
)
from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: E402

from .base import TrainTask, UserModelError, model_error, one_line  # noqa: E402
from .generation import WEIGHT_DTYPES, GenerateTask, GenerationSettings  # noqa: E402

_AUTO: dict[str, Any] = {
    "causal-lm": AutoModelForCausalLM,
    "masked-lm": AutoModelForMaskedLM,
    "seq-cls": AutoModelForSequenceClassification,
    "qa": AutoModelForQuestionAnswering,
    "seq2seq": AutoModelForSeq2SeqLM,
}
_DROPPED_KEYS = ("torch_dtype", "dtype", "transformers_version", "_name_or_path", "architectures", "auto_map")
DEFAULT_MAX_SEQ = 1024  # the sequence length when none is given: the model's own maximum, at most this
MLM_PROBABILITY = 0.15


def make_config(config: dict[str, Any]):
    """A transformers config object from its mapping, with the weights' dtype left at float32 (memprobe's
    precisions autocast over fp32 weights) and the KV cache off. Raises UserModelError for an unknown model_type."""
    values = {k: v for k, v in config.items() if k not in _DROPPED_KEYS and k != "model_type"}
    kind = config.get("model_type")
    known = list(CONFIG_MAPPING.keys())
    if not isinstance(kind, str) or kind not in known:
        # transformers' own message lists every model type it knows (12 KB on one line): name the closest instead
        close = difflib.get_close_matches(str(kind), known, n=3, cutoff=0.5)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise UserModelError(
            f"transformers {transformers.__version__} knows no model_type {str(kind)[:60]!r} "
            f"({len(known)} types known{hint})"
        )
    try:
        made = AutoConfig.for_model(kind, **values)
    except Exception as exc:  # noqa: BLE001 - transformers' validation errors are of many classes, all the config's
        # their messages run over several lines (the first may name only the field): one line, every word kept
        raise UserModelError(
            f"transformers {transformers.__version__} cannot make a config of model_type '{kind}': "
            f"{one_line(exc) or type(exc).__name__}"
        ) from exc
    _check_heads(made)
    made.use_cache = False
    return made


def _check_heads(config) -> None:
    """Raises UserModelError when the attention heads do not divide the width, where the config leaves each head's
    width to that division (no head_dim of its own): the model cannot be built, and transformers says so only when
    it builds it, in words that do not name the config's keys."""
    hidden, heads = getattr(config, "hidden_size", None), getattr(config, "num_attention_heads", None)
    if getattr(config, "head_dim", None) is not None or not isinstance(hidden, int) or not isinstance(heads, int):
        return
    if heads > 0 and hidden % heads:
        names = getattr(config, "attribute_map", None) or {}  # the config's own keys: gpt2's n_embd, n_head
        width, count = names.get("hidden_size", "hidden_size"), names.get("num_attention_heads", "num_attention_heads")
        raise UserModelError(
            f"{width} {hidden} is not divisible by {count} {heads} (each head is {width} / {count} wide): "
            f"give a {count} that divides {hidden}"
        )


def max_positions(config) -> int | None:
    """The longest sequence the config's position embeddings allow, when it says."""
    for key in ("max_position_embeddings", "n_positions", "max_seq_len"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _build_error(config, task: str, exc: Exception) -> UserModelError:
    """The one-line UserModelError for a model transformers cannot build from `config` with the `task` head: a head
    the architecture lacks (the Auto class's "Unrecognized configuration class"), or what the model's code raised,
    its traceback in `details`."""
    said = one_line(exc)
    name, version = type(config).__name__, transformers.__version__
    if "Unrecognized configuration class" in said:  # its message lists every class that has the head: not shown
        return UserModelError(f"{name} has no {task} head in transformers {version}; {_tasks_hint(config)}")
    return UserModelError(
        f"transformers {version} cannot build {name} with a {task} head: {type(exc).__name__}: {said}",
        traceback.format_exc(),
    )


def _tasks_hint(config) -> str:
    """The --task values whose head the config's architecture has, as a hint; or that it has none of them."""
    fits = [task for task, auto in _AUTO.items() if type(config) in auto._model_mapping]
    if fits:
        return f"it has {', '.join(fits)}: give --task {fits[0]}" + (" (or another of those)" if len(fits) > 1 else "")
    kind = getattr(config, "model_type", "?")
    return (
        f"'{kind}' has none of the heads --task builds ({', '.join(_AUTO)}): a multimodal or other model needs a build "
        "of its own (--model FILE.py:build)"
    )


def _from_config(auto, config, task: str, attention: str):
    """auto.from_config with `attention`; raises UserModelError for what the model's code raises (not memory)."""
    try:
        return auto.from_config(config, attn_implementation=attention)
    except Exception as exc:
        if not model_error(exc):
            raise
        raise _build_error(config, task, exc) from exc


class HFTask(TrainTask):
    unit = "sequences"
    # transformers' code run on the user's config: a step that raises (not out of memory) is theirs to fix, said in
    # one line with the traceback in the result (training/step.py), like a user module's
    user_code = True

    def __init__(self, params: dict[str, Any], optimizer: dict[str, Any], device: torch.device) -> None:
        self.task = str(params.get("task") or "causal-lm")
        if self.task not in _AUTO:
            raise UserModelError(f"unknown task '{self.task}' (known: {', '.join(_AUTO)})")
        config = make_config(params["config"])
        limit = max_positions(config)
        self.seq_len = int(params.get("seq_len") or min(limit or DEFAULT_MAX_SEQ, DEFAULT_MAX_SEQ))
        if limit is not None and self.seq_len > limit:
            raise UserModelError(f"seq_len {self.seq_len} is longer than the config's {limit} positions")
        if self.task == "seq-cls":
            config.num_labels = 2
            if config.pad_token_id is None:  # batches of more than one need it to find each sequence's end
                config.pad_token_id = 0
        auto = _AUTO[self.task]
        try:
            with device:
                model = auto.from_config(config, attn_implementation="sdpa")
            self.attention = "sdpa"
        except ValueError as exc:
            if "sdpa" not in str(exc).lower() and "scaled_dot_product" not in str(exc).lower():
                raise _build_error(config, self.task, exc) from exc
            with device:  # an architecture without sdpa support: its eager attention, recorded as such
                model = _from_config(auto, config, self.task, "eager")
            self.attention = "eager"
        except Exception as exc:
            if not model_error(exc):
                raise  # out of memory, a CUDA error: not the config's fault
            raise _build_error(config, self.task, exc) from exc
        super().__init__(model, optimizer, device)
        self.vocab = int(config.vocab_size)
        self.pad = config.pad_token_id if self.task == "seq-cls" else None
        self.model_class = type(model).__name__

    def _ids(self, n: int) -> torch.Tensor:
        if self.pad is None:
            return torch.randint(0, self.vocab, (n, self.seq_len), device=self.device)
        ids = torch.randint(0, self.vocab - 1, (n, self.seq_len), device=self.device)
        return ids + (ids >= self.pad).long()  # no padding token anywhere: every sequence is full length

    def make_batch(self, n: int) -> dict[str, torch.Tensor]:
        ids = self._ids(n)
        if self.task == "causal-lm":
            return {"input_ids": ids, "labels": ids}
        if self.task == "masked-lm":
            labels = torch.full_like(ids, -100)
            masked = torch.rand(ids.shape, device=self.device) < MLM_PROBABILITY
            labels[masked] = ids[masked]
            return {"input_ids": ids, "labels": labels}
        if self.task == "seq-cls":
            return {"input_ids": ids, "labels": torch.randint(0, 2, (n,), device=self.device)}
        if self.task == "qa":
            start = torch.randint(0, self.seq_len, (n,), device=self.device)
            end = torch.minimum(
                start + torch.randint(0, 30, (n,), device=self.device), torch.full_like(start, self.seq_len - 1)
            )
            return {"input_ids": ids, "start_positions": start, "end_positions": end}
        # seq2seq: a target as long as the source; the decoder inputs are given (not every config says
        # which token starts a decoder sequence, and the shifted labels cost the same memory).
        return {
            "input_ids": ids,
            "labels": torch.randint(0, self.vocab, (n, self.seq_len), device=self.device),
            "decoder_input_ids": torch.randint(0, self.vocab, (n, self.seq_len), device=self.device),
        }

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(**batch).loss

    def infer(self, batch: dict[str, torch.Tensor]) -> Any:
        if self.task == "seq2seq":
            return self.model(input_ids=batch["input_ids"], decoder_input_ids=batch["decoder_input_ids"]).logits
        return self.model(input_ids=batch["input_ids"])

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info.update(model_class=self.model_class, task=self.task, seq_len=self.seq_len, attention=self.attention)
        return info


GENERATES = (
    "decoder-only causal LMs whose transformers model generates with a static cache (llama, mistral, qwen2, ...)"
)


def generation_config(params: dict[str, Any], settings: GenerationSettings):
    """The config of a generation by an `hf:`/`hf-config:` model, the KV cache on. Raises UserModelError for a task
    other than causal-lm, an encoder-decoder config, or a prompt and new tokens past the config's positions."""
    task = str(params.get("task") or "causal-lm")
    if task != "causal-lm":
        raise UserModelError(f"--mode generate runs {GENERATES}: give --task causal-lm, not {task}")
    config = make_config(params["config"])
    if getattr(config, "is_encoder_decoder", False):
        raise UserModelError(f"{type(config).__name__} is an encoder-decoder: --mode generate runs {GENERATES}")
    limit = max_positions(config)
    total = (settings.prompt_len or 0) + settings.new_tokens
    if limit is not None and total > limit:
        raise UserModelError(
            f"a prompt of {settings.prompt_len} and {settings.new_tokens} new tokens pass the config's {limit} positions"
        )
    config.use_cache = True
    return config


def _check_generates(model_class: Any) -> None:
    """Raises UserModelError for a model class that cannot generate as greedy_generate does (no generate, or a
    forward without `logits_to_keep`: encoders given a causal-LM head, older architectures)."""
    forward = inspect.signature(model_class.forward).parameters
    if not model_class.can_generate() or "logits_to_keep" not in forward:
        raise UserModelError(
            f"{model_class.__name__} cannot generate as memprobe does: --mode generate runs {GENERATES}"
        )


def generation_task(params: dict[str, Any], settings: GenerationSettings, device: torch.device, precision: str | None):
    """Greedy generation by the causal LM of params.config, its weights in `precision`'s dtype. Raises UserModelError
    as generation_config does, or for a model transformers cannot build or that cannot generate."""
    config = generation_config(params, settings)
    dtype = WEIGHT_DTYPES[precision or "fp32"]
    try:  # the class first: an encoder given a causal-LM head (BERT's) is refused before its weights are made
        made = AutoModelForCausalLM._model_mapping[type(config)]
    except KeyError:
        made = None
    if made is not None:
        _check_generates(made)
    try:
        with device:
            model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=dtype)
    except Exception as exc:
        if not model_error(exc):
            raise
        raise _build_error(config, "causal-lm", exc) from exc
    _check_generates(type(model))
    axis = str(params.get("axis", "batch"))
    return GenerateTask(model, settings, device, int(config.vocab_size), axis, int(params.get("batch", 1)))


def build(
    params: dict[str, Any], optimizer: dict[str, Any], device: torch.device, precision: str | None = None
) -> TrainTask:
    """A transformers model from params.config (a mapping) with the task head params.task, on `device`; with
    `generate` params a generation task whose weights are in `precision`'s dtype (workloads/generation.py).
    Raises UserModelError for an unknown model_type or task, a seq_len past the config's positions, or a
    head the architecture lacks."""
    settings = GenerationSettings.from_params(params)
    if settings is not None:
        return generation_task(params, settings, device, precision)
    return HFTask(params, optimizer, device)
