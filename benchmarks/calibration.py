"""Benchmark: `memprobe predict` (no GPU) against every committed scan, real and with emulated caps.

The prediction calibration in one command. For each workload and precision it takes the newest finished
scan per card from the result folders given (the real H100, and `scan --memory-cap` runs on it,
labelled "... [emulated 24 GiB cap]"), traces the trial once on fake tensors, and predicts the max
batch at exactly the allocator capacity each scan recorded, so prediction and scan answer the same
question. Prints a markdown table (one column group per card) and writes every row as JSON.

    python benchmarks/calibration.py reports/h100 reports/h200 --json reports/calibration_h100_h200.json
    python benchmarks/calibration.py reports/h100 reports/emulated_h100 --json reports/calibration_h100.json

Multi-GPU result files (`scan --gpus N --strategy ...`) are predicted per GPU for the same world size and
strategy (`predict --gpus N`, data_parallel.py) at the usable memory `predict --gpus N --gpu CARD` takes for a rank
of a group on that card (core/cards/overhead.py: the smallest capacity a rank recorded less what NCCL took outside the
allocator), every file's newest finished scan per card, world size and strategy, and get a table of their own:
per-GPU B measured, predicted and safe (the batch predict tells a user to run), the 1-GPU B of the same card where a
single-GPU file is given, and the scaling efficiency the scan measured.

    python benchmarks/calibration.py reports/2x_h200 reports/h200 --json reports/calibration_multi_gpu.json \
        --md reports/calibration_multi_gpu.md

The timm workloads need torchvision to import; where none can load (this project's CPU machine) the
tests' stand-in is installed, as in benchmarks/predict_without_torchvision.py.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]


def _card_key(result) -> tuple[str, int]:
    """(column label, sort key): the real card first, then emulated caps by size; a multi-GPU scan is its
    own column, per GPU ("2x NVIDIA H200 ddp, per GPU")."""
    from memprobe.compare.scaling import strategy, world_size

    cap = result.environment.gpu.emulated_total_bytes if result.environment.gpu is not None else None
    if cap:
        return f"{cap / 2**30:g} GiB emulated", int(cap)
    size = world_size(result)
    if size > 1:
        return f"{size}x {result.gpu_name()} {strategy(result)}, per GPU", (1 << 62) - size
    return f"{result.gpu_name()} (real)", 1 << 62


def _world(result) -> tuple[int, str] | None:
    """(N, strategy) of a multi-GPU scan, None for one GPU: the prediction is made for the same world."""
    from memprobe.compare.scaling import strategy, world_size

    size = world_size(result)
    return (size, strategy(result)) if size > 1 else None


def collect(paths: list[str], models: list[str] | None) -> dict[tuple, dict[str, list[dict]]]:
    """(workload, world) -> precision -> one entry per card: the newest finished scan's answer and capacity;
    world is None for one GPU, (N, strategy) for a multi-GPU scan (its per-GPU edge and capacity)."""
    from memprobe.compare.scan_table import newest_finished
    from memprobe.core.records.results import load_results
    from memprobe.core.records.settings import Scaling
    from memprobe.predict.summary import trial_fit_batches

    loaded = load_results(paths, strict_files=False)
    by_result = {id(result): path for path, result in loaded}
    out: dict[str, dict[str, list[dict]]] = {}
    for result, precision, p in newest_finished([r for _, r in loaded]):
        name = str(result.workload.name)
        if (models and name not in models) or p.status != "done" or p.max_batch is None or not p.capacity_bytes:
            continue
        if result.mode != "train":
            continue  # the traced trial is a training step; an inference scan answers another question
        label, order = _card_key(result)
        trial_fits = trial_fit_batches(p.proof.checks if p.proof else [])
        world = _world(result)
        scaling = p.settings.scaling or Scaling()
        out.setdefault((name, world), {}).setdefault(precision, []).append(
            {
                "card": label,
                "order": order,
                "file": str(by_result[id(result)]),
                "workload": result.workload,
                "capacity_bytes": int(p.capacity_bytes),
                "measured": int(p.max_batch),
                # the largest batch whose 3-step trial fitted in a fresh process (the timed run may then have failed)
                "trial_edge": max(trial_fits, default=None),
                "gpu": result.gpu_name(),
                "world_size": world[0] if world else 1,
                "strategy": world[1] if world else None,
                "efficiency": scaling.efficiency,
                "scaling_batch": scaling.per_gpu_batch,
            }
        )
    return out


PASSED_ON = ("gpu", "world_size", "strategy", "efficiency", "scaling_batch")  # from a scan's entry to its row


def group_capacity(entry: dict) -> int:
    """The usable memory `predict --gpus N --gpu CARD` takes on a rank of a group of the scan's card (the rank's
    recorded capacity where the catalog does not know the card: nothing was measured of it)."""
    from memprobe.core.cards.cardsize import card_size
    from memprobe.core.cards.catalog import default_catalog
    from memprobe.core.cards.overhead import usable_memory

    card = default_catalog().find(entry["gpu"])
    if card is None:
        return entry["capacity_bytes"]
    return usable_memory(card.name, card_size(card)[0], card, group=True).capacity_bytes


def predict_rows(name: str, per_precision: dict[str, list[dict]], world: tuple[int, str] | None = None) -> list[dict]:
    """Trace `name` (as rank 0 of `world` when given) and predict the max batch at every recorded capacity."""
    from memprobe.core.cards.catalog import PRECISIONS
    from memprobe.core.workload.registry import load_registry
    from memprobe.predict.batch_model import PrecisionTraces
    from memprobe.predict.data_parallel import World
    from memprobe.predict.safe import safe_margin, safe_max_batch
    from memprobe.predict.sessions import trace_sessions

    workload = load_registry()[name]
    data_parallel = World(*world) if world else None
    margin = safe_margin(data_parallel)
    rows = []
    with trace_sessions(workload, world=data_parallel) as session_for:
        for precision in sorted(per_precision, key=PRECISIONS.index):
            started = time.perf_counter()
            traces = PrecisionTraces(session_for(precision), precision)
            for entry in sorted(per_precision[precision], key=lambda e: e["order"]):
                if entry["workload"].params != workload.params:
                    raise SystemExit(
                        f"{entry['file']}: {name} was scanned with other parameters than models.yaml has now"
                    )
                capacity = group_capacity(entry) if world else entry["capacity_bytes"]
                predicted, _ = traces.max_batch(capacity)
                safe = safe_max_batch(traces, capacity, margin, predicted)
                measured = entry["measured"]
                rows.append(
                    {
                        "workload": name,
                        "precision": precision,
                        "card": entry["card"],
                        "file": entry["file"],
                        "capacity_gib": round(capacity / 2**30, 2),
                        "measured": measured,
                        "trial_edge": entry["trial_edge"],
                        "predicted": predicted,
                        "safe": safe,
                        "safe_margin": margin,
                        "error_percent": round(100.0 * (predicted - measured) / measured, 2) if measured else None,
                        "trace": traces.how,
                        **{key: entry[key] for key in PASSED_ON if key in entry},
                    }
                )
            print(f"[{name} {precision}] {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return rows


def table(rows: list[dict]) -> str:
    """One line per workload and precision; per card: measured, predicted, error."""
    cards = sorted({(r["card"], r["capacity_gib"]) for r in rows}, key=lambda c: -c[1])
    labels = []
    for card, _ in cards:
        if card not in labels:
            labels.append(card)
    head = ["workload", "precision"]
    for label in labels:
        head += [f"{label}: measured", "predicted", "error"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    keys = []
    for r in rows:
        if (r["workload"], r["precision"]) not in keys:
            keys.append((r["workload"], r["precision"]))
    for workload, precision in keys:
        cells = [workload, precision]
        for label in labels:
            r = next(
                (r for r in rows if (r["workload"], r["precision"], r["card"]) == (workload, precision, label)), None
            )
            if r is None:
                cells += ["not run", "", ""]
                continue
            err = r["error_percent"]
            mark = "**" if err is not None and abs(err) > 3 else ""
            cells += [str(r["measured"]), str(r["predicted"]), f"{mark}{err:+.1f}%{mark}" if err is not None else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    within = sum(1 for r in rows if r["error_percent"] is not None and abs(r["error_percent"]) <= 3)
    exact = sum(1 for r in rows if r["predicted"] == r["measured"])
    unsafe = [r for r in rows if r["predicted"] > r["measured"]]
    lines += [
        "",
        f"Within 3%: {within} of {len(rows)} comparisons; exact: {exact}.",
        f"Unsafe (predicted above the measured B, a batch that did not train): {len(unsafe)} of {len(rows)}"
        + (f", by at most {max(r['predicted'] - r['measured'] for r in unsafe)} batch" if unsafe else "")
        + ".",
    ]
    return "\n".join(lines)


def _safe_cell(row: dict) -> str:
    """The safe batch, marked where it is above the measured B (a batch that did not train)."""
    safe = row.get("safe")
    if safe is None:
        return "-"
    return f"**{safe}**" if safe > row["measured"] else str(safe)


def multi_gpu_table(rows: list[dict]) -> str:
    """One line per GPU, workload, precision, strategy and world size of the multi-GPU rows: the per-GPU B measured
    (and the 1-GPU B of the same card, from the single-GPU rows), predicted, the error, the scaling efficiency."""
    single = {(r["gpu"], r["workload"], r["precision"]): r["measured"] for r in rows if r.get("world_size", 1) == 1}
    multi = [r for r in rows if r.get("world_size", 1) > 1]
    head = [
        "GPU",
        "workload",
        "precision",
        "strategy",
        "GPUs",
        "per-GPU B (measured)",
        "predicted (per GPU)",
        "error",
        "safe (per GPU)",
        "1-GPU B (measured)",
        "efficiency (measured)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    order = {"fp32": 0, "tf32": 1, "fp16": 2, "bf16": 3}
    for r in sorted(
        multi, key=lambda r: (r["gpu"], r["workload"], order.get(r["precision"], 9), r["strategy"], r["world_size"])
    ):
        err = r["error_percent"]
        mark = "**" if err is not None and abs(err) > 3 else ""
        efficiency = r.get("efficiency")
        at = f" at {r['scaling_batch']}" if r.get("scaling_batch") not in (None, r["measured"]) else ""
        lines.append(
            "| "
            + " | ".join(
                [
                    r["gpu"],
                    r["workload"],
                    r["precision"],
                    str(r["strategy"]),
                    str(r["world_size"]),
                    str(r["measured"]),
                    str(r["predicted"]),
                    f"{mark}{err:+.1f}%{mark}" if err is not None else "-",
                    _safe_cell(r),
                    str(single.get((r["gpu"], r["workload"], r["precision"]), "not given")),
                    "-" if efficiency is None else f"{100 * efficiency:.1f}%{at}",
                ]
            )
            + " |"
        )
    unsafe = [r for r in multi if r["predicted"] > r["measured"]]
    unsafe_safe = [r for r in multi if r.get("safe") is not None and r["safe"] > r["measured"]]
    margins = ", ".join(sorted({f"{r['strategy']} {r['safe_margin']:.0%}" for r in multi if "safe_margin" in r}))
    capacities = sorted({f"{r['gpu']} {r['capacity_gib']} GiB" for r in multi if "capacity_gib" in r})
    lines += [
        "",
        f"Per GPU: {len(multi)} multi-GPU comparisons; exact: {sum(1 for r in multi if r['predicted'] == r['measured'])}"
        f"; unsafe (predicted above the measured per-GPU B): {len(unsafe)}"
        + (f", by at most {max(r['predicted'] - r['measured'] for r in unsafe)} batch" if unsafe else "")
        + f"; safe batch above the measured per-GPU B: {len(unsafe_safe)} (margin of the usable memory left: "
        f"{margins or '-'})."
        + (
            " Predicted and safe per GPU at the usable memory `predict --gpus N --gpu CARD` takes for a rank of a "
            f"group: {', '.join(capacities)} (the smallest capacity a rank recorded, less what NCCL took outside the "
            "allocator; core/cards/overhead.py)."
            if capacities
            else ""
        ),
        "Efficiency: throughput of N GPUs / (N x throughput of 1 GPU) at the per-GPU batch (at B unless said).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="result files or folders (real and emulated scans)")
    parser.add_argument("--model", action="append", help="only these workloads (repeatable)")
    parser.add_argument("--json", type=Path, help="write every row here")
    parser.add_argument("--md", type=Path, help="write the tables (markdown) here too")
    args = parser.parse_args(argv)
    from torchvision_standin import install_standin, torchvision_usable

    if not torchvision_usable():
        install_standin()
        print("(torchvision stand-in installed: timm imports, and any torchvision call would raise)", file=sys.stderr)
    import torch

    started = time.perf_counter()
    rows = []
    for (name, world), per_precision in sorted(
        collect(args.paths, args.model).items(), key=lambda kv: (kv[0][0], kv[0][1] or ())
    ):
        rows += predict_rows(name, per_precision, world)
    single = [r for r in rows if r.get("world_size", 1) == 1]
    multi = [r for r in rows if r.get("world_size", 1) > 1]
    parts = [table(single)] if single else []
    if multi:
        parts.append(
            "Several GPUs, per GPU (each scan predicted for its own world size and strategy):\n\n"
            + multi_gpu_table(rows)
        )
    text = "\n\n".join(parts)
    print(text)
    if args.md:
        command = "python benchmarks/calibration.py " + " ".join(sys.argv[1:] if argv is None else argv)
        args.md.write_text(
            f"Predicted (`memprobe predict`, no GPU) against measured max batch.\n\n`{command}`\n\n{text}\n"
        )
    if args.json:
        doc = {
            "command": "python benchmarks/calibration.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "host": {
                "platform": platform.platform(),
                "cpu": platform.processor() or platform.machine(),
                "torch": torch.__version__,
                "transformers": metadata.version("transformers"),
                "timm": metadata.version("timm"),
            },
            "seconds": round(time.perf_counter() - started, 1),
            "rows": rows,
        }
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
