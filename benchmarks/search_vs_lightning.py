"""Benchmark: memprobe's max-batch search against Lightning's batch-size finder, on one GPU.

First, untimed, a warm-up process imports what both tools import and trains the model a few steps
(twice), so that neither tool pays alone for a machine's first process (--no-warm-up skips it;
--bytecode-cache DIR also lets every process keep compiled bytecode, for machines with no .pyc
files). Then for each precision, in one process tree and one after another (never two on the GPU
at once), --repeat times, alternating which tool goes first:
1. `memprobe scan --no-throughput` as a user runs it (a subprocess; wall time from start to answer,
   imports, model build and the fresh-process proof included);
2. Lightning's `Tuner.scale_batch_size(mode="binsearch")` (defaults: init 2, 3 steps per trial) on
   the same model, optimizer, precision and synthetic inputs (a subprocess of this script, timed
   the same way; the tuner call alone is reported too);
3. the truth for each answer A: A fits and A+1 does not, each checked in a fresh memprobe trial
   process (warm-up step + 2 more, as memprobe defines a fit).
In memprobe's `tried` list a * marks a trial in a fresh process (search trials near the edge run
fresh and double as the proof; a starred batch listed twice was re-checked).
Prints a table and writes JSON. Run: python benchmarks/search_vs_lightning.py --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

LIGHTNING_PRECISION = {"fp32": "32-true", "fp16": "16-mixed", "bf16": "bf16-mixed"}


def lightning_child(model: str, precision: str) -> None:
    """Run Lightning's binsearch finder on the workload and print one JSON line with the answer."""
    started = time.perf_counter()
    import lightning as L
    import torch
    from lightning.pytorch.tuner import Tuner

    from memprobe.core.workload.registry import load_registry
    from memprobe.probe.child.worker import apply_precision_flags
    from memprobe.workloads.base import make_optimizer
    from memprobe.workloads.families import family_builder

    apply_precision_flags(precision, cudnn_benchmark=False)
    workload = load_registry()[model]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # cpu: only to test this script
    task = family_builder(workload.family)(workload.params, workload.optimizer, device)

    class Indices(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 10**7

        def __getitem__(self, i: int) -> int:
            return i

    class Wrapped(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = task.model
            self.batch_size = 2
            self.seen: list[int] = []

        def train_dataloader(self):
            return torch.utils.data.DataLoader(Indices(), batch_size=self.batch_size)

        def training_step(self, idx, _):
            n = int(idx.shape[0])
            if not self.seen or self.seen[-1] != n:
                self.seen.append(n)
            return task.loss(task.make_batch(n))  # same synthetic on-device inputs as memprobe

        def configure_optimizers(self):
            return make_optimizer(self.model.parameters(), workload.optimizer, device)

    wrapped = Wrapped()
    trainer = L.Trainer(
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=1,
        precision=LIGHTNING_PRECISION[precision],
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tempfile.mkdtemp(),
    )
    tuner_started = time.perf_counter()
    answer = Tuner(trainer).scale_batch_size(wrapped, mode="binsearch")
    tuner_seconds = time.perf_counter() - tuner_started
    print(
        json.dumps(
            {
                "answer": answer,
                "trials": len(wrapped.seen),
                "tried": wrapped.seen,
                "tuner_seconds": round(tuner_seconds, 2),
                "child_seconds": round(time.perf_counter() - started, 2),
            }
        ),
        flush=True,
    )


# Environment of both timed tools (see --bytecode-cache); None: this process's own.
CHILD_ENV: dict[str, str] | None = None


def warm_up_child(model: str, precisions: list[str]) -> None:
    """Import what both tools import and train the model for a few steps at batch 2 in each precision.

    Run untimed before either tool, so that neither pays alone for what the first process on a
    machine pays once (libraries read from disk, the first CUDA kernels of each kind); whichever
    tool ran first used to carry it (batch 1 of memprobe's first scan took ~2 s there, ~0.8 s later).
    """
    import torch

    from memprobe.core.workload.registry import load_registry
    from memprobe.probe.child.worker import apply_precision_flags
    from memprobe.training.step import Memory, run_trial
    from memprobe.workloads.families import family_builder

    try:
        import lightning.pytorch.tuner  # noqa: F401
    except ImportError:
        pass
    if not torch.cuda.is_available():
        return
    workload = load_registry()[model]
    device = torch.device("cuda")
    task = family_builder(workload.family)(workload.params, workload.optimizer, device)
    for precision in precisions:
        apply_precision_flags(precision, cudnn_benchmark=False)
        run_trial(task, precision, "train", 2, 3, Memory(device))


def warm_up(model: str, precisions: list[str], cache: str | None) -> dict:
    """Run warm_up_child twice in its own process; with `cache`, both tools' processes (and the
    warm-up) read and write compiled bytecode under it. Returns what was done, for the output file.

    A pip-installed package normally ships its .pyc files; on a machine that has none and forbids
    writing them (PYTHONDONTWRITEBYTECODE=1, as on the H100 machine measured) every process compiles torch,
    transformers and lightning from source, which adds the same ~7 s to both tools' start.
    """
    global CHILD_ENV
    setup: dict = {"was": {k: os.environ.get(k) for k in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}}
    env = None
    if cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = setup["bytecode_cache"] = str(Path(cache).resolve())
    started = time.perf_counter()
    for _ in range(2):  # the first run compiles (and with a cache writes); the second finds it all warm
        subprocess.run(
            [sys.executable, __file__, "--warm-up-child", "--model", model, "--precision", ",".join(precisions)],
            env=env,
            check=True,
        )
    setup["warm_up_seconds"] = round(time.perf_counter() - started, 2)
    CHILD_ENV = env
    return setup


def run_memprobe(model: str, precision: str, out_dir: str) -> dict:
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "memprobe",
            "scan",
            "--model",
            model,
            "--precision",
            precision,
            "--no-throughput",
            "--out",
            out_dir,
        ],
        capture_output=True,
        text=True,
        env=CHILD_ENV,
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1:] or proc.returncode, "wall_seconds": round(wall, 2)}
    from memprobe.core.records.results import read_result

    newest = max(Path(out_dir).glob("*.json"), key=os.path.getmtime)
    p = read_result(newest).precisions[precision]
    reused = set(p.proof.reused_from_search if p.proof else [])  # fresh search trials that served as the proof
    rechecks = [c for c in (p.proof.checks if p.proof else []) if c.batch not in reused]
    return {
        "answer": p.max_batch,
        "trials": len(p.attempts) + len(rechecks),
        "search_trials": len(p.attempts),
        "fresh_search_trials": sum(bool(a.fresh) for a in p.attempts),
        "proof_rechecks": len(rechecks),
        "tried": [f"{a.batch}*" if a.fresh else a.batch for a in p.attempts] + [f"{c.batch}*" for c in rechecks],
        "agreed": p.proof.agreed if p.proof else None,
        "wall_seconds": round(wall, 2),
        "result_file": newest.name,
    }


