"""The generation table of `memprobe scan --mode generate` results: B concurrent sequences, the peak at B by category,
the KV capacity beside vLLM's formula, and prefill and decode tokens/s (each result's `generation` record)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from memprobe.core.records.results import ScanResult
from memprobe.core.text.units import gib

NOTES = [
    "B: the most concurrent sequences that complete greedy generation of N new tokens after P-token prompts with a "
    "static KV cache of P + N (proven in fresh processes); peak at B = weights + KV cache + activations (the "
    "prefill's transients) + allocator slack (reserved - allocated).",
    "KV capacity: the KV-cache tokens (and whole P + N contexts) that fit beside the weights and the activation "
    "measured at B. vLLM formula: (0.92 x total - weights - activation) / KV bytes per token, vLLM's default rule, "
    "a formula and not a measurement.",
    "prefill tok/s: B x P prompt tokens over the prefill's time; decode tok/s: B x (N - 1) tokens over the decode "
    "forwards' time (the first new token comes from the prefill); both from CUDA events in one timed generation.",
]


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def generation_rows(loaded: Sequence[tuple[Path | None, ScanResult]]) -> list[dict[str, Any]]:
    """One row per precision of each generation result that recorded a `generation` record, in the files' order."""
    return [row for row, _result in generation_entries(loaded)]


def generation_entries(loaded: Sequence[tuple[Path | None, ScanResult]]) -> list[tuple[dict[str, Any], ScanResult]]:
    """generation_rows' rows, each with the result it comes from (the page links each row to its file)."""
    rows = []
    for _path, result in loaded:
        if result.mode != "generate":
            continue
        for name, p in result.precisions.items():
            g = p.generation
            if g is None:
                continue
            tokens = f"{g.kv_capacity_tokens:,}" if g.kv_capacity_tokens is not None else "-"
            rows.append(
                (
                    {
                        "workload": result.workload.name,
                        "gpu": result.gpu_name(),
                        "precision": name,
                        "P / N": f"{g.prompt_len} / {g.new_tokens}"
                        + (f" (chunk {g.prefill_chunk})" if g.prefill_chunk else ""),
                        "B (sequences)": g.sequences,
                        "weights GiB": gib(g.weights_bytes, 2),
                        "KV cache GiB": gib(g.kv_cache_bytes, 2),
                        "activations GiB": gib(g.activation_bytes, 2),
                        "slack GiB": gib(g.slack_bytes, 2),
                        "KV KiB/token": "-" if g.kv_bytes_per_token is None else f"{g.kv_bytes_per_token / 1024:g}",
                        "KV capacity tokens (contexts)": f"{tokens} ({g.kv_capacity_sequences if g.kv_capacity_sequences is not None else '-'})",
                        "vLLM formula tokens (a formula)": "-"
                        if g.vllm_formula_tokens is None
                        else f"{g.vllm_formula_tokens:,}",
                        "prefill tok/s": _rate(g.prefill_tokens_per_s),
                        "decode tok/s": _rate(g.decode_tokens_per_s),
                    },
                    result,
                )
            )
    return rows
