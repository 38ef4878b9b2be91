"""The report of benchmarks/edge_repeat.py's runs: why a batch fits in one fresh process and fails in the next.

    python benchmarks/edge_repeat.py summarize FOLDER --md FILE     (or report(FOLDER) from Python)

No torch: it reads FOLDER/run_*.json, FOLDER/cudnn_*.log (cuDNN's plan lines of each run) and FOLDER/walls.tsv (the
shell's start and end time of each run's process), and writes markdown: the runs, a fit and a failure at the same
batch step by step, what the allocator held when the failure came, the cuDNN plans one chose and the other did not,
and where the seconds of a first trial went.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MiB = 1 << 20
GiB = 1 << 30


def _gib(n: Any) -> str:
    return "-" if n is None else f"{n / GiB:.2f}"


def _mib(n: Any) -> str:
    return "-" if n is None else f"{n / MiB:.0f}"


def load(folder: Path) -> list[dict[str, Any]]:
    """Every run of the folder, with its process's wall seconds and exit seconds where walls.tsv has them."""
    walls = {}
    path = folder / "walls.tsv"
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) >= 4:
                walls[parts[0]] = (float(parts[1]), float(parts[2]), parts[3])
    runs = []
    for f in sorted(folder.glob("run_*.json")):
        r = json.loads(f.read_text())
        if r["tag"] in walls:
            start, end, rc = walls[r["tag"]]
            r["wall_s"], r["exit_s"], r["rc"] = round(end - start, 2), round(end - r["script_end_unix"], 2), rc
        log = folder / f"cudnn_{r['tag']}.log"
        r["plans"] = sorted(set(log.read_text(errors="replace").splitlines())) if log.exists() else []
        runs.append(r)
    return runs


def _failed_where(r: dict[str, Any]) -> str:
    if r["outcome"] == "fit":
        return "-"
    timed = r.get("timed")
    if timed:
        return f"timed step {timed.get('failed_at_step')}"
    return "trial"


def _phase_max(r: dict[str, Any], phase: str, key: str = "max_reserved") -> Any:
    values = [s[key] for s in r["steps"] if s["phase"] == phase]
    return max(values) if values else None


def runs_table(runs: list[dict[str, Any]]) -> list[str]:
    """One row per run: outcome, where it failed, what it asked for, caught out-of-memory errors, memory and time."""
    lines = [
        "| model | batch | run | outcome | failed at | asked MiB (free MiB) | out-of-memory errors seen | trial peak "
        "reserved GiB | timed peak reserved GiB | segments at the failure (end) | largest free block MiB | trial s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(runs, key=lambda r: (r["model"], r["batch"], r["tag"])):
        last = r["ooms"][-1] if r["ooms"] else None
        state = next((o["state"] for o in reversed(r["ooms"]) if "state" in o), None) if r["outcome"] != "fit" else None
        state = state or r.get("end_state") or {}
        asked = f"{_mib(last['requested'])} ({_mib(last['device_free'])})" if last and r["outcome"] != "fit" else "-"
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['tag']} | {r['outcome']} | {_failed_where(r)} | {asked} | "
            f"{len(r['ooms'])} | {_gib(_phase_max(r, 'trial'))} | {_gib(_phase_max(r, 'timed'))} | "
            f"{state.get('segments', '-')} | {_mib(state.get('largest_free'))} | {r['phases'].get('trial_s', '-')} |"
        )
    return lines


