"""The multi-GPU held-out check: each held-out 2-GPU scan beside the batch `memprobe predict` tells a user to run.

    python benchmarks/multi_heldout.py                      # predict every scan, then write the table
    python benchmarks/multi_heldout.py --no-predict         # the table from the predictions already there

The scans come from benchmarks/gpu/multi_heldout.sh (reports/multi_heldout/<card>/results/<job>/, models in
benchmarks/zoo_models/multi_heldout.yaml); each is predicted per GPU on this machine's CPUs by `benchmarks/zoo.py
--zoo-file ... predict` (`memprobe predict --gpus 2 --strategy S --gpu CARD`: the predicted max batch and the safe
batch, and the prediction at the scan's own capacity) into reports/multi_heldout/predictions/<host>.json. The table,
reports/multi_heldout/accuracy.md (and .json), has per scan the measured per-GPU B with its fresh runs and flaky band,
the largest batch whose trial fitted fresh, the predicted and safe batches with their errors, and the seconds the
edge took (search + proof; the goal is 90 s). The safe batch must never be above the measured B.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ZOO_FILE = ROOT / "benchmarks" / "zoo_models" / "multi_heldout.yaml"
FOLDER = ROOT / "reports" / "multi_heldout"
EDGE_GOAL_S = 90.0  # the per-GPU edge of a held-out model within 90 s per strategy


def measured(result_path: Path) -> dict[str, Any]:
    """What a held-out scan measured: per-GPU B, its fresh runs and band, the largest fresh trial fit, seconds."""
    from memprobe.core.records.results import read_result
    from memprobe.core.text.edge_text import band_text, runs_text
    from memprobe.predict.summary import trial_fit_batches

    result = read_result(result_path)
    p = result.precisions.get("bf16") or next(iter(result.precisions.values()), None)  # the held-out scans: bf16
    if p is None:
        return {"status": result.status, "max_batch": None, "verified": False, "runs": "-", "band": "", "error": ""}
    proof = p.proof
    edge_s = (p.search_seconds or 0.0) + ((proof.seconds if proof else None) or 0.0)
    return {
        "status": p.status,
        "max_batch": p.max_batch if p.status == "done" else None,
        "verified": bool(proof and proof.verified),
        "runs": runs_text(proof, short=True) or "-",
        "band": band_text(proof, counts=True) or "",
        "trial_edge": max(trial_fit_batches(proof.checks if proof else []), default=None),
        "edge_seconds": round(edge_s, 1) if p.search_seconds is not None else None,
        "error": (p.error or "").splitlines()[0][:100] if p.error else "",
    }


def rows(folder: Path, host: str) -> list[dict[str, Any]]:
    """One row per scanned job under folder/<card>/results, with the host's prediction of it."""
    predictions = json.loads((folder / "predictions" / f"{host}.json").read_text()).get("predictions", {})
    out = []
    for card_folder in sorted(p for p in folder.iterdir() if (p / "results").is_dir()):
        for job in sorted(p for p in (card_folder / "results").iterdir() if p.is_dir()):
            files = sorted(job.glob("*.json"))
            if not files:
                continue
            model, _kind, strategy = job.name.split("__")
            m = measured(files[-1])
            got = next((v for k, v in predictions.items() if k.endswith("/" + job.name)), {})
            b = m["max_batch"]
            out.append(
                {
                    "card": card_folder.name,
                    "model": model,
                    "strategy": strategy,
                    "file": str(files[-1].relative_to(ROOT)),
                    **m,
                    "predicted": got.get("predicted"),
                    "safe": got.get("predicted_safe"),
                    "at_capacity": got.get("predicted_at_capacity"),
                    "predict_error": got.get("error"),
                    "predicted_error": (got["predicted"] - b) / b if b and got.get("predicted") else None,
                    "safe_error": (got["predicted_safe"] - b) / b if b and got.get("predicted_safe") else None,
                }
            )
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def render(table: list[dict[str, Any]], host: str) -> str:
    """accuracy.md's text."""
    lines = [
        "# The multi-GPU held-out set: measured per-GPU max batch against `memprobe predict --gpus 2`",
        "",
        "Models memprobe does not use elsewhere (benchmarks/zoo_models/multi_heldout.yaml), scanned on 2 GPUs under "
        "DDP and FSDP2 in bf16 by `benchmarks/gpu/multi_heldout.sh` and predicted per GPU on a CPU by "
        f"`python benchmarks/multi_heldout.py` (host `{host}`: `memprobe predict --gpus 2 --strategy S --gpu CARD`). "
        "**over** = above the measured per-GPU B (that batch did not train in a fresh process group). The safe batch "
        "is the one a user is told to run.",
        "",
        "| card | model | strategy | per-GPU B (fresh runs; flaky) | trial fitted fresh up to | predicted (error) | "
        "safe (error) | at the scan's capacity | edge s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        if r["max_batch"] is None:
            b = f"- ({r.get('error') or r['status']})"
        else:
            b = f"[{r['max_batch']}](../../{r['file']}) ({r['runs']}{'; ' + r['band'] if r['band'] else ''})"
            b += "" if r["verified"] else " unverified"
        over = " **over**" if (r["predicted_error"] or 0) > 0 else ""
        safe_over = " **over**" if (r["safe_error"] or 0) > 0 else ""
        predicted = (
            f"error: {r['predict_error'][:60]}"
            if r["predict_error"]
            else f"{r['predicted']} ({_pct(r['predicted_error'])}){over}"
        )
        cells = [
            r["card"],
            r["model"],
            r["strategy"],
            b,
            r.get("trial_edge") if r.get("trial_edge") is not None else "-",
            predicted,
            f"{r['safe']} ({_pct(r['safe_error'])}){safe_over}" if r["safe"] else "-",
            r["at_capacity"] if r["at_capacity"] is not None else "-",
            r.get("edge_seconds") if r.get("edge_seconds") is not None else "-",
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    scanned = [r for r in table if r["max_batch"] and r["safe"]]
    unsafe = [f"{r['model']} {r['strategy']}" for r in scanned if r["safe"] > r["max_batch"]]
    over = [r for r in scanned if r["predicted"] and r["predicted"] > r["max_batch"]]
    slow = [f"{r['model']} {r['strategy']}" for r in table if (r.get("edge_seconds") or 0) > EDGE_GOAL_S]
    lines += [
        "",
        f"Safe batch above the measured per-GPU B: {len(unsafe)} of {len(scanned)}"
        + (f" ({', '.join(unsafe)})" if unsafe else "")
        + f"; predicted max batch above it: {len(over)}.",
        f"Edges that took more than {EDGE_GOAL_S:g} s (search + fresh-process proof): {len(slow)} of {len(table)}"
        + (f" ({', '.join(slow)})" if slow else "")
        + ".",
        "",
        "Fresh runs: how many of the fresh process groups run at B trained it (B needs K in a row, `scan --repeat`); "
        "flaky: the batches from the lowest that failed in a fresh group to the highest that trained in one. Trial "
        "fitted fresh up to: the largest batch whose 3-step trial completed in a fresh group (the steps after it may "
        "then have failed).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=FOLDER, help="reports/multi_heldout (its <card>/results)")
    parser.add_argument("--card", default="H200", help="the catalog card the scans ran on")
    parser.add_argument("--host", default="laptop", help="this machine's name in the predictions file")
    parser.add_argument("--no-predict", action="store_true", help="only write the table")
    args = parser.parse_args(argv)
    if not args.no_predict:
        for card_folder in sorted(p for p in args.folder.iterdir() if (p / "results").is_dir()):
            cmd = [sys.executable, str(ROOT / "benchmarks" / "zoo.py"), "--zoo-file", str(ZOO_FILE), "predict"]
            cmd += ["--results", str(card_folder), "--card", args.card, "--host", args.host]
            cmd += ["--out", str(args.folder / "predictions" / f"{args.host}.json")]
            subprocess.run(cmd, check=True, cwd=ROOT)
    table = rows(args.folder, args.host)
    (args.folder / "accuracy.json").write_text(json.dumps(table, indent=1) + "\n")
    (args.folder / "accuracy.md").write_text(render(table, args.host))
    print(render(table, args.host))
    return 0


if __name__ == "__main__":
    sys.exit(main())
