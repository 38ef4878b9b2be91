"""How long `memprobe report --html` takes, and how large a page it writes, from many result files (synthetic).

The result files are SYNTHETIC: copies of the committed H100 scans (reports/h100) under made-up workload names
(`synthetic-<workload>-<k>`) and relabelled cards, written into a temporary folder that is deleted afterwards. They
exist only to give the page many workloads, cards and curve points; none of their figures is a measurement of the
card it names, and they are never committed as results. What is committed is this script's report of time and size
(reports/benchmarks/page_scale.md).

Run from the repository root with memprobe importable:

    python benchmarks/page_scale.py                       # 30, 100 and 300 files, and one file of a 50,000-point curve
    python benchmarks/page_scale.py --files 300 --out reports/benchmarks/page_scale.md

Each page is written by `python -m memprobe report DIR --with-published --html PAGE` in a fresh process (what a user
runs), timed in CPU seconds (user + system, the process's own: what the page costs) and on the wall clock (which on a
shared machine also counts the waits for a core); stderr is kept, and any line that is not memprobe's own (`wrote`,
`note:`, `warning:`) is counted as a library warning reaching the user.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEMPLATES = REPO / "reports" / "h100"
# Device names the catalog knows, all with at least the H100's 80 GB (the templates' memory lines stay plausible).
DEVICES = [
    ("NVIDIA H100 80GB HBM3", 85520809984),
    ("NVIDIA H100 PCIe", 85520809984),
    ("NVIDIA A100-SXM4-80GB", 85520809984),
    ("NVIDIA A100 80GB PCIe", 85520809984),
    ("NVIDIA H200", 150109880320),
    ("NVIDIA B200", 191466323968),
]
LIMIT_S, LIMIT_BYTES = 10.0, 10_000_000  # what the page must stay within at 300 files


def templates() -> list[dict]:
    """The committed H100 training scans whose every precision finished (one per workload)."""
    found = {}
    for path in sorted(TEMPLATES.glob("*_train_*.json")):
        data = json.loads(path.read_text())
        if all(p.get("status") == "done" for p in data["precisions"].values()) and len(data["precisions"]) == 3:
            found[data["workload"]["name"]] = data
    return list(found.values())


def synthetic(template: dict, workload: str, device: tuple[str, int], created: datetime) -> dict:
    """A copy of `template` named as a synthetic workload on `device` (its figures unchanged: not a measurement)."""
    data = copy.deepcopy(template)
    data["workload"]["name"] = workload
    data["workload"]["description"] = (
        f"SYNTHETIC copy of {template['workload']['name']} for benchmarks/page_scale.py; not a measurement"
    )
    env = data["environment"]
    env["hostname"] = "synthetic"
    env["gpu"]["name"], env["gpu"]["total_bytes"] = device
    env["gpu"]["uuid"] = "synthetic"
    data["created"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    return data


def write_files(folder: Path, count: int) -> None:
    """`count` synthetic result files: workloads x cards, each workload on every card of DEVICES."""
    bases = templates()
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    for i in range(count):
        device = DEVICES[i % len(DEVICES)]
        k = i // len(DEVICES)
        template = bases[k % len(bases)]
        name = f"synthetic-{template['workload']['name']}-{k}"
        data = synthetic(template, name, device, start + timedelta(minutes=i))
        (folder / f"synthetic_{i:04d}_{name}.json").write_text(json.dumps(data))


def long_curve(folder: Path, points: int) -> None:
    """One synthetic file whose fp16 curve has `points` timed batches (1 .. points), B = points."""
    base = next(t for t in templates() if t["workload"]["name"] == "resnet50")
    data = synthetic(base, "synthetic-long-curve", DEVICES[4], datetime(2026, 1, 1, tzinfo=timezone.utc))
    p = data["precisions"]["fp16"]
    model = p["curve"][-1]
    curve = []
    for b in range(1, points + 1):
        speed = 7000.0 * b / (b + 64.0) * (0.7 if b > points * 0.8 else 1.0)  # a rise, then a knee near the top
        entry = dict(model, batch=b, samples_per_s=speed, units_per_s=speed, fresh=False, phase="coarse")
        curve.append(entry)
    best = max(curve, key=lambda c: c["units_per_s"])
    p["curve"] = curve
    p["max_batch"] = points
    p["proof"]["fits"], p["proof"]["fails"] = points, points + 1
    p["best_batch"], p["best_samples_per_s"], p["best_units_per_s"] = (
        best["batch"],
        best["samples_per_s"],
        best["units_per_s"],
    )
    p["knee_batch"], p["knee_after_batch"], p["knee_drop"] = None, None, None
    (folder / "synthetic_long_curve.json").write_text(json.dumps(data))


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(args: list[str]) -> tuple[float, float, list[str], int]:
    """Run `python -m memprobe ARGS` in a fresh process: (CPU seconds, wall seconds, stderr lines, exit code)."""
    cpu, start = _children_cpu(), time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "memprobe", *args], capture_output=True, text=True, cwd=REPO)
    return _children_cpu() - cpu, time.perf_counter() - start, done.stderr.splitlines(), done.returncode


def foreign(lines: list[str]) -> list[str]:
    """Lines on stderr that are not memprobe's own: a library's warning reaching the user."""
    return [line for line in lines if line.strip() and not line.startswith(("wrote ", "note:", "warning:", "  "))]


def measure(folder: Path, label: str) -> dict:
    page = folder / "page.html"
    cpu, wall, err, code = timed(["report", str(folder), "--with-published", "--html", str(page)])
    size = page.stat().st_size if page.exists() else 0
    text_cpu, _wall, _err, _code = timed(["report", str(folder), "--with-published"])
    return {
        "label": label,
        "files": len(list(folder.glob("*.json"))),
        "cpu": cpu,
        "wall": wall,
        "bytes": size,
        "text_cpu": text_cpu,
        "exit": code,
        "foreign": foreign(err),
    }


def report(rows: list[dict]) -> str:
    """The measurements as markdown, with the machine they ran on."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    lines = [
        "# The HTML page from many result files",
        "",
        "`python benchmarks/page_scale.py` (run from the repository root) writes SYNTHETIC result files into a temporary "
        "folder (copies of the committed H100 scans under made-up workload names, on relabelled cards: not "
        "measurements), then times `memprobe report DIR --with-published --html PAGE` in a fresh process, and "
        "`memprobe report DIR --with-published` (the text report) beside it.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU core(s) shared with other work (load average "
        f"{os.getloadavg()[0]:.1f} at the end: the wall clock counts the waits for a core, the CPU seconds do not), "
        f"Python {platform.python_version()}; memprobe at commit {commit.stdout.strip() or '?'}; "
        f"{datetime.now(timezone.utc):%Y-%m-%d}.",
        f"Limits: a page from 300 files in at most {LIMIT_S:g} s and {LIMIT_BYTES / 1e6:g} MB, no "
        "library warning on stderr.",
        "",
        "| case | result files | page CPU s | page wall s | page MB | text report CPU s | exit | library lines on stderr |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['label']} | {r['files']} | {r['cpu']:.1f} | {r['wall']:.1f} | {r['bytes'] / 1e6:.2f} | "
            f"{r['text_cpu']:.1f} | {r['exit']} | {len(r['foreign'])} |"
        )
    strays = [line for r in rows for line in r["foreign"]]
    if strays:
        lines += ["", "Library lines seen:", "", "```", *strays[:20], "```"]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", default="30,100,300", help="comma-separated numbers of result files")
    parser.add_argument("--curve-points", type=int, default=50_000, help="points of the long curve (0: skip)")
    parser.add_argument("--out", help="write the markdown report here (default: print it)")
    args = parser.parse_args()
    rows = []
    for count in (int(n) for n in args.files.split(",") if n):
        with tempfile.TemporaryDirectory(prefix="memprobe-synthetic-") as tmp:
            write_files(Path(tmp), count)
            rows.append(measure(Path(tmp), f"{count} synthetic files"))
        print(f"{count} files: {rows[-1]['cpu']:.1f} CPU s, {rows[-1]['bytes'] / 1e6:.2f} MB", file=sys.stderr)
    if args.curve_points:
        with tempfile.TemporaryDirectory(prefix="memprobe-synthetic-") as tmp:
            long_curve(Path(tmp), args.curve_points)
            rows.append(measure(Path(tmp), f"one file, a {args.curve_points:,}-point curve"))
        print(f"long curve: {rows[-1]['cpu']:.1f} CPU s, {rows[-1]['bytes'] / 1e6:.2f} MB", file=sys.stderr)
    text = report(rows)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)
    ok = all(r["exit"] == 0 and not r["foreign"] for r in rows)
    big = [r for r in rows if r["files"] >= 300 and (r["cpu"] > LIMIT_S or r["bytes"] > LIMIT_BYTES)]
    return 0 if ok and not big else 1


if __name__ == "__main__":
    sys.exit(main())
