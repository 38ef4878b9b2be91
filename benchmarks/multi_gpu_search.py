"""Benchmark: the multi-GPU search before and after served process groups (seconds, trials, launches).

Runs `memprobe scan --gpus N --strategy S` once as before served groups (MEMPROBE_SERVED_GROUPS=0,
MEMPROBE_PRESTART=0: every search trial a torchrun launch of its own, started when needed) and once after (the
search's trials in one launch while that is sound, and each launch started ahead while the one before works),
per strategy, taking turns (`--modes before,served,after` adds served groups alone), and prints per run: the
per-GPU B and its proof, the search's and the proof's seconds (the edge: search + proof, the fresh-group proof
included), the whole scan's wall time (with the 1-GPU baseline), search trials, process groups started (all, and
by the search); the JSON adds where each launch's time went. Needs the GPUs (run it on the
machine); each run has a time limit, and a run cut by it is reported with what its partial file holds.

    python benchmarks/multi_gpu_search.py --model bert-large -p fp16 --gpus 2 --strategy ddp,fsdp \\
        --out /tmp/bench --json /tmp/bench/multi_gpu_search.json

The result files of the runs with served groups can go to a folder of their own (--out-after): they are the
scans of record. Every process gets NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
NVSHMEM_DISABLE_NVLS=1 unless already set.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# before: every search trial a launch of its own, each launch started when needed (the code before served groups);
# served: the search in served groups; after: served groups and launches started ahead (the default on CUDA).
MODES = {
    "before": {"MEMPROBE_SERVED_GROUPS": "0", "MEMPROBE_PRESTART": "0"},
    "served": {"MEMPROBE_SERVED_GROUPS": "1", "MEMPROBE_PRESTART": "0"},
    "after": {"MEMPROBE_SERVED_GROUPS": "1", "MEMPROBE_PRESTART": "1"},
}


def scan_command(args: argparse.Namespace, strategy: str, out: Path) -> list[str]:
    """The scan one run makes: the edge and the group's throughput at it, no curve or breakdown."""
    return [
        sys.executable,
        "-m",
        "memprobe",
        "scan",
        "--model",
        args.model,
        "-p",
        args.precision,
        "--gpus",
        str(args.gpus),
        "--strategy",
        strategy,
        "--no-curve",
        "--no-breakdown",
        "--out",
        str(out),
        *args.scan_args,
    ]


