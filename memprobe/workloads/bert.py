"""BERT workloads from transformers configs with random weights (no download).

bert-large: BertForPreTraining (MLM + NSP heads) at full sequence length with scaled-dot-product
attention, the standard pre-training objective: 15% of positions carry MLM labels.
"""

from __future__ import annotations

from typing import Any

import torch
# Imported at module load, not in the builder: the trial process preloads this module before setup,
# so a spare process pays transformers' import (seconds) while another process is being measured.
from transformers import BertConfig, BertForPreTraining

from .base import TrainTask, materialize


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
        token_type[:, self.seq_len // 2:] = 1
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
        info["attention"] = self.model.config._attn_implementation
        info["seq_len"] = self.seq_len
        return info


def build_pretraining(params: dict[str, Any], optimizer: dict[str, Any], device: torch.device) -> BertPretrainingTask:
    return BertPretrainingTask(params, optimizer, device)