def compare(runs: list[dict[str, Any]]) -> list[str]:
    """For each model and batch with a fit and a failure: both step by step, the failure's allocator state beside the
    fit's at its end, and the cuDNN plan lines only one of them has."""
    out: list[str] = []
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["model"], r["batch"]), []).append(r)
    for (model, batch), group in sorted(groups.items()):
        fit = next((r for r in group if r["outcome"] == "fit"), None)
        bad = next((r for r in group if r["outcome"] != "fit"), None)
        if fit is None or bad is None:
            continue
        out += [
            "",
            f"### {model} at batch {batch}: {fit['tag']} fitted, {bad['tag']} failed ({_failed_where(bad)})",
            "",
        ]
        out += [
            "| step | phase | fit: reserved / peak reserved GiB, errors seen | failure: reserved / peak GiB, errors |"
        ]
        out += ["|---|---|---|---|"]
        for i in range(max(len(fit["steps"]), len(bad["steps"]))):
            cells = []
            for r in (fit, bad):
                s = r["steps"][i] if i < len(r["steps"]) else None
                cells.append(f"{_gib(s['reserved'])} / {_gib(s['max_reserved'])}, {s['caught_ooms']}" if s else "-")
            phase = (fit["steps"][i] if i < len(fit["steps"]) else bad["steps"][i])["phase"]
            out.append(f"| {i + 1} | {phase} | {cells[0]} | {cells[1]} |")
        failure = next((o for o in reversed(bad["ooms"]) if "state" in o), None)
        if failure:
            state, end = failure["state"], fit.get("end_state") or {}
            out += [
                "",
                f"At the failure ({failure['phase']} step {failure['step']}): asked {_mib(failure['requested'])} MiB, "
                f"{_mib(failure['device_free'])} MiB free on the device, {state['segments']} segments, "
                f"{_gib(state['reserved'])} GiB reserved, {_gib(state['free_in_segments'])} GiB free inside them "
                f"(largest block {_mib(state['largest_free'])} MiB; free blocks by size {state['free_blocks']}). "
                f"The fit at its end: {end.get('segments', '-')} segments, {_gib(end.get('reserved'))} GiB reserved, "
                f"{_gib(end.get('free_in_segments'))} GiB free inside them.",
                "",
                "Largest live allocations at the failure (MiB, where made):",
                "",
            ]
            out += [f"- {_mib(a['size'])}: {' < '.join(a['where'])}" for a in state["largest_allocations"][:8]]
        only_fit = [p for p in fit["plans"] if p not in set(bad["plans"])]
        only_bad = [p for p in bad["plans"] if p not in set(fit["plans"])]
        out += ["", f"cuDNN plan lines only in the fit: {len(only_fit)}; only in the failure: {len(only_bad)}."]
        out += [f"- fit only: `{p[:160]}`" for p in only_fit[:6]] + [
            f"- failure only: `{p[:160]}`" for p in only_bad[:6]
        ]
    return out or ["", "No batch both fitted and failed in these runs."]


PHASES = [
    ("interpreter_start_s", "interpreter start"),
    ("import_torch_s", "import torch"),
    ("import_model_code_s", "import memprobe and the model's library"),
    ("cuda_context_s", "CUDA context"),
    ("cublas_first_matmul_s", "first cuBLAS matmul"),
    ("cudnn_first_conv_s", "first cuDNN convolution"),
    ("setup_s", "build the model"),
    ("flops_count_s", "FLOPs count"),
    ("trial_s", "the 3-step trial"),
    ("timed_s", "1 warm-up + the timed steps"),
]


def timing(runs: list[dict[str, Any]]) -> list[str]:
    """Where each run's seconds went, phase by phase, the trial's first step apart, and the process's exit."""
    lines = ["| run | " + " | ".join(label for _k, label in PHASES) + " | first step | exit | process wall |"]
    lines.append("|---|" + "---|" * (len(PHASES) + 3))
    for r in sorted(runs, key=lambda r: (r["model"], r["tag"])):
        first = next((s["seconds"] for s in r["steps"] if s["phase"] == "trial"), None)
        cells = [str(r["phases"].get(k, "-")) for k, _label in PHASES]
        lines.append(
            f"| {r['tag']} | " + " | ".join(cells) + f" | {first if first is not None else '-'} | "
            f"{r.get('exit_s', '-')} | {r.get('wall_s', '-')} |"
        )
    return lines


def report(folder: Path) -> str:
    """The markdown report of the runs in `folder`."""
    runs = load(folder)
    first = [r for r in runs if "cuda_context_s" in r["phases"] and "cublas_first_matmul_s" in r["phases"]]
    text = [
        "# Why the edge moves: fresh runs at B and B+1 with the memory history on",
        "",
        "Each run is one fresh process running what a scan's fresh check runs (benchmarks/edge_repeat.py run: build, "
        "the 3-step trial, then 1 warm-up and the timed steps going on from it), with PyTorch's memory history on. "
        "`out-of-memory errors seen` counts every one the allocator raised, also those cuDNN caught to fall back to "
        "a plan with a smaller workspace.",
        "",
        "## The runs",
        "",
        *runs_table(runs),
        "",
        "## A fit and a failure at the same batch",
        *compare(runs),
        "",
        "## Where a fresh run's seconds go",
        "",
        "Seconds per phase (the runs with `first` in their tag time the libraries' handles apart, on tiny inputs, "
        "and count the FLOPs first, as a scan's first process does). `first step`: the trial's first step, where "
        "cuDNN chooses its plans for every new convolution shape.",
        "",
        *timing(first or runs),
    ]
    return "\n".join(text) + "\n"
