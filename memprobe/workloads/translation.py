"""Transformer-Big machine translation (Vaswani et al. 2017; fairseq's transformer_vaswani_wmt_en_de_big).

Encoder-decoder, 6 + 6 layers, d_model 1024, FFN 4096, 16 heads, one 32768-token vocabulary shared by
source and target with the embedding tied three ways (encoder input, decoder input, output projection),
sinusoidal positions, dropout 0.3, label-smoothed cross entropy (0.1), Adam(0.9, 0.98).

Post-norm (LayerNorm after each residual add), as in the paper and in fairseq's
transformer_vaswani_wmt_en_de_big (encoder/decoder_normalize_before default to False there): that is
the configuration the published Transformer-Big results and throughput figures come from. Pre-norm
(`pre_norm: true`) adds a final LayerNorm per stack and otherwise has the same shapes and FLOPs.

Attention runs through F.scaled_dot_product_attention (flash / memory-efficient kernels on CUDA),
with fused QKV projections. A sample is one sentence pair with src_len and tgt_len tokens, all real
(no padding: the worst case); throughput is counted in target tokens.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .base import TrainTask

PAD, EOS, FIRST_TOKEN = 1, 2, 4  # fairseq's dictionary: <s>=0, <pad>=1, </s>=2, <unk>=3


class Attention(nn.Module):
    """Multi-head attention with fused projections: QKV in one matmul for self-attention, KV in one
    matmul for encoder-decoder attention (same parameter count as separate q, k, v projections)."""

    def __init__(self, dim: int, heads: int, dropout: float, cross: bool) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"d_model {dim} is not divisible by {heads} heads")
        self.heads, self.dropout, self.cross = heads, dropout, cross
        if cross:
            self.q_proj = nn.Linear(dim, dim)
            self.kv_proj = nn.Linear(dim, 2 * dim)
        else:
            self.qkv_proj = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        n, s, d = x.shape
        return x.view(n, s, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        if self.cross:
            q = self.q_proj(x)
            k, v = self.kv_proj(memory).chunk(2, dim=-1)
        else:
            q, k, v = self.qkv_proj(x).chunk(3, dim=-1)
        out = F.scaled_dot_product_attention(
            self._split(q),
            self._split(k),
            self._split(v),
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=causal,
        )
        n, _, s, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(n, s, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int, activation_dropout: float) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.activation_dropout = activation_dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.dropout(F.relu(self.fc1(x)), self.activation_dropout, self.training)
        return self.fc2(h)


class Sublayer(nn.Module):
    """Residual wrapper: post-norm LN(x + drop(f(x))) or pre-norm x + drop(f(LN(x)))."""

    def __init__(self, dim: int, dropout: float, pre_norm: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.dropout, self.pre_norm = dropout, pre_norm

    def forward(self, x: torch.Tensor, f) -> torch.Tensor:
        if self.pre_norm:
            return x + F.dropout(f(self.norm(x)), self.dropout, self.training)
        return self.norm(x + F.dropout(f(x), self.dropout, self.training))


class EncoderLayer(nn.Module):
    def __init__(self, p: dict[str, Any]) -> None:
        super().__init__()
        d = p["d_model"]
        self.attn = Attention(d, p["heads"], p["attention_dropout"], cross=False)
        self.ffn = FeedForward(d, p["ffn"], p["activation_dropout"])
        self.sub_attn = Sublayer(d, p["dropout"], p["pre_norm"])
        self.sub_ffn = Sublayer(d, p["dropout"], p["pre_norm"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.sub_attn(x, self.attn)
        return self.sub_ffn(x, self.ffn)


class DecoderLayer(nn.Module):
    def __init__(self, p: dict[str, Any]) -> None:
        super().__init__()
        d = p["d_model"]
        self.self_attn = Attention(d, p["heads"], p["attention_dropout"], cross=False)
        self.cross_attn = Attention(d, p["heads"], p["attention_dropout"], cross=True)
        self.ffn = FeedForward(d, p["ffn"], p["activation_dropout"])
        self.sub_self = Sublayer(d, p["dropout"], p["pre_norm"])
        self.sub_cross = Sublayer(d, p["dropout"], p["pre_norm"])
        self.sub_ffn = Sublayer(d, p["dropout"], p["pre_norm"])

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        x = self.sub_self(x, lambda h: self.self_attn(h, causal=True))
        x = self.sub_cross(x, lambda h: self.cross_attn(h, memory))
        return self.sub_ffn(x, self.ffn)


def sinusoids(length: int, dim: int) -> torch.Tensor:
    """The paper's fixed sinusoidal position encodings (sin in the first half, cos in the second,
    fairseq's layout), on the current default device."""
    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / (half - 1)))
    angles = torch.arange(length, dtype=torch.float32)[:, None] * freq[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=1)


