"""Benchmark: the predicted memory breakdown against the measured one, one row per scan and precision.

Reads scan result files that hold a measured breakdown at B (`scan --breakdown`, on by default for CUDA training
scans) and a file of predicted breakdowns at the same batch (benchmarks/gpu/breakdown.sh writes one:
`memprobe.breakdown(..., gpu=<the scanned card>)`, replayed at that card's allocator capacity). Prints a markdown
table: the peak reserved measured and predicted, the allocator slack both ways, how many of the categories (and
the peak) are within the goal (3% or 0.5 GiB), and the category furthest off.

    python benchmarks/breakdown_accuracy.py --predicted reports/breakdown/predicted-breakdowns.json \
        reports/breakdown/h100 reports/h100 reports/breakdown/h200 > reports/breakdown/accuracy.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memprobe.compare.breakdown import comparison_rows, predicted_rows  # noqa: E402
from memprobe.core.records.breakdown import LABELS, read_predicted  # noqa: E402
from memprobe.core.records.results import load_results  # noqa: E402

GIB = 2**30


def rows(paths: list[str], predicted_file: str) -> list[tuple[list[str], bool]]:
    """One table row per (result, precision) with a measured breakdown and a prediction at the same batch, and
    whether every category (and the peak) is within the goal."""
    predicted = read_predicted(predicted_file)
    out = []
    for _path, result in load_results(paths):
        name = str(result.workload.name)
        for precision, p in result.precisions.items():
            measured = p.breakdown
            if measured is None:
                continue
            same = [r for r in predicted_rows(predicted, name, precision) if r["breakdown"].batch == measured.batch]
            same = [r for r in same if r.get("memory", "").endswith(result.gpu_name())] or same
            if not same:
                continue
            compared = comparison_rows(measured, same[0]["breakdown"])
            by = {r["category"]: r for r in compared}
            worst = max((r for r in compared if r["category"] != "peak_reserved"), key=lambda r: abs(r["difference"]))
            cells = [
                result.gpu_name(),
                name,
                precision,
                str(measured.batch),
                f"{by['peak_reserved']['measured'] / GIB:.2f}",
                f"{by['peak_reserved']['predicted'] / GIB:.2f}",
                f"{100 * by['peak_reserved']['difference'] / max(1, by['peak_reserved']['measured']):+.2f}%",
                f"{by['allocator_slack']['measured'] / GIB:.2f} / {by['allocator_slack']['predicted'] / GIB:.2f}",
                f"{sum(r['within_goal'] for r in compared)} of {len(compared)}",
                f"{LABELS.get(worst['category'], worst['category'])} {worst['difference'] / GIB:+.2f} GiB",
            ]
            out.append((cells, all(r["within_goal"] for r in compared)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="result files or folders with measured breakdowns")
    parser.add_argument("--predicted", required=True, help="predicted breakdowns at the measured batches")
    args = parser.parse_args()
    table = rows(args.paths, args.predicted)
    header = [
        "GPU",
        "workload",
        "precision",
        "B",
        "peak reserved, measured GiB",
        "predicted GiB",
        "predicted - measured",
        "allocator slack GiB, measured / predicted",
        "within 3% or 0.5 GiB",
        "furthest off",
    ]
    print("# Memory breakdown at B: measured against predicted\n")
    print(
        "Measured by `memprobe scan` (MemTracker at B, in a fresh process); predicted on the CPU at the same batch "
        "and the card's allocator capacity (`memprobe.breakdown(..., gpu=CARD)`, labelled predicted). Written by "
        f"`python benchmarks/breakdown_accuracy.py --predicted {args.predicted} {' '.join(args.paths)}`; every "
        "table in full: [breakdown.md](breakdown.md).\n"
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for cells, _ in table:
        print("| " + " | ".join(cells) + " |")
    within = sum(1 for _, all_within in table if all_within)
    print(f"\n{len(table)} scans and precisions; every category within the goal in {within}.")


if __name__ == "__main__":
    main()
