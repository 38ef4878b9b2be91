"""Benchmark (no GPU): how close the search's first jump lands to the true edge, from committed scans.

For every finished precision in the result files given, it takes the trials a scan had run when it
made its first jump towards the edge (the first trial after batch 2 that ran fresh, failed, or
peaked above half the capacity), and asks two edge models where the edge is: the line through the
two reserved peaks (memprobe up to commit 0c09421) and search.edge_model (the allocated line scaled
by the largest fit's reserved/allocated ratio). Jumps made from batches 1 and 2 alone are left out:
the search caps those at MAX_GROWTH x the largest fit anyway.

    python benchmarks/first_guess.py reports/h100 reports/emulated_h100
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from memprobe.core.estimates.memory_model import Attempt, edge_model, edge_pair, fit_memory_model  # noqa: E402


def reserved_line(attempts: list[Attempt]):
    """The previous edge model: the line through the reserved peaks of the same two fits."""
    pair = edge_pair(attempts, "peak_reserved")
    return fit_memory_model(pair, basis="peak_reserved") if pair else None


def first_jumps(paths: list[str]) -> list[dict]:
    """One row per distinct (card, workload, precision, edge): the trials known before the jump and both guesses."""
    from memprobe.core.records.results import load_results

    rows, seen = [], set()
    for path, result in sorted(load_results(paths, strict_files=False), key=lambda item: str(item[0])):
        gpu = result.gpu_name()
        for precision, p in result.precisions.items():
            if p.status != "done" or not p.max_batch or not p.capacity_bytes:
                continue
            attempts = list(p.attempts)
            cap = p.capacity_bytes
            jump = next(
                (
                    i
                    for i, a in enumerate(attempts)
                    if i >= 2 and (a.fresh or not a.fits or (a.peak_reserved or 0) > 0.5 * cap)
                ),
                None,
            )
            if jump is None or jump < 3:
                continue
            known = attempts[:jump]
            edge = (p.proof.fits if p.proof else None) or p.max_batch
            key = (gpu, result.workload.name, precision, edge)
            if key in seen:
                continue
            seen.add(key)
            old, new = reserved_line(known), edge_model(known)
            rows.append(
                {
                    "gpu": gpu,
                    "workload": result.workload.name,
                    "precision": precision,
                    "known": [a.batch for a in known],
                    "edge": edge,
                    "file": str(path),
                    "reserved_line": old.max_batch_for(cap) if old else None,
                    "edge_model": new.max_batch_for(cap) if new else None,
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args(argv)
    from tabulate import tabulate

    rows = first_jumps(args.paths)
    table = [
        [
            r["gpu"].replace("NVIDIA H100 80GB HBM3", "H100"),
            r["workload"],
            r["precision"],
            ", ".join(map(str, r["known"])),
            r["edge"],
            r["reserved_line"],
            r["edge_model"],
        ]
        for r in rows
    ]
    print(
        tabulate(
            table,
            headers=[
                "card",
                "workload",
                "precision",
                "trials before the jump",
                "true edge",
                "reserved line",
                "edge_model",
            ],
            tablefmt="github",
        )
    )
    for key in ("reserved_line", "edge_model"):
        errors = [abs(r[key] - r["edge"]) / r["edge"] for r in rows if r[key] is not None]
        exact = sum(r[key] == r["edge"] for r in rows)
        print(f"{key}: mean |error| {100 * sum(errors) / len(errors):.1f}% over {len(errors)} jumps, exact {exact}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
