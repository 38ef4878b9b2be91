"""The held-out zoo: scan models memprobe was never tuned on, predict them on a CPU, and tabulate the error.

    python benchmarks/zoo.py list                                   # the models and what is run of each
    python benchmarks/zoo.py scan --out reports/zoo/h200 --deadline 540   # on a GPU machine: one scan per GPU
    python benchmarks/zoo.py predict --results reports/zoo/h200 --card H200 --host laptop
    python benchmarks/zoo.py table                                  # reports/zoo/accuracy.md from the above

`scan` runs a queue of `memprobe scan` jobs (each model's training precisions, its inference scan, and its
`--gpus 2` scan), one job per free GPU (two for --gpus 2), each in its own folder under OUT/results, with a
time limit per job and an overall deadline after which no job starts; a job cut by its limit or the deadline is
sent SIGTERM, so the scan keeps what it finished (marked partial). Jobs whose folder already holds a complete
result are skipped, so a zoo spans several device calls. `predict` predicts each scanned job with the installed
memprobe on this machine's torch (GPUs hidden) and writes OUT/predictions/<host>.json with the library versions;
`table` writes the accuracy table from every scan and prediction file found. The models are listed in
benchmarks/zoo_models/zoo.yaml; `--zoo-file FILE` (before the command) takes another list of the same shape, e.g.
benchmarks/zoo_models/multi_heldout.yaml, the held-out set of the multi-GPU check (benchmarks/gpu/multi_heldout.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
ZOO_FILE = ROOT / "benchmarks" / "zoo_models" / "zoo.yaml"
SAFETY_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# The scan as the zoo runs it: B and its proof with the timed run (the definition of B), no curve or breakdown
# (they do not change B and cost a minute a precision).
SCAN_FLAGS = ["--no-curve", "--no-breakdown"]
JOB_LIMIT_S = {"train": 420, "infer": 300, "gpus2": 540}


@dataclass(frozen=True)
class Entry:
    """One zoo model: what --model takes, and what is scanned of it."""

    id: str
    model: str
    group: str
    task: str | None = None
    seq_len: int | None = None
    input_size: str | None = None
    train: tuple[str, ...] = ()
    infer: tuple[str, ...] = ()
    gpus2: tuple[str, ...] = ()

    def model_args(self) -> list[str]:
        args = ["--model", self.model]
        if self.task:
            args += ["--task", self.task]
        if self.seq_len:
            args += ["--seq-len", str(self.seq_len)]
        if self.input_size:
            args += ["--input-size", self.input_size]
        return args


@dataclass(frozen=True)
class Job:
    """One `memprobe scan` of the zoo: an entry, a kind (train, infer, gpus2) and its precision(s)."""

    entry: Entry
    kind: str
    precision: str
    gpus: int = 1

    @property
    def name(self) -> str:
        return f"{self.entry.id}__{self.kind}__{self.precision.replace(',', '-')}"

    def command(self, out: Path) -> list[str]:
        cmd = [sys.executable, "-m", "memprobe", "scan", *self.entry.model_args(), "--out", str(out), *SCAN_FLAGS]
        if self.kind == "gpus2":
            return [*cmd, "-p", "bf16", "--gpus", "2", "--strategy", self.precision]
        return [*cmd, "-p", self.precision, "--mode", "infer" if self.kind == "infer" else "train"]


def load_zoo(path: Path | None = None) -> list[Entry]:
    """The zoo's entries, from `path` (default: the file --zoo-file named, else zoo.yaml)."""
    data = yaml.safe_load((path or ZOO_FILE).read_text())
    entries = []
    for key, spec in data.items():
        entries.append(
            Entry(
                id=key,
                model=spec["model"],
                group=spec["group"],
                task=spec.get("task"),
                seq_len=spec.get("seq_len"),
                input_size=spec.get("input_size"),
                train=tuple(spec.get("train", ())),
                infer=tuple(spec.get("infer", ())),
                gpus2=tuple(spec.get("gpus2", ())),
            )
        )
    return entries


def jobs_of(entries: list[Entry], kinds: list[str]) -> list[Job]:
    """The jobs in the order they run: every bf16 training scan first (the zoo's core), then fp32, inference,
    and the two-GPU scans, so a deadline cuts the least important."""
    out: list[Job] = []
    if "train" in kinds:
        out += [Job(e, "train", "bf16") for e in entries if "bf16" in e.train]
    if "fp32" in kinds:
        out += [Job(e, "train", p) for e in entries for p in e.train if p != "bf16"]
    if "infer" in kinds:
        out += [Job(e, "infer", p) for e in entries for p in e.infer]
    if "gpus2" in kinds:
        out += [Job(e, "gpus2", s, gpus=2) for e in entries for s in e.gpus2]
    return out


