"""A rank's record on a real device, every part of it: torchrun's launches and a served group of one rank each, on
one GPU (NCCL) or the CPU (gloo), with what each record read back as.

A launch (probe/distributed/launch.py) and a served group (group.py) with world size 1 run the same rank code as N
GPUs do (child/rank.py, served_rank.py: setup, commits, trials, the timed run, a rebuild after an out-of-memory
trial), so one GPU shows every record a rank writes (RankSetup, RankMarks, RankTrial, Timed, Rebuild) crossing from
the rank to the scan on real hardware. What it runs:

1. a launch under DDP (world size 1) of batches `--batches`, then the timed run at the last;
2. a served group under `--strategy` of three trials: the first batch, `--oom-batch` (out of memory: the rank builds
   the model again and records a Rebuild), the first batch again (it goes on in the same group).

    python benchmarks/rank_wires.py --model resnet50 --precision bf16 --out /tmp/w.json          # on a GPU
    python benchmarks/rank_wires.py --model toy --device cpu --cpu-budget 8MiB --oom-batch 100000  # here

Prints one line per step and writes the JSON of everything it read (`--out`). Exit 1 where a step did not answer as
expected (a launch's batches not all fitted, the served group's out-of-memory trial not an out-of-memory, no
rebuild recorded, the trial after it not a fit).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memprobe.core.process.outcomes import FIT, OOM  # noqa: E402
from memprobe.core.process.rank_record import LaunchRequest, RankRecord, TimedSteps  # noqa: E402
from memprobe.core.text.units import parse_size  # noqa: E402
from memprobe.core.workload.registry import load_registry  # noqa: E402
from memprobe.probe.distributed.group import ServedGroup  # noqa: E402
from memprobe.probe.distributed.launch import launch  # noqa: E402


def _records(ranks: list[RankRecord | None]) -> list[dict[str, Any] | None]:
    return [r.to_dict() if r else None for r in ranks]


def _kinds(record: RankRecord | None) -> str:
    """What each part of `record` read back as: its records' type names."""
    if record is None:
        return "no record"
    parts = {
        "setup": type(record.setup).__name__,
        "timeline": type(record.timeline).__name__,
        "batches": sorted({type(b).__name__ for b in record.batches}),
        "measure": type(record.measure).__name__,
        "rebuilds": sorted({type(b).__name__ for b in record.rebuilds}),
    }
    return ", ".join(f"{k} {v}" for k, v in parts.items())


def run(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    """Run both steps; (what was read, what went wrong)."""
    workload = load_registry()[args.model]
    budget = parse_size(args.cpu_budget) if args.cpu_budget else None
    base = LaunchRequest(
        workload, args.precision, "ddp", 1, args.batches, device=args.device, cpu_budget_bytes=budget, timeout_s=600
    )
    wrong: list[str] = []
    out: dict[str, Any] = {"model": args.model, "precision": args.precision, "device": args.device}

    started = time.perf_counter()
    result = launch(replace(base, measure=TimedSteps(args.warmup, args.steps)))
    rank0 = result.ranks[0] if result.ranks else None
    print(
        f"launch (ddp, 1 rank) of {args.batches}: {[(a.batch, a.outcome) for a in result.attempts]} in "
        f"{time.perf_counter() - started:.1f} s"
    )
    print(f"  rank 0 read back: {_kinds(rank0)}")
    if result.setup is not None:
        print(
            f"  setup: capacity {result.setup.capacity_bytes}, wrap {result.setup.wrap}, "
            f"build {result.setup.build_seconds} s, NCCL {result.setup.environment.get('nccl_version')}"
        )
    if result.measure is not None:
        print(
            f"  timed run at {result.measure.batch}: {result.measure.outcome}, {result.measure.samples_per_s} samples/s"
        )
    print(f"  timeline: {result.timeline}")
    if [a.outcome for a in result.attempts] != [FIT] * len(args.batches):
        wrong.append(f"the launch's batches did not all fit: {[(a.batch, a.outcome) for a in result.attempts]}")
    if result.measure is None or result.measure.outcome != FIT:
        wrong.append(f"the launch's timed run: {result.measure}")
    out["launch"] = {
        "attempts": [asdict(a) for a in result.attempts],
        "measure": result.measure.to_dict() if result.measure else None,
        "timeline": result.timeline,
        "ranks": _records(result.ranks),
    }

    group = ServedGroup(replace(base, strategy=args.strategy, batches=[args.batches[0]]))
    answers = []
    try:
        for batch in (args.batches[0], args.oom_batch, args.batches[0]):
            started = time.perf_counter()
            attempt = group.trial(batch, 30.0)
            answers.append(attempt)
            print(
                f"served ({args.strategy}, 1 rank) command {len(answers) - 1} at {batch}: {attempt.outcome} "
                f"in {time.perf_counter() - started:.1f} s, fresh {attempt.fresh}"
                + (f": {attempt.message[:120]}" if attempt.message else "")
            )
    finally:
        group.close()
    rank0 = group.records[0] if group.records else None
    print(f"  rank 0 read back: {_kinds(rank0)}")
    if rank0 is not None:
        print(f"  trials: {[(b.command, b.batch, b.outcome, b.at is not None) for b in rank0.batches]}")
        print(f"  rebuilds: {rank0.rebuilds}; answered {rank0.answered}, committed {rank0.committed}")
    if [a.outcome for a in answers] != [FIT, OOM, FIT]:
        wrong.append(f"the served group's answers: {[a.outcome for a in answers]}, not fit, oom, fit")
    if rank0 is None or len(rank0.rebuilds) != 1:
        wrong.append("the served group's rank recorded no rebuild after the out-of-memory trial")
    out["served"] = {
        "attempts": [asdict(a) for a in answers],
        "timeline": group.timeline,
        "ranks": _records(group.records),
    }
    return out, wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--strategy", default="ddp", choices=["ddp", "fsdp", "none"])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--oom-batch", type=int, default=20000)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--cpu-budget", default="", help="the CPU device's memory budget (e.g. 8MiB)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    out, wrong = run(args)
    out["wrong"] = wrong
    if args.out:
        args.out.write_text(json.dumps(out, indent=1, default=str))
    for line in wrong:
        print(f"WRONG: {line}")
    print("all steps answered as expected" if not wrong else f"{len(wrong)} step(s) did not")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