class TransformerModel(nn.Module):
    """Encoder-decoder with one embedding matrix used three times."""

    positions: torch.Tensor  # a buffer (register_buffer): the sinusoidal position encodings

    def __init__(self, p: dict[str, Any]) -> None:
        super().__init__()
        d = p["d_model"]
        self.embed = nn.Embedding(p["vocab"], d, padding_idx=PAD)
        self.encoder = nn.ModuleList(EncoderLayer(p) for _ in range(p["encoder_layers"]))
        self.decoder = nn.ModuleList(DecoderLayer(p) for _ in range(p["decoder_layers"]))
        # pre-norm stacks end with a LayerNorm (their last residual sum is otherwise unnormalised)
        self.encoder_norm = nn.LayerNorm(d) if p["pre_norm"] else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d) if p["pre_norm"] else nn.Identity()
        self.register_buffer("positions", sinusoids(max(p["src_len"], p["tgt_len"]), d), persistent=False)
        self.scale, self.dropout = math.sqrt(d), p["dropout"]

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) * self.scale + self.positions[: tokens.shape[1]]
        return F.dropout(x, self.dropout, self.training)

    def forward(self, src: torch.Tensor, prev_tgt: torch.Tensor) -> torch.Tensor:
        memory = self._embed(src)
        for layer in self.encoder:
            memory = layer(memory)
        memory = self.encoder_norm(memory)
        x = self._embed(prev_tgt)
        for layer in self.decoder:
            x = layer(x, memory)
        x = self.decoder_norm(x)
        return F.linear(x, self.embed.weight)  # tied output projection, no bias (as fairseq)


def init_weights(model: TransformerModel) -> None:
    """fairseq's scheme: Xavier-uniform linear weights, zero biases, embeddings N(0, d^-1/2) with a
    zero padding row; LayerNorms at 1 / 0."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        nn.init.normal_(model.embed.weight, 0.0, model.embed.embedding_dim**-0.5)
        model.embed.weight[PAD].zero_()


DEFAULTS: dict[str, Any] = {
    "encoder_layers": 6,
    "decoder_layers": 6,
    "d_model": 1024,
    "ffn": 4096,
    "heads": 16,
    "vocab": 32768,
    "src_len": 128,
    "tgt_len": 128,
    "dropout": 0.3,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "label_smoothing": 0.1,
    "pre_norm": False,
}


def _params(params: dict[str, Any]) -> dict[str, Any]:
    """Defaults filled in, types fixed. Raises ValueError for an unknown key or a vocabulary too small."""
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"transformer: unknown parameter(s) {', '.join(sorted(unknown))}")
    p = {**DEFAULTS, **params}
    for key in ("encoder_layers", "decoder_layers", "d_model", "ffn", "heads", "vocab", "src_len", "tgt_len"):
        p[key] = int(p[key])
    for key in ("dropout", "attention_dropout", "activation_dropout", "label_smoothing"):
        p[key] = float(p[key])
    p["pre_norm"] = bool(p["pre_norm"])
    if p["vocab"] <= FIRST_TOKEN:
        raise ValueError(f"transformer: vocab must exceed the {FIRST_TOKEN} special tokens")
    return p


class TranslationTask(TrainTask):
    unit = "tokens"

    def __init__(self, params: dict[str, Any], optimizer: dict[str, Any], device: torch.device) -> None:
        p = _params(params)
        # Built directly on the device: init runs there (fast on CUDA), nothing allocated on meta.
        with device:
            model = TransformerModel(p)
            init_weights(model)
        super().__init__(model, optimizer, device, units_per_sample=float(p["tgt_len"]))
        self.p = p

    def make_batch(self, n: int) -> dict[str, torch.Tensor]:
        """n sentence pairs at full length: source tokens, decoder input (</s> then the target shifted
        right, as fairseq's prev_output_tokens) and the target."""
        lo, hi, d = FIRST_TOKEN, self.p["vocab"], self.device
        src = torch.randint(lo, hi, (n, self.p["src_len"]), device=d)
        tgt = torch.randint(lo, hi, (n, self.p["tgt_len"]), device=d)
        prev = torch.cat([torch.full((n, 1), EOS, dtype=tgt.dtype, device=d), tgt[:, :-1]], dim=1)
        return {"src": src, "prev_tgt": prev, "tgt": tgt}

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = self.model(batch["src"], batch["prev_tgt"])
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            batch["tgt"].reshape(-1),
            ignore_index=PAD,
            label_smoothing=self.p["label_smoothing"],
        )

    def infer(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """One teacher-forced forward pass (scoring), not autoregressive decoding."""
        return self.model(batch["src"], batch["prev_tgt"])

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        p = self.p
        info.update(
            attention="sdpa",
            norm="pre-norm" if p["pre_norm"] else "post-norm",
            src_len=p["src_len"],
            tgt_len=p["tgt_len"],
            # fairseq's --max-tokens bounds max(src, tgt) tokens per pair, summed over the batch:
            # batch in tokens = batch * tokens_per_sample
            tokens_per_sample=max(p["src_len"], p["tgt_len"]),
            target_tokens_per_sample=p["tgt_len"],
            vocab=p["vocab"],
            tied_embeddings="encoder, decoder, output projection",
            dropout=p["dropout"],
            label_smoothing=p["label_smoothing"],
        )
        return info


def build(params: dict[str, Any], optimizer: dict[str, Any], device: torch.device) -> TranslationTask:
    """The Transformer task on `device` (cpu, cuda or meta). Raises ValueError for bad parameters."""
    return TranslationTask(params, optimizer, device)
