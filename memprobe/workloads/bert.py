"""BERT workloads from transformers configs with random weights (no download).

bert-large: BertForPreTraining (MLM + NSP heads) at full sequence length with scaled-dot-product
attention, the standard pre-training objective: 15% of positions carry MLM labels.
bert-large-squad: BertForQuestionAnswering (SQuAD fine-tuning: start/end span heads, cross entropy
over positions) at seq 384 with scaled-dot-product attention.
"""

from __future__ import annotations

from typing import Any

import torch

# Imported at module load, not in the builder: the trial process preloads this module before setup,
# so a spare process pays transformers' import (seconds) while another process is being measured.
from memprobe.workloads.torchvision_guard import ensure_loadable

ensure_loadable()  # before timm or transformers imports torchvision (see torchvision_guard.py)
from transformers import BertConfig, BertForPreTraining, BertForQuestionAnswering  # noqa: E402

from .base import TrainTask, materialize, model_config  # noqa: E402


def _config(params: dict[str, Any]) -> BertConfig:
    return BertConfig(
        vocab_size=int(params["vocab"]),
        hidden_size=int(params["hidden"]),
        num_hidden_layers=int(params["layers"]),
        num_attention_heads=int(params["heads"]),
        intermediate_size=int(params["ffn"]),
        max_position_embeddings=max(512, int(params["seq_len"])),
        hidden_dropout_prob=float(params.get("dropout", 0.1)),
        attention_probs_dropout_prob=float(params.get("dropout", 0.1)),
    )


class BertPretrainingTask(TrainTask):
    unit = "sequences"

    def __init__(self, params: dict[str, Any], optimizer: dict[str, Any], device: torch.device) -> None:
        config = _config(params)
        with torch.device("meta"):
            model = BertForPreTraining._from_config(config, attn_implementation="sdpa")
        materialize(model, device, model.init_weights)
        super().__init__(model, optimizer, device)
        self.seq_len = int(params["seq_len"])
        self.vocab = int(params["vocab"])
        self.mlm_probability = float(params.get("mlm_probability", 0.15))

    def make_batch(self, n: int) -> dict[str, torch.Tensor]:
        shape = (n, self.seq_len)
        ids = torch.randint(0, self.vocab, shape, device=self.device)
        labels = torch.full(shape, -100, dtype=torch.long, device=self.device)
        masked = torch.rand(shape, device=self.device) < self.mlm_probability
        labels[masked] = ids[masked]
        token_type = torch.zeros(shape, dtype=torch.long, device=self.device)
        token_type[:, self.seq_len // 2 :] = 1
        return {
            "input_ids": ids,
            "token_type_ids": token_type,
            "attention_mask": torch.ones(shape, dtype=torch.long, device=self.device),
            "labels": labels,
            "next_sentence_label": torch.randint(0, 2, (n,), device=self.device),
        }

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(**batch).loss

    def infer(self, batch: dict[str, torch.Tensor]) -> Any:
        inputs = {k: v for k, v in batch.items() if k not in ("labels", "next_sentence_label")}
        return self.model(**inputs).prediction_logits

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["attention"] = model_config(self.model)._attn_implementation
        info["seq_len"] = self.seq_len
        return info


def build_pretraining(params: dict[str, Any], optimizer: dict[str, Any], device: torch.device) -> BertPretrainingTask:
    return BertPretrainingTask(params, optimizer, device)


class BertSquadTask(TrainTask):
    """SQuAD-style fine-tuning: question + passage packed to the full sequence length, a start and an
    end position per sequence, loss = mean of the two cross entropies over positions."""

    unit = "sequences"

    def __init__(self, params: dict[str, Any], optimizer: dict[str, Any], device: torch.device) -> None:
        config = _config(params)
        with torch.device("meta"):
            model = BertForQuestionAnswering._from_config(config, attn_implementation="sdpa")
        if device.type != "meta":  # on meta (parameter and FLOP counts) there is nothing to initialise
            materialize(model, device, model.init_weights)
        super().__init__(model, optimizer, device)
        self.seq_len = int(params["seq_len"])
        self.vocab = int(params["vocab"])
        self.question_len = int(params.get("question_len", 64))
        if not 0 < self.question_len < self.seq_len:
            raise ValueError(f"question_len must be between 1 and seq_len - 1, got {self.question_len}")

    def make_batch(self, n: int) -> dict[str, torch.Tensor]:
        shape = (n, self.seq_len)
        token_type = torch.zeros(shape, dtype=torch.long, device=self.device)
        token_type[:, self.question_len :] = 1  # segment B: the passage
        # answers lie in the passage
        start = torch.randint(self.question_len, self.seq_len, (n,), device=self.device)
        end = torch.minimum(
            start + torch.randint(0, 30, (n,), device=self.device), torch.full_like(start, self.seq_len - 1)
        )
        # No attention_mask: every position is a real token (the worst case), and transformers drops
        # an all-ones mask anyway after checking it with .all() (a host sync each step, and a value
        # the meta device, used to count FLOPs, cannot produce).
        return {
            "input_ids": torch.randint(0, self.vocab, shape, device=self.device),
            "token_type_ids": token_type,
            "start_positions": start,
            "end_positions": end,
        }

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(**batch).loss

    def infer(self, batch: dict[str, torch.Tensor]) -> Any:
        inputs = {k: v for k, v in batch.items() if k not in ("start_positions", "end_positions")}
        out = self.model(**inputs)
        return out.start_logits, out.end_logits

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["attention"] = model_config(self.model)._attn_implementation
        info["seq_len"] = self.seq_len
        info["head"] = "question answering (start/end span)"
        return info


def build_squad(params: dict[str, Any], optimizer: dict[str, Any], device: torch.device) -> BertSquadTask:
    """BERT question answering on `device` (cpu, cuda, or meta for counting). Raises ValueError for a
    question_len that leaves no passage."""
    return BertSquadTask(params, optimizer, device)
