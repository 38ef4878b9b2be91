"""Benchmark (no GPU): wall seconds of `memprobe predict` per case, and the numbers it predicts.

Runs each case as a user does (`python -m memprobe predict ...` in a fresh process, from the repository root),
records the wall seconds and every predicted max batch (or max sequence length) of its table, and writes a
markdown table. With --before (the JSON of an earlier run, e.g. on the commit before a speed-up) the table puts
the two runs side by side and says whether every predicted number is the same.

    python benchmarks/predict_speed.py --json after.json --markdown after.md [--before before.json]
    python benchmarks/predict_speed.py --repo /path/to/older/checkout --json before.json   # time older code
    python benchmarks/predict_speed.py --before-repo /path/to/older/checkout --json after.json --markdown after.md

With --before-repo each case is timed in the older checkout right before this one, so both see the machine in the
same state (a 2-core machine's speed drifts by a fifth over an hour); --before-json keeps those runs. --repeat N runs
each case N times in each checkout, the two taking turns, and keeps the run with the median wall seconds (every run's
seconds are kept beside it).

Cases: the default prediction of every registry workload on an H200 (`--model M --gpu H200`), and the LLM
variants: LoRA with checkpointing, the sequence-length search, two GPUs under FSDP.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

VARIANTS = [
    ["-m", "llama-8b", "-p", "bf16", "--lora", "16", "--checkpointing"],
    ["-m", "llama-1b", "--search", "seq-len", "--checkpointing"],
    ["-m", "bert-large", "--gpu", "H200", "--gpus", "2", "--strategy", "fsdp"],
]


def default_cases() -> list[list[str]]:
    """`--model M --gpu H200` for every registry workload that is not test-only, then the LLM variants."""
    from memprobe.core.workload.registry import load_registry

    names = [w.name for w in load_registry(None).values() if not w.test_only]
    return [["-m", name, "--gpu", "H200"] for name in names] + VARIANTS


_PRECISIONS = ("fp32", "tf32", "fp16", "bf16")


def predicted_numbers(stdout: str) -> dict[str, dict[str, str]]:
    """precision -> {column header: value} for every 'max batch' / 'max length' column of predict's tables."""
    out: dict[str, dict[str, str]] = {}
    headers: list[str] = []
    for line in stdout.splitlines():
        if not line.startswith("|"):
            headers = [] if not line.strip() else headers
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == "precision":
            headers = cells
            continue
        if not headers or cells[0] not in _PRECISIONS or len(cells) != len(headers):
            continue
        for head, value in zip(headers, cells):
            if re.search(r"max (batch|length|sequence)", head) and "measured" not in head:
                out.setdefault(cells[0], {})[head] = value
    return out


def run_case(args: list[str], repo: Path, timeout: float) -> dict:
    """One `memprobe predict` in a fresh process: wall seconds, exit code, predicted numbers, progress lines."""
    env = dict(os.environ, PYTHONPATH=str(repo))
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "memprobe", "predict", *args],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {
            "args": args,
            "seconds": round(time.perf_counter() - started, 1),
            "cpu_seconds": None,
            "rc": None,
            "numbers": {},
            "traced_notes": [],
            "error": f"no answer within {timeout:.0f} s",
        }
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "args": args,
        "seconds": round(seconds, 1),
        "cpu_seconds": round(cpu, 1),
        "load": round(load, 1),
        "rc": proc.returncode,
        "numbers": predicted_numbers(proc.stdout),
        "traced_notes": [
            line.removeprefix("note: ")
            for line in proc.stdout.splitlines()
            if line.startswith("note: ") and ("traced" in line or line.startswith("note: time:"))
        ],
        "stderr_lines": len(proc.stderr.splitlines()),
        "error": proc.stderr.strip().splitlines()[-1] if proc.returncode and proc.stderr.strip() else "",
    }


def _numbers_text(numbers: dict[str, dict[str, str]]) -> str:
    return (
        "; ".join(
            f"{p}: " + ", ".join(f"{h.split(':')[0]} {v}" for h, v in cols.items()) for p, cols in numbers.items()
        )
        or "-"
    )


def _seconds(run: dict | None) -> str:
    """'wall (cpu, load)' of a run, '-' when there is none; with repeats, the median run's and every run's wall."""
    if run is None:
        return "-"
    cpu = f"{run['cpu_seconds']}" if run.get("cpu_seconds") is not None else "?"
    runs = run.get("runs_seconds", [])
    every = f"; runs {', '.join(str(x) for x in runs)}" if len(runs) > 1 else ""
    return f"{run['seconds']} ({cpu} CPU, load {run.get('load', '?')}{every})"


