"""Why the edge moves: one fresh run with the memory history on, and the report of many such runs.

    python benchmarks/edge_repeat.py edge RESULT_DIR         # "B B+1" of a committed scan (its newest file)
    python benchmarks/edge_repeat.py run --model timm:mobilenetv2_100 --batch 3705 --out DIR --tag b3705-1
    python benchmarks/edge_repeat.py summarize DIR [--md FILE]

`run` is one fresh run as a scan's proof makes it (probe/scan_trials.FreshRuns: memprobe's own trial process code,
probe/child/worker.Session: build, the 3-step trial kept, then 1 warm-up and the timed steps going on from it) in a
process of its own, with PyTorch's memory history on (torch.cuda.memory._record_memory_history) and an out-of-memory
observer that summarises the allocator's state at each out-of-memory error, the caught ones included (cuDNN falls
back to another plan when its workspace cannot be allocated). It writes DIR/run_<tag>.json: the phases' seconds
(interpreter start, imports, CUDA context, with --handles the first cuBLAS matmul and cuDNN convolution, the build,
with --flops the FLOPs count, every step), memory after every step, the outcome, and the summaries (segments, the
largest blocks, the free-block sizes, the largest live allocations with where they were made, the last events), never
the whole trace, so a file stays under a few hundred KB. cuDNN's plan choice is logged by the environment the
shell script sets (cudnn_frontend's log, filtered to its plan lines into DIR/cudnn_<tag>.log).

`summarize` turns a folder of runs into markdown: per model and batch the runs that fitted and failed, where a failed
one failed and what it asked for, the memory step by step of a fit beside a failure at the same batch, what the
allocator held at the failure, the cuDNN plans one run chose and the other did not, and where a first trial's seconds
went. No torch needed there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MiB = 1 << 20
KEPT_OOM_SNAPSHOTS = 3  # the first two out-of-memory errors of a run and its last: enough to compare, files stay small
TOP = 25
SNAPSHOT_AT_MOST = 50


def _where(frames: list[dict[str, Any]], depth: int = 3) -> list[str]:
    """The first `depth` Python frames of an allocation, as "file.py:line name" (the path's last three parts)."""
    out = []
    for f in frames[:depth]:
        name = "/".join(str(f.get("filename", "?")).split("/")[-3:])
        out.append(f"{name}:{f.get('line', '?')} {f.get('name', '')}")
    return out


def summarize_snapshot(snap: dict[str, Any]) -> dict[str, Any]:
    """The allocator's state in a torch.cuda.memory._snapshot(), kept small: totals, the free blocks' sizes, the
    largest segments, the largest live allocations with where they were made, and the last events of the trace."""
    segments, free, live = [], [], []
    for s in snap.get("segments", []):
        blocks = s.get("blocks", [])
        gaps = [b["size"] for b in blocks if b.get("state") == "inactive"]
        free += gaps
        segments.append(
            {
                "size": s.get("total_size"),
                "allocated": s.get("allocated_size"),
                "stream": s.get("stream"),
                "pool": s.get("segment_type"),
                "blocks": len(blocks),
                "largest_free": max(gaps, default=0),
            }
        )
        for b in blocks:
            if b.get("state") == "active_allocated":
                live.append(
                    {"size": b["size"], "requested": b.get("requested_size"), "where": _where(b.get("frames") or [])}
                )
    traces = snap.get("device_traces") or [[]]
    last = [
        {"action": e.get("action"), "size": e.get("size"), "where": _where(e.get("frames") or [], 2)}
        for e in (traces[0] if traces else [])[-120:]
    ]
    edges = [MiB, 10 * MiB, 100 * MiB, 1024 * MiB]
    histogram = {label: 0 for label in ("<1MiB", "1-10MiB", "10-100MiB", "100MiB-1GiB", ">=1GiB")}
    for size in free:
        histogram[list(histogram)[sum(size >= e for e in edges)]] += 1
    return {
        "segments": len(segments),
        "reserved": sum(s["size"] or 0 for s in segments),
        "allocated": sum(s["allocated"] or 0 for s in segments),
        "free_in_segments": sum(free),
        "largest_free": max(free, default=0),
        "free_blocks": histogram,
        "largest_segments": sorted(segments, key=lambda s: -(s["size"] or 0))[:TOP],
        "largest_allocations": sorted(live, key=lambda a: -a["size"])[:TOP],
        "last_events": last,
    }


class Recorder:
    """Each step's seconds and memory, and each out-of-memory error's figures and allocator state, as they come."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.phase = "setup"
        self.steps: list[dict[str, Any]] = []
        self.ooms: list[dict[str, Any]] = []

    def wrap(self, run_step: Any) -> Any:
        def recorded(task: Any, amp: Any, inputs: Any, mode: str) -> None:
            cuda = self.torch.cuda
            started = time.perf_counter()
            ooms = len(self.ooms)
            try:
                run_step(task, amp, inputs, mode)
                cuda.synchronize()
            finally:
                self.steps.append(
                    {
                        "phase": self.phase,
                        "seconds": round(time.perf_counter() - started, 4),
                        "allocated": cuda.memory_allocated(),
                        "reserved": cuda.memory_reserved(),
                        "max_allocated": cuda.max_memory_allocated(),
                        "max_reserved": cuda.max_memory_reserved(),
                        "caught_ooms": len(self.ooms) - ooms,
                    }
                )

        return recorded

    def observer(self, device: int, alloc: int, device_alloc: int, device_free: int) -> None:
        entry = {
            "phase": self.phase,
            "step": len(self.steps) + 1,
            "requested": alloc,
            "device_allocated": device_alloc,
            "device_free": device_free,
            "reserved": self.torch.cuda.memory_reserved(device),
        }
        if len(self.ooms) < SNAPSHOT_AT_MOST:  # a snapshot copies the whole history: not for every one of hundreds
            entry["state"] = summarize_snapshot(self.torch.cuda.memory._snapshot())
        self.ooms.append(entry)
        if len(self.ooms) > KEPT_OOM_SNAPSHOTS:
            self.ooms[-2].pop("state", None)  # keep the first two states and the newest


def run(args: argparse.Namespace) -> int:
    """One fresh run; writes DIR/run_<tag>.json (see the module's docstring)."""
    phases: dict[str, float] = {}
    t0 = float(os.environ.get("EDGE_T0") or 0)
    if t0:
        phases["interpreter_start_s"] = round(time.time() - t0, 3)
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        phases[name] = round(now - clock, 3)
        clock = now

    import torch

    lap("import_torch_s")
    import memprobe.probe.child.worker as worker
    import memprobe.training.step as step
    from memprobe.core.process.protocol import MeasureRequest, SetupRequest, TrialRequest
    from memprobe.workloads.custom import CustomOptions, resolve
    from memprobe.workloads.families import family_builder

    workload = resolve(args.model, CustomOptions(None, None, args.task, args.seq_len))
    family_builder(workload.family)  # imports timm or transformers, as the fork server does before any trial
    lap("import_model_code_s")
    torch.cuda.init()
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    lap("cuda_context_s")
    if args.handles:  # the libraries' handles on tiny inputs (a scan's run creates them at its first step instead)
        a = torch.ones(64, 64, device="cuda", dtype=torch.bfloat16)
        (a @ a).sum().item()
        lap("cublas_first_matmul_s")
        x = torch.ones(1, 3, 16, 16, device="cuda")
        torch.nn.functional.conv2d(x, torch.ones(4, 3, 3, 3, device="cuda")).sum().item()
        lap("cudnn_first_conv_s")
    recorder = Recorder(torch)
    if args.history:
        torch.cuda.memory._record_memory_history(max_entries=200_000, stacks="python")
    torch._C._cuda_attach_out_of_memory_observer(recorder.observer)
    step.run_step = worker.run_step = recorder.wrap(step.run_step)
    session = worker.Session()
    ready = session.setup(SetupRequest(workload, args.precision, "train", "cuda", None))
    lap("setup_s")
    if not hasattr(ready, "capacity_bytes"):  # a Failure: the build did not come through
        print(f"{args.tag}: setup failed: {ready}", file=sys.stderr)
        return 1
    out: dict[str, Any] = {
        "model": args.model,
        "precision": args.precision,
        "batch": args.batch,
        "tag": args.tag,
        "cudnn": torch.backends.cudnn.version(),
        "torch": torch.__version__,
        "setup": {k: getattr(ready, k, None) for k in ("capacity_bytes", "build_seconds", "cuda_init_seconds")},
    }
    if args.flops:
        recorder.phase = "flops"
        from memprobe.core.process.protocol import FlopsRequest

        session.flops(FlopsRequest(1))
        lap("flops_count_s")
    recorder.phase = "trial"
    attempt = session.trial(TrialRequest(args.batch, 3, None, keep=True))
    lap("trial_s")
    out["trial"] = {"outcome": attempt.outcome, "message": (attempt.message or "")[:600]}
    if attempt.fits:
        recorder.phase = "timed"
        timed = session.measure(MeasureRequest(args.batch, 1, 10, 10.0, None, cont=True))
        lap("timed_s")
        out["timed"] = {
            "outcome": timed.outcome,
            "failed_at_step": timed.failed_at_step,
            "error": (timed.error or "")[:600],
        }
        out["outcome"] = timed.outcome
    else:
        out["outcome"] = attempt.outcome
    out["end_state"] = summarize_snapshot(torch.cuda.memory._snapshot()) if args.history else None
    out.update(phases=phases, steps=recorder.steps, ooms=recorder.ooms, script_end_unix=time.time())
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"run_{args.tag}.json").write_text(json.dumps(out, indent=1) + "\n")
    print(f"{args.tag}: {out['outcome']} ({len(recorder.ooms)} out-of-memory errors seen, caught ones included)")
    return 0


def edge(result_dir: str) -> int:
    """Print "B B+1" of the newest result file in `result_dir` (a committed scan)."""
    files = sorted(Path(result_dir).glob("*.json"))
    data = json.loads(files[-1].read_text())
    b = next(iter(data["precisions"].values()))["max_batch"]
    print(b, b + 1)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("edge")
    e.add_argument("result_dir")
    r = sub.add_parser("run")
    r.add_argument("--model", required=True)
    r.add_argument("--precision", default="bf16")
    r.add_argument("--task", default=None)
    r.add_argument("--seq-len", type=int, default=None)
    r.add_argument("--batch", type=int, required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--tag", required=True)
    r.add_argument("--handles", action="store_true", help="time the first cuBLAS and cuDNN calls apart")
    r.add_argument("--flops", action="store_true", help="count FLOPs before the trial, as a scan's first process")
    r.add_argument("--no-history", dest="history", action="store_false", help="memory history off")
    s = sub.add_parser("summarize")
    s.add_argument("folder")
    s.add_argument("--md", default=None)
    args = parser.parse_args(argv)
    if args.cmd == "edge":
        return edge(args.result_dir)
    if args.cmd == "run":
        return run(args)
    from edge_report import report  # benchmarks/edge_report.py: no torch

    text = report(Path(args.folder))
    if args.md:
        Path(args.md).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
