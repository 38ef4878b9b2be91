"""Tables built from result files. No torch: reports are made on any machine."""

from __future__ import annotations

from typing import Any, Iterable

from tabulate import tabulate

from .results import PrecisionResult, ScanResult
from .units import gib


def _proof_text(p: PrecisionResult) -> str:
    proof = p.proof or {}
    if p.max_batch == 0:
        return "1 fails" if proof.get("verified") else "1 fails (in-process)"
    if proof.get("fits") is None:
        return "-"
    fails = proof.get("fails")
    text = f"{proof['fits']} fits, {fails} {proof.get('fail_outcome') or 'fails'}" if fails else f"{proof['fits']} fits (cap)"
    return text if proof.get("verified") else text + " (unverified)"


def _agreed_text(p: PrecisionResult) -> str:
    proof = p.proof or {}
    if not proof:
        return "-"
    if proof.get("agreed"):
        return "yes"
    inproc = proof.get("in_process", {}).get("fits")
    return f"no (in-process {inproc})"


def scan_rows(results: Iterable[ScanResult]) -> list[dict[str, Any]]:
    """One row per workload and precision with the headline numbers of a scan."""
    rows = []
    for result in results:
        gpu = result.environment.get("gpu", {}).get("name", "?")
        unit = result.workload.get("unit", "samples")
        for name, p in result.precisions.items():
            t = p.throughput or {}
            util = t.get("utilization") or {}
            gpu_util = (util.get("gpu_util_pct") or {}).get("mean")
            power = (util.get("power_w") or {}).get("mean")
            fresh = len((p.proof or {}).get("checks", []))
            rows.append({
                "gpu": gpu,
                "model": result.workload.get("name"),
                "precision": name,
                "max batch": p.max_batch if p.status == "done" else f"{p.status}: {p.error[:60]}" if p.error else p.status,
                "proof (fresh processes)": _proof_text(p),
                "agreed": _agreed_text(p),
                "trials": f"{len(p.attempts)} + {fresh} fresh",
                "search s": p.search_seconds if p.search_seconds is not None else "-",
                f"throughput": f"{t['units_per_s']:.1f} {unit}/s" if t.get("units_per_s") else (t.get("error", "-")[:40] if t else "-"),
                "step ms (median)": f"{t['step_time']['median_s'] * 1000:.0f}" if t.get("step_time") else "-",
                "peak GiB": gib(t.get("peak_reserved")) if t else "-",
                "GPU util %": f"{gpu_util:.0f}" if gpu_util is not None else "-",
                "power W": f"{power:.0f}" if power is not None else "-",
            })
    return rows


def scan_table(results: Iterable[ScanResult], fmt: str = "github") -> str:
    """The scan summary as a text table (tabulate format name)."""
    rows = scan_rows(results)
    if not rows:
        return "(no results)"
    return tabulate(rows, headers="keys", tablefmt=fmt, disable_numparse=True)