def median_run(runs: list[dict]) -> dict:
    """The run with the median wall seconds (the lower middle one of an even number), with every run's seconds in
    "runs_seconds" and "numbers_vary" true when the runs did not all predict the same numbers."""
    ordered = sorted(runs, key=lambda r: r["seconds"])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["runs_seconds"] = [r["seconds"] for r in runs]
    chosen["numbers_vary"] = any(_values(r["numbers"]) != _values(chosen["numbers"]) for r in runs)
    return chosen


def markdown(runs: list[dict], before: list[dict] | None, machine: str) -> str:
    """The table: case, seconds (before and after with --before), predicted numbers, same or not."""
    lines = [
        f"Machine: {machine}.",
        "",
        "Command per case: `python -m memprobe predict ARGS` from the repository root, in a fresh process. "
        "Seconds: wall (CPU seconds of the process and its children, the 1-minute load average when it "
        "started); wall seconds include the import of torch and the workload's libraries.",
        "",
    ]
    old = {" ".join(r["args"]): r for r in before or []}
    if before is not None:
        lines += [
            "| case | before: s | after: s | predicted (after) | same numbers as before |",
            "|---|---|---|---|---|",
        ]
    else:
        lines += ["| case | s | predicted |", "|---|---|---|"]
    for r in runs:
        case = " ".join(r["args"])
        shown = _numbers_text(r["numbers"]) if r["rc"] == 0 else f"exit {r['rc']}: {r['error']}"
        if before is None:
            lines.append(f"| `{case}` | {_seconds(r)} | {shown} |")
            continue
        b = old.get(case)
        same = "-" if b is None else ("yes" if _values(b["numbers"]) == _values(r["numbers"]) else "**no**")
        if r.get("numbers_vary") or (b is not None and b.get("numbers_vary")):
            same += " (**the repeats differ**)"
        lines.append(f"| `{case}` | {_seconds(b)} | {_seconds(r)} | {shown} | {same} |")
    traced = [(" ".join(r["args"]), n) for r in runs for n in r.get("traced_notes", []) if not n.startswith("time:")]
    if traced:
        lines += ["", "Precisions traced at every batch (after):", ""] + [f"- `{c}`: {n}" for c, n in traced]
    return "\n".join(lines) + "\n"


def _values(numbers: dict[str, dict[str, str]]) -> dict[str, list[str]]:
    # Compared by value per precision and column order: a renamed column (batch -> length) is the same number.
    return {p: list(cols.values()) for p, cols in numbers.items()}


def machine_description() -> str:
    """CPU model and core count, Python and torch versions."""
    model = ""
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        model = platform.processor() or "unknown CPU"
    import torch

    return f"{os.cpu_count()}-core CPU ({model}), no GPU; Python {platform.python_version()}, torch {torch.__version__}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", type=Path, default=REPO, help="checkout whose memprobe is timed (default: this one)")
    parser.add_argument("--only", help="run only the cases whose arguments contain this text")
    parser.add_argument("--json", type=Path, help="write the runs as JSON here")
    parser.add_argument("--markdown", type=Path, help="write the markdown table here (default: print it)")
    parser.add_argument("--before", type=Path, help="JSON of an earlier run to compare with")
    parser.add_argument("--before-repo", type=Path, help="an older checkout, each case timed there just before")
    parser.add_argument("--before-json", type=Path, help="with --before-repo: write its runs as JSON here")
    parser.add_argument("--timeout", type=float, default=2400.0, help="seconds per case")
    parser.add_argument("--repeat", type=int, default=1, help="runs per case and checkout; the median is kept")
    opts = parser.parse_args()
    if opts.before and opts.before_repo:
        parser.error("--before and --before-repo are two sources of the same column: give one")
    cases = [c for c in default_cases() if not opts.only or opts.only in " ".join(c)]
    if opts.repeat < 1:
        parser.error("--repeat must be at least 1")
    runs: list[dict] = []
    earlier: list[dict] = []
    checkouts = ([(opts.before_repo, earlier)] if opts.before_repo else []) + [(opts.repo, runs)]
    for args in cases:
        made: list[list[dict]] = [[] for _ in checkouts]
        for _ in range(opts.repeat):
            for (repo, _into), got in zip(checkouts, made):
                run = run_case(args, repo.resolve(), opts.timeout)
                print(
                    f"{run['seconds']:7.1f} s  rc {run['rc']}  {repo.name}: {' '.join(args)}  "
                    f"{_numbers_text(run['numbers'])}",
                    file=sys.stderr,
                    flush=True,
                )
                got.append(run)
        for (_repo, into), got in zip(checkouts, made):
            into.append(median_run(got))
    if opts.json:
        opts.json.write_text(json.dumps(runs, indent=1) + "\n")
    if opts.before_json and earlier:
        opts.before_json.write_text(json.dumps(earlier, indent=1) + "\n")
    before = earlier or None
    if opts.before:
        before = json.loads(opts.before.read_text())
    text = markdown(runs, before, machine_description())
    if opts.markdown:
        opts.markdown.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
