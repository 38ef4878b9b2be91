"""The LLM edges side by side: max batch or max sequence length per memory-saving setting, and the gain.

No torch here. Rows come from scan result files of the LLM workloads (and their variants): one per
GPU, model, precision, what was searched and setting, from the newest file that has it. Each setting's
edge is compared with the plain setting's edge in the same group (same GPU, model, precision, search).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from memprobe.compare.tables import rows_text
from memprobe.core.records.records import Timed
from memprobe.core.records.results import ScanResult
from memprobe.core.text.units import gib
from memprobe.core.workload.variants import LLM_FAMILIES, base_name


def setting_label(params: Mapping[str, object]) -> str:
    """'plain', 'checkpointing', 'LoRA r=16' or 'LoRA r=16 + checkpointing' from a workload's params."""
    parts = []
    if params.get("lora"):
        parts.append(f"LoRA r={params['lora']}")
    if params.get("checkpointing"):
        parts.append("checkpointing")
    return " + ".join(parts) or "plain"


def searched(params: Mapping[str, object]) -> str:
    """What the edge is of, e.g. 'batch at seq 2048' or 'seq len at batch 1'."""
    if params.get("axis") == "seq_len":
        return f"seq len at batch {params.get('batch', 1)}"
    return f"batch at seq {params.get('seq_len')}"


def llm_rows(results: Iterable[ScanResult]) -> list[dict[str, Any]]:
    """One row per GPU x model x precision x search x setting (newest file first wins), with the edge,
    tokens per step there, tokens/s and MFU, and the edge over the plain setting's ('gain')."""
    return [row for row, _result in llm_entries(results)]


def llm_entries(results: Iterable[ScanResult]) -> list[tuple[dict[str, Any], ScanResult]]:
    """llm_rows' rows, each with the result it was read from."""
    newest: dict[tuple, tuple[ScanResult, str]] = {}
    for result in sorted(results, key=lambda r: r.created_at, reverse=True):
        workload = result.workload
        if workload.family not in LLM_FAMILIES:
            continue
        params = workload.params or {}
        gpu = result.gpu_name()
        for precision, p in result.precisions.items():
            if p.status != "done":
                continue
            key = (gpu, base_name(workload.name), precision, searched(params), setting_label(params))
            newest.setdefault(key, (result, precision))
    rows: list[tuple[dict[str, Any], ScanResult]] = []
    for key in sorted(newest, key=lambda k: (k[0], k[1], k[2], k[3], k[4] != "plain", k[4])):
        gpu, model, precision, what, setting = key
        result, _ = newest[key]
        p = result.precisions[precision]
        plain = newest.get((gpu, model, precision, what, "plain"))
        plain_edge = plain[0].precisions[precision].max_batch if plain else None
        timed = p.throughput or Timed()
        need = p.settings.nothing_fits.need_bytes if p.settings.nothing_fits is not None else None
        row = {
            "gpu": gpu,
            "model": model,
            "precision": precision,
            "searched": what,
            "setting": setting,
            "edge": p.max_batch
            if p.max_batch
            else f"nothing fits (needs ~{gib(need)} GiB, traced)"
            if need
            else "nothing fits",
            "vs plain": f"{p.max_batch / plain_edge:.2f}x" if plain_edge and p.max_batch else "-",
            "tokens/step": _int(timed.units_per_step),
            "tokens/s": _int(timed.units_per_s),
            "MFU %": f"{100 * timed.mfu:.1f}" if timed.mfu else "-",
        }
        rows.append((row, result))
    return rows


def _int(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def llm_table(results: Iterable[ScanResult], fmt: str = "github") -> str:
    """llm_rows as a table (github, plain or another tabulate format), csv or json; '(no LLM results)'
    when there are none."""
    rows = llm_rows(results)
    return rows_text(rows, fmt, "(no LLM results)", keep=3)