def run_lightning(model: str, precision: str) -> dict:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--lightning-child", "--model", model, "--precision", precision],
        capture_output=True,
        text=True,
        env=CHILD_ENV,
    )
    wall = time.perf_counter() - started
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": " | ".join(tail), "wall_seconds": round(wall, 2)}
    # Lightning >= 2.5 lowers its search result by a safety margin (5% by default) and logs both.
    margin = re.search(r"reducing batch size from (\d+) to (\d+)", proc.stdout + proc.stderr)
    before = int(margin.group(1)) if margin else None
    return {**json.loads(lines[-1]), "before_margin": before, "wall_seconds": round(wall, 2)}


def truth(model: str, precision: str, answer: int) -> dict:
    """Whether `answer` is the true edge: it fits and answer+1 does not, each in a fresh process
    (forked from memprobe's fork server where available: a process that has run nothing else)."""
    from memprobe.core.workload.registry import load_registry
    from memprobe.probe.runner import WorkerFactory, WorkerSpec
    from memprobe.probe.scan_trials import fresh_worker

    workload = load_registry()[model]
    factory = WorkerFactory(workload, spares=0)
    outcomes = {}
    try:
        for batch in (answer, answer + 1):
            with fresh_worker(factory, WorkerSpec(workload, precision)) as worker:
                outcomes[batch] = worker.trial(batch, 3).outcome
    finally:
        factory.close()
    return {
        "fits": outcomes[answer],
        "next": outcomes[answer + 1],
        "is_edge": outcomes[answer] == "fit" and outcomes[answer + 1] != "fit",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bert-large")
    parser.add_argument("--precision", default="fp32,fp16")
    parser.add_argument("--out", default="search_vs_lightning.json")
    parser.add_argument(
        "--keep", help="keep memprobe's result files (each trial's batch, peak and seconds) in this folder"
    )
    parser.add_argument(
        "--bytecode-cache",
        metavar="DIR",
        help="both tools compile Python bytecode once into DIR (for machines that ship no .pyc "
        "files and set PYTHONDONTWRITEBYTECODE)",
    )
    parser.add_argument(
        "--no-warm-up",
        action="store_true",
        help="skip the untimed warm-up process (imports and a few training steps at batch 2)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="time each tool this many times per precision, alternating which goes first",
    )
    parser.add_argument("--lightning-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--warm-up-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.lightning_child:
        lightning_child(args.model, args.precision)
        return 0
    if args.warm_up_child:
        warm_up_child(args.model, args.precision.split(","))
        return 0
    try:
        import lightning  # noqa: F401

        has_lightning = True
    except ImportError:
        has_lightning = False
    precisions = args.precision.split(",")
    if args.no_warm_up:
        setup = {"warm_up": None}
        if args.bytecode_cache:
            parser.error("--bytecode-cache needs the warm-up to fill the cache")
    else:
        setup = warm_up(args.model, precisions, args.bytecode_cache)
    rows = []
    truths: dict[tuple[str, int], dict] = {}

    def truth_of(precision: str, answer: int) -> dict:
        if (precision, answer) not in truths:  # a repeat that gives the same answer is not re-checked
            truths[(precision, answer)] = truth(args.model, precision, answer)
        return truths[(precision, answer)]

    with tempfile.TemporaryDirectory() as tmp:
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
            tmp = args.keep
        for precision in precisions:
            for run in range(args.repeat):
                order = ["memprobe", "lightning"] if run % 2 == 0 else ["lightning", "memprobe"]
                if not has_lightning:
                    order = ["memprobe"]
                row = {"model": args.model, "precision": precision, "run": run + 1, "first": order[0]}
                for tool in order:
                    row[tool] = (
                        run_memprobe(args.model, precision, tmp)
                        if tool == "memprobe"
                        else run_lightning(args.model, precision)
                    )
                for tool in ("memprobe", "lightning"):
                    if tool in row and "answer" in row[tool]:
                        row[tool]["truth"] = truth_of(precision, int(row[tool]["answer"]))
                if row.get("lightning", {}).get("before_margin"):
                    row["lightning"]["truth_before_margin"] = truth_of(precision, row["lightning"]["before_margin"])
                if "wall_seconds" in row.get("lightning", {}) and "answer" in row["memprobe"]:
                    row["ratio"] = round(row["memprobe"]["wall_seconds"] / row["lightning"]["wall_seconds"], 3)
                rows.append(row)
                print(json.dumps(row), flush=True)
    Path(args.out).write_text(
        json.dumps({"rows": rows, "lightning_available": has_lightning, "setup": setup}, indent=1) + "\n"
    )
    from tabulate import tabulate

    table = []
    for row in rows:
        for tool in ("memprobe", "lightning"):
            r = row.get(tool)
            if r is None:
                continue
            t = r.get("truth", {})
            answer = r.get("answer", r.get("error"))
            if r.get("before_margin"):
                answer = f"{answer} ({r['before_margin']} before its 5% margin)"
            table.append(
                [
                    row["model"],
                    row["precision"],
                    f"{row['run']} ({row['first']} first)",
                    tool,
                    answer,
                    r.get("trials"),
                    r.get("wall_seconds"),
                    r.get("tuner_seconds", "-"),
                    f"{t.get('is_edge')} ({t.get('fits')}, +1 {t.get('next')})" if t else "-",
                    row.get("ratio", "-") if tool == "memprobe" else "",
                ]
            )
    print(
        tabulate(
            table,
            headers=[
                "model",
                "precision",
                "run",
                "tool",
                "answer",
                "trials",
                "wall s",
                "tuner-only s",
                "true edge? (A, A+1 fresh)",
                "memprobe / Lightning",
            ],
            tablefmt="github",
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