def _complete(folder: Path) -> bool:
    for path in folder.glob("*.json"):
        try:
            if json.loads(path.read_text()).get("status") == "complete":
                return True
        except (OSError, ValueError):
            continue
    return False


def _visible_gpus() -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return [g.strip() for g in visible.split(",") if g.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


@dataclass
class _Running:
    job: Job
    proc: subprocess.Popen
    gpus: list[str]
    started: float
    limit: float
    log: Any
    termed: bool = False


@dataclass
class ScanLog:
    lines: list[str] = field(default_factory=list)

    def say(self, text: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {text}"
        print(line, flush=True)
        self.lines.append(line)


def scan(
    out: Path,
    jobs: list[Job],
    deadline_s: float,
    gpus: list[str],
    join: tuple[str, Path] | None = None,
    job_limit_s: float | None = None,
) -> int:
    """Run `jobs` over `gpus`, one scan per GPU, until done or `deadline_s` seconds have passed. `join` = (gpu,
    flag file): that GPU joins the pool once the file exists (a GPU busy with something else first); `job_limit_s`:
    each job's time limit (default JOB_LIMIT_S by kind). Returns how many jobs did not finish complete (skipped ones
    count as done)."""
    started = time.monotonic()
    log = ScanLog()
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, **SAFETY_ENV, "PYTHONUNBUFFERED": "1", "PYTHONPATH": f"{ROOT}:{path}" if path else str(ROOT)}
    (out / "logs").mkdir(parents=True, exist_ok=True)
    todo = []
    for job in jobs:
        if _complete(out / "results" / job.name):
            log.say(f"{job.name}: complete result already there, skipped")
        else:
            todo.append(job)
    free = list(gpus)
    running: list[_Running] = []
    unfinished = 0
    log.say(f"{len(todo)} jobs on GPUs {','.join(gpus)}, deadline {deadline_s:.0f} s")
    while todo or running:
        now = time.monotonic() - started
        if join is not None and join[1].exists():
            free.append(join[0])
            log.say(f"GPU {join[0]} joins")
            join = None
        # Start what fits: the first job whose GPU count is free (two-GPU jobs wait for a pair).
        for job in list(todo):
            if now > deadline_s - 60:  # no job starts that could not finish its first precision
                break
            if len(free) < job.gpus:
                continue
            taken, free = free[: job.gpus], free[job.gpus :]
            folder = out / "results" / job.name
            folder.mkdir(parents=True, exist_ok=True)
            handle = open(out / "logs" / f"{job.name}.log", "w")
            cmd = job.command(folder)
            handle.write(f"$ CUDA_VISIBLE_DEVICES={','.join(taken)} {' '.join(cmd)}\n")
            handle.flush()
            proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                env={**env, "CUDA_VISIBLE_DEVICES": ",".join(taken)},
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            limit = min(job_limit_s or JOB_LIMIT_S[job.kind], deadline_s - now)
            running.append(_Running(job, proc, taken, time.monotonic(), limit, handle))
            todo.remove(job)
            log.say(f"{job.name}: started on GPU {','.join(taken)} (limit {limit:.0f} s)")
        if todo and time.monotonic() - started > deadline_s - 60 and not running:
            break
        time.sleep(1.0)
        for r in list(running):
            age = time.monotonic() - r.started
            if r.proc.poll() is None:
                if age > r.limit and not r.termed:
                    os.killpg(r.proc.pid, signal.SIGTERM)  # the scan writes what it finished, marked partial
                    r.termed = True
                    log.say(f"{r.job.name}: time limit {r.limit:.0f} s, SIGTERM")
                elif age > r.limit + 45:
                    os.killpg(r.proc.pid, signal.SIGKILL)
                continue
            r.log.close()
            running.remove(r)
            free += r.gpus
            ok = _complete(out / "results" / r.job.name)
            unfinished += not ok
            log.say(f"{r.job.name}: exit {r.proc.returncode} after {age:.0f} s, {'complete' if ok else 'NOT complete'}")
    for job in todo:
        log.say(f"{job.name}: not started (deadline)")
    unfinished += len(todo)
    with open(out / "logs" / f"zoo_scan_{time.strftime('%Y%m%d-%H%M%S')}.log", "w") as handle:
        handle.write("\n".join(log.lines) + "\n")
    return unfinished


# ---------------------------------------------------------------------------------------------------------------
# predict


def versions() -> dict[str, str]:
    """The library versions a prediction ran with (they change a model's code path)."""
    import platform

    import torch

    from memprobe.workloads.torchvision_guard import ensure_loadable

    ensure_loadable()
    import timm
    import transformers

    return {
        "torch": torch.__version__,
        "cuda_build": str(torch.version.cuda),
        "transformers": transformers.__version__,
        "timm": timm.__version__,
        "python": platform.python_version(),
    }


def memprobe_code() -> str:
    """The memprobe commit predictions run with (`+changes` when the work tree differs from it), or "unknown"."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "memprobe"], cwd=ROOT, capture_output=True, text=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+changes" if dirty.stdout.strip() else "")


def _entry_by_id(entries: list[Entry]) -> dict[str, Entry]:
    return {e.id: e for e in entries}


def scanned_jobs(results: Path) -> list[tuple[str, Path]]:
    """(job name, result file) for every job folder under `results` that holds a result file."""
    found = []
    for folder in sorted(p for p in (results / "results").iterdir() if p.is_dir()):
        files = sorted(folder.glob("*.json"))
        if files:
            found.append((folder.name, files[-1]))
    return found


def predict_one(job_name: str, result_path: Path, card: str) -> dict[str, Any]:
    """Predict one scanned job as `memprobe predict --gpu CARD --compare FILE` does, in this process.

    Returns the predicted max batch for the card (what a user is told) and at the scan's own allocator capacity,
    the seconds it took, and the error if it could not be predicted."""
    from memprobe.core.cards.cardsize import read_sizes
    from memprobe.core.records.results import read_result
    from memprobe.predict.parallel import cores
    from memprobe.predict.summary import memory_sizes, predict
    from memprobe.workloads.custom import CustomOptions, resolve

    entry_id, kind, precision = job_name.split("__")
    entry = _entry_by_id(load_zoo())[entry_id]
    scanned = read_result(result_path)
    size = tuple(int(v) for v in entry.input_size.split(",")) if entry.input_size else None
    workload = resolve(entry.model, CustomOptions(size, None, entry.task, entry.seq_len))
    from memprobe.predict.summary import MemorySize, run_capacity

    asked = read_sizes(None, card)
    sizes = memory_sizes(asked.labels, asked.cards, group=kind == "gpus2")
    scanned_precision = scanned.precisions.get("bf16" if kind == "gpus2" else precision)
    at_scan = run_capacity(scanned_precision) if scanned_precision is not None else None
    if at_scan:  # the scan's own capacity (less the run overhead), as `--compare` replays it, without its rows
        sizes.append(MemorySize("scan", scanned_precision.capacity_bytes, at_scan, "the scan's capacity"))
    out: dict[str, Any] = {"job": job_name, "card": card, "result_file": str(result_path.resolve().relative_to(ROOT))}
    world = None
    precisions = [precision]
    if kind == "gpus2":
        from memprobe.predict.data_parallel import World

        world = World(2, precision)  # a two-GPU job's "precision" is its strategy; it trains bf16
        precisions = ["bf16"]
    started = time.perf_counter()
    try:
        got = predict(
            workload,
            precisions,
            sizes,
            world=world,
            mode="infer" if kind == "infer" else "train",
            workers=cores(),
        )
    except Exception as exc:  # noqa: BLE001 - a failure is a field of the result, the zoo goes on
        out.update(error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:400])
        out["seconds"] = round(time.perf_counter() - started, 1)
        return out
    out["seconds"] = round(time.perf_counter() - started, 1)
    p = got.precisions[precisions[0]]
    out["predicted"] = p.max_batch[sizes[0].label]
    safe = getattr(p, "safe_max_batch", None)
    if safe:
        out["predicted_safe"] = safe.get(sizes[0].label)
    if at_scan:
        out["predicted_at_capacity"] = p.max_batch["scan"]
        out["capacity_bytes"] = at_scan
    out["measured"] = scanned.precisions[precisions[0]].max_batch if precisions[0] in scanned.precisions else None
    out["notes"] = [n for n in got.notes if not n.startswith("time:")]
    return out


def predict_all(results: Path, card: str, host: str, only: list[str], out_path: Path, jobs: int = 1) -> None:
    """Predict every scanned job under `results`, each in a fresh process (a prediction's imports and caches do
    not carry over to the next), `jobs` at a time, each on its own share of this machine's cores (its prediction
    traces on as many), and write them with this host's versions to `out_path` (merged with what is there for
    other cards). The numbers do not depend on `jobs`; the seconds do."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    data: dict[str, Any] = json.loads(out_path.read_text()) if out_path.exists() else {}
    data["host"] = host
    data["versions"] = versions()
    data["jobs_at_once"] = jobs
    code = memprobe_code()
    table = data.setdefault("predictions", {})
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", **SAFETY_ENV}
    cores = sorted(os.sched_getaffinity(0))
    share = max(1, len(cores) // max(1, jobs))
    free_sets = [set(cores[i * share : (i + 1) * share]) for i in range(max(1, min(jobs, len(cores))))]
    lock = threading.Lock()
    todo = [
        (name, path) for name, path in scanned_jobs(results) if not only or any(name.startswith(o + "__") for o in only)
    ]

    def one(item: tuple[str, Path]) -> None:
        job_name, path = item
        with lock:
            mine = free_sets.pop()
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "--zoo-file", str(ZOO_FILE), "predict-one", job_name, str(path), card],
                capture_output=True,
                text=True,
                env=env,
                cwd=ROOT,
                preexec_fn=lambda: os.sched_setaffinity(0, mine),
            )
        finally:
            with lock:
                free_sets.append(mine)
        try:
            row = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            row = {"job": job_name, "card": card, "error": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"}
        row["code"] = code  # which memprobe predicted it: a file gathers rows from several runs
        with lock:
            table[f"{card}/{job_name}"] = row
            print(
                f"{card} {job_name}: measured {row.get('measured')} predicted {row.get('predicted')} "
                f"(safe {row.get('predicted_safe')}, at capacity {row.get('predicted_at_capacity')}) "
                f"{row.get('seconds', '?')} s {row.get('error', '')}",
                flush=True,
            )
            out_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = out_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
            tmp.replace(out_path)

    with ThreadPoolExecutor(max_workers=len(free_sets)) as pool:
        list(pool.map(one, todo))


def main(argv: list[str] | None = None) -> int:
    global ZOO_FILE  # --zoo-file: every later load_zoo() reads that list
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--zoo-file", type=Path, default=ZOO_FILE, help="the list of models (default zoo.yaml)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    s = sub.add_parser("scan")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--deadline", type=float, default=540.0, help="seconds after which no job starts or runs on")
    s.add_argument("--kinds", default="train,fp32,infer,gpus2")
    s.add_argument("--only", default="", help="comma-separated zoo ids")
    s.add_argument("--gpus", default="", help="GPU indices to use (default: all visible)")
    s.add_argument("--join", default="", help="GPU:FILE: that GPU joins once FILE exists")
    s.add_argument("--job-limit", type=float, default=None, help="seconds each job may take (default by kind)")
    p = sub.add_parser("predict")
    p.add_argument("--results", type=Path, required=True)
    p.add_argument("--card", required=True)
    p.add_argument("--host", required=True, help="a name for this machine in the table (laptop, gpu-machine)")
    p.add_argument("--only", default="")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--jobs", type=int, default=1, help="predictions at once, each on its share of the cores")
    a = sub.add_parser("args", help="the model options of one zoo id, shell-quoted (for the GPU scripts)")
    a.add_argument("id")
    one = sub.add_parser("predict-one")
    one.add_argument("job")
    one.add_argument("result", type=Path)
    one.add_argument("card")
    t = sub.add_parser("table")
    t.add_argument("--zoo", type=Path, default=ROOT / "reports" / "zoo")
    args = parser.parse_args(argv)
    ZOO_FILE = args.zoo_file.resolve()
    if args.cmd == "list":
        entries = load_zoo()
        for e in entries:
            kinds = [f"train {'/'.join(e.train)}"] + ([f"infer {'/'.join(e.infer)}"] if e.infer else [])
            kinds += [f"2 GPUs {'/'.join(e.gpus2)}"] if e.gpus2 else []
            print(f"{e.id:32} {e.group:40} {', '.join(kinds)}")
        print(f"{len(entries)} models, {len(jobs_of(entries, ['train', 'fp32', 'infer', 'gpus2']))} scans")
        return 0
    if args.cmd == "scan":
        entries = load_zoo()
        if args.only:
            wanted = set(args.only.split(","))
            entries = [e for e in entries if e.id in wanted]
        gpus = [g for g in args.gpus.split(",") if g] or _visible_gpus()
        if not gpus:
            print("no GPU visible", file=sys.stderr)
            return 2
        join = None
        if args.join:
            gpu, flag = args.join.split(":", 1)
            join = (gpu, Path(flag))
        jobs = jobs_of(entries, args.kinds.split(","))
        return min(1, scan(args.out, jobs, args.deadline, gpus, join, args.job_limit))
    if args.cmd == "args":
        import shlex

        print(" ".join(shlex.quote(a) for a in _entry_by_id(load_zoo())[args.id].model_args()))
        return 0
    if args.cmd == "predict":
        out = args.out or args.results.parent / "predictions" / f"{args.host}.json"
        predict_all(args.results, args.card, args.host, [o for o in args.only.split(",") if o], out, args.jobs)
        return 0
    if args.cmd == "predict-one":
        print(json.dumps(predict_one(args.job, args.result, args.card)))
        return 0
    if args.cmd == "table":
        from zoo_table import write_table  # benchmarks/zoo_table.py

        write_table(args.zoo, load_zoo())
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
