"""Benchmark (no GPU): what the search's predicted start would have saved on committed scans, replayed.

For every finished precision of the result files given, the search (probe/search.find_max_batch) is run
twice against a stand-in for that scan's GPU: a trial at batch n fits iff n <= the scan's max batch, with
the peak of the scan's own fitted memory model (peak_reserved line), and the capacity the scan recorded.
Once without a hint, once starting from `memprobe predict`'s max batch for that capacity, taken from a
calibration file (benchmarks/calibration.py --json). The seconds are estimates: batch 1 at what the scan's
batch 1 took, every other trial at the median of the scan's own fresh-process trials. A replay, not a
measurement: the GPU runs say what the predicted start really saves.

    python benchmarks/predicted_start_replay.py reports/h100 --calibration reports/calibration_h100.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from memprobe.core.estimates.memory_model import Attempt  # noqa: E402
from memprobe.probe.search import find_max_batch  # noqa: E402


def stand_in(edge: int, static: float, per_sample: float):
    """try_batch for a GPU whose edge is `edge`, peaks on the line static + per_sample x n."""

    def trial(batch: int) -> Attempt:
        if batch > edge:
            return Attempt(batch, "oom", message="replayed: above the scan's max batch")
        peak = int(static + per_sample * batch)
        return Attempt(batch, "fit", peak, peak)

    return trial


def replay(precision: dict, predicted: int | None) -> dict:
    """Trials and estimated seconds without and with the predicted start, for one precision of a scan."""
    model = (precision.get("memory_model") or {}).get("peak_reserved")
    edge, capacity = precision["max_batch"], precision["capacity_bytes"]
    attempts = precision.get("attempts") or []
    fresh = [a["seconds"] for a in attempts if a.get("fresh") and a.get("seconds")]
    per_trial = statistics.median(fresh) if fresh else statistics.median([a["seconds"] for a in attempts])
    first = attempts[0]["seconds"] if attempts else per_trial
    out = {"committed_trials": len(attempts), "committed_seconds": precision.get("search_seconds")}
    for label, hint in (("plain", None), ("hinted", predicted)):
        found = find_max_batch(
            stand_in(edge, model["static_bytes"], model["per_sample_bytes"]),
            capacity,
            hint=(lambda h=hint: h) if hint else None,
        )
        if found.max_batch != edge:
            raise SystemExit(f"replay found {found.max_batch}, the scan {edge}: the stand-in is wrong")
        out[f"{label}_trials"] = found.trials
        out[f"{label}_seconds"] = round(first + (found.trials - 1) * per_trial, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="result files or folders")
    parser.add_argument("--calibration", type=Path, required=True, help="benchmarks/calibration.py --json output")
    args = parser.parse_args(argv)
    from memprobe.compare.scan_table import newest_finished
    from memprobe.core.records.results import load_results

    predicted = {
        (r["workload"], r["precision"], r["card"]): r["predicted"]
        for r in json.loads(args.calibration.read_text())["rows"]
    }
    rows = []
    for result, name, p in newest_finished([r for _p, r in load_results(args.paths, strict_files=False)]):
        if (
            p.status != "done"
            or not p.max_batch
            or not p.capacity_bytes
            or (result.environment.gpu is not None and result.environment.gpu.emulated_total_bytes)
        ):
            continue
        workload, gpu = str(result.workload.name), result.gpu_name()
        hint = predicted.get((workload, name, f"{gpu} (real)"))
        got = replay(
            {
                "memory_model": p.memory_model,
                "max_batch": p.max_batch,
                "capacity_bytes": p.capacity_bytes,
                "attempts": p.attempts,
                "search_seconds": p.search_seconds,
            },
            hint,
        )
        rows.append(
            [
                workload,
                name,
                p.max_batch,
                hint,
                got["committed_trials"],
                got["committed_seconds"],
                got["plain_trials"],
                got["plain_seconds"],
                got["hinted_trials"],
                got["hinted_seconds"],
            ]
        )
    head = [
        "workload",
        "precision",
        "max batch",
        "predicted",
        "committed trials",
        "committed search s",
        "replayed trials",
        "est. s",
        "replayed trials, predicted start",
        "est. s",
    ]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join("-" if v is None else str(v) for v in row) + " |")
    total = [sum(r[i] for r in rows if isinstance(r[i], (int, float))) for i in (5, 7, 9)]
    print(
        f"\nSearch seconds over {len(rows)} precisions: committed {total[0]:.0f} s; replayed {total[1]:.0f} s "
        f"without and {total[2]:.0f} s with the predicted start (estimates; the waiting for the prediction "
        "is not counted: it overlaps the model build and batch 1)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