def run_one(args: argparse.Namespace, strategy: str, mode: str, out: Path, log: Path) -> dict[str, Any]:
    """One scan in `mode` (before/after); its file's figures, or why there are none. Ended at --timeout with SIGTERM
    (memprobe then writes what finished and ends its ranks)."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **MODES[mode], "PYTHONPATH": str(REPO)}
    for key, value in SAFE_ENV.items():
        env.setdefault(key, value)
    before = set(out.glob("*.json"))
    started = time.perf_counter()
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            scan_command(args, strategy, out), stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=REPO
        )
        try:
            proc.wait(args.timeout)
            cut = False
        except subprocess.TimeoutExpired:
            cut = True
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    wall = time.perf_counter() - started
    row: dict[str, Any] = {
        "strategy": strategy,
        "mode": mode,
        "served_groups": mode != "before",
        "prestarted": mode == "after",
        "exit": proc.returncode,
        "cut_at_timeout_s": args.timeout if cut else None,
        "wall_seconds": round(wall, 1),
        "log": str(log),
    }
    files = sorted(set(out.glob("*.json")) - before)
    if not files:
        row["error"] = "no result file"
        return row
    row["file"] = str(files[-1])
    row.update(figures(json.loads(files[-1].read_text()), args.precision))
    return row


def figures(data: dict[str, Any], precision: str) -> dict[str, Any]:
    """What one result file says of the search: B, the proof, seconds, trials, process groups."""
    p = data["precisions"].get(precision) or {}
    proof = p.get("proof") or {}
    launches = (p.get("settings") or {}).get("launches") or {}
    search_s = p.get("search_seconds")
    proof_s = proof.get("seconds")
    scaling = (p.get("settings") or {}).get("scaling") or {}
    return {
        "status": p.get("status"),
        "interrupted_at": (p.get("settings") or {}).get("interrupted_at"),
        "max_batch": p.get("max_batch"),
        "proof": [proof.get("fits"), proof.get("fails")],
        "agreed": proof.get("agreed"),
        "search_pair": [(proof.get("search") or {}).get("fits"), (proof.get("search") or {}).get("fails")],
        "search_seconds": search_s,
        "proof_seconds": proof_s,
        "edge_seconds": round(search_s + proof_s, 1) if search_s is not None and proof_s is not None else None,
        "search_trials": len(p.get("attempts") or []),
        "fresh_checks_run": len(proof.get("checks") or []) - len(proof.get("reused_from_search") or []),
        "process_groups": launches.get("process_groups"),
        "search_process_groups": launches.get("search_process_groups"),
        "predicted_start": ((p.get("settings") or {}).get("predicted_start") or {}).get("batch"),
        "efficiency": scaling.get("efficiency"),
        # per launch: torchrun until rank 0's Python was up, its imports, joining the group, CUDA's context, the
        # model's build, the launch's wall time (memprobe.probe.distributed.launch.timeline)
        "launch_timelines": launches.get("timelines") or [],
    }


def table(rows: list[dict[str, Any]]) -> str:
    """A markdown table, one line per run."""
    head = [
        "strategy",
        "search",
        "per-GPU B (proof)",
        "edge s (search + proof)",
        "scan s (wall)",
        "search trials",
        "process groups (search)",
        "status",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        proof = r.get("proof") or [None, None]
        edge = r.get("edge_seconds")
        lines.append(
            "| "
            + " | ".join(
                [
                    r["strategy"],
                    {
                        "before": "a launch per trial (before)",
                        "served": "served groups",
                        "after": "served, prestarted (after)",
                    }[r["mode"]],
                    "-" if r.get("max_batch") is None else f"{r['max_batch']} ({proof[0]} fits, {proof[1]} fails)",
                    "-" if edge is None else f"{edge:.0f} ({r['search_seconds']:.0f} + {r['proof_seconds']:.0f})",
                    f"{r['wall_seconds']:.0f}" + (" (cut)" if r.get("cut_at_timeout_s") else ""),
                    str(r.get("search_trials", "-")),
                    f"{r.get('process_groups', '-')} ({r.get('search_process_groups', '-')})",
                    str(r.get("status") or r.get("error")),
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bert-large")
    parser.add_argument("-p", "--precision", default="fp16")
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--strategy", default="ddp,fsdp", help="comma-separated")
    parser.add_argument("--modes", default="before,after", help="which runs, in this order for the first strategy")
    parser.add_argument("--timeout", type=float, default=420.0, help="seconds a run may take (then SIGTERM)")
    parser.add_argument("--out", type=Path, required=True, help="folder for result files and logs")
    parser.add_argument("--out-after", type=Path, help="result files of the runs with served groups go here")
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    parser.add_argument("scan_args", nargs="*", help="more scan options (after --)")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()  # the scans run from the repository's folder
    args.out_after = args.out_after.resolve() if args.out_after else None
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes takes {', '.join(MODES)}")
    rows = []
    for turn, strategy in enumerate(s.strip() for s in args.strategy.split(",") if s.strip()):
        # Taking turns: the mode that ran first for one strategy runs second for the next.
        for mode in modes if turn % 2 == 0 else list(reversed(modes)):
            out = args.out_after if mode == "after" and args.out_after else args.out / mode
            log = args.out / f"{args.model}_{args.precision}_{args.gpus}x{strategy}_{mode}.log"
            args.out.mkdir(parents=True, exist_ok=True)
            print(f"[{strategy} {mode}] {' '.join(scan_command(args, strategy, out))}", file=sys.stderr, flush=True)
            rows.append(run_one(args, strategy, mode, out, log))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    text = table(rows)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "command": "python benchmarks/multi_gpu_search.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "model": args.model,
            "precision": args.precision,
            "gpus": args.gpus,
            "rows": rows,
            "table": text,
        }
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
