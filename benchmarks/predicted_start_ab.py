"""Benchmark (GPU): the search with and without the predicted start, on the same card, from the scans' own result files.

For each run (a model and its scan options), runs `memprobe scan --no-throughput` twice, with `--predicted-start`
first (so any warm-up of the machine's file cache favours the run without it) and then `--no-predicted-start`,
each into its own folder under --out, then prints a table from the result files: per precision, the max batch,
the search's seconds (result.search_seconds: from the precision's start to the search's last trial, so the first
precision includes the first trial process's set-up) and trials, with and without, and what became of the
prediction (settings.predicted_start: the predicted batch, when it came, used or why not).

    python benchmarks/predicted_start_ab.py --out reports/benchmarks/predicted_start_ab_h200
    python benchmarks/predicted_start_ab.py --out reports/benchmarks/predicted_start_ab_h200 --run nasnet-large \
        --scan-option=-p --scan-option=fp16      # one precision at a time: the table merges a run's files
    python benchmarks/predicted_start_ab.py --out reports/benchmarks/predicted_start_ab_h200 --table-only
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from memprobe.core.records.results import read_result, slug  # noqa: E402
from memprobe.core.records.settings import PrecisionSettings  # noqa: E402

RUNS = ["llama-1b", "llama-1b --checkpointing", "bert-large", "nasnet-large"]
SIDES = {"with": "--predicted-start", "without": "--no-predicted-start"}


def folder(out: Path, run: str, side: str) -> Path:
    """Where one run's scan with (`side` "with") or without the predicted start writes its result file."""
    return out / slug(run) / side


def commands(runs: list[str], out: Path, extra: list[str]) -> list[list[str]]:
    """The scans to run, in order: each run with the predicted start, then without."""
    return [
        [
            sys.executable,
            "-m",
            "memprobe",
            "scan",
            "--model",
            *shlex.split(run),
            "--no-throughput",
            flag,
            *extra,
            "--out",
            str(folder(out, run, side)),
        ]
        for run in runs
        for side, flag in SIDES.items()
    ]


def _prediction(settings: PrecisionSettings) -> str:
    record = settings.predicted_start
    if not record:
        return "-"
    if record.get("max_batch") is None:
        return f"none ({record.get('why') or record.get('error', '')})"
    came = (
        f"{record['max_batch']} at {record['arrived_s']:g} s"
        if record.get("arrived_s") is not None
        else str(record["max_batch"])
    )
    return f"{came}, {'used' if record.get('used') else 'not used: ' + str(record.get('why', ''))}"


def rows(out: Path, runs: list[str]) -> list[list[str]]:
    """One row per run and precision: run, precision, B with/without, search seconds with/without, trials
    with/without, the prediction. Every result file of a side counts (a run scanned one precision at a time
    too), the newest per precision; a side without one shows '-'."""
    found: dict[tuple[str, str], dict] = {}
    for run in runs:
        for side in SIDES:
            found[run, side] = {}
            for path in sorted(folder(out, run, side).glob("*.json")):  # by time (in the name): the newest wins
                found[run, side].update(read_result(path).precisions)
    table = []
    for run in runs:
        sides = [found[run, side] for side in SIDES]
        for name in dict.fromkeys(n for precisions in sides for n in precisions):
            got = [precisions.get(name) for precisions in sides]

            def cell(attr, got=got):
                return [str(getattr(p, attr)) if p and getattr(p, attr) is not None else "-" for p in got]

            trials = [str(len(p.attempts)) if p else "-" for p in got]
            table.append(
                [
                    run,
                    name,
                    *cell("max_batch"),
                    *cell("search_seconds"),
                    *trials,
                    _prediction(got[0].settings) if got[0] else "-",
                ]
            )
    return table


HEADER = [
    "run",
    "precision",
    "B with",
    "B without",
    "search s with",
    "search s without",
    "trials with",
    "trials without",
    "prediction (with)",
]


def markdown(table: list[list[str]]) -> str:
    """The rows as a markdown table."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in table])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the result files (one subfolder per run)")
    parser.add_argument(
        "--run",
        action="append",
        dest="runs",
        metavar="'MODEL [SCAN OPTIONS]'",
        help=f"a model and its scan options, repeatable (default: {', '.join(RUNS)})",
    )
    parser.add_argument(
        "--scan-option",
        action="append",
        default=[],
        metavar="OPTION",
        help="an option for every scan, e.g. --scan-option=-p --scan-option=bf16",
    )
    parser.add_argument("--table-only", action="store_true", help="print the table from the result files under --out")
    args = parser.parse_args(argv)
    runs = args.runs or RUNS
    if not args.table_only:
        for command in commands(runs, args.out, args.scan_option):
            print("+", shlex.join(command[1:]), flush=True)
            done = subprocess.run(command, check=False)
            if done.returncode:  # 1: a precision ended in an error; its row says what there is
                print(f"scan exited {done.returncode}", file=sys.stderr)
            if done.returncode in (2, 130, 143):  # no GPU, or stopped: the other scans would end the same
                return done.returncode
    print(markdown(rows(args.out, runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
