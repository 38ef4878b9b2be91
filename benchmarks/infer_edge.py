"""Benchmark: why an inference edge differs between the search's process and fresh processes.

Each batch size runs in its own new process (this script re-invoked with --one), built as a trial process
builds it (same precision flags, build, gc.freeze), then: the scan's trial (2 forward passes under
inference_mode), then a short timed run (1 warm-up + 2 timed forwards) as the fresh-process proof does. On an
out-of-memory error it prints what the caching allocator held at that moment: allocated and reserved bytes,
the reserved-but-free bytes, how many segments, the largest free block, and the request that failed; so a
failure with far more free bytes than requested (but no free block that large) reads as fragmentation, and one
without reads as a peak that really does not fit. Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the
environment to compare (segments grow in place, so free memory is not split among segments).

GPU:  python benchmarks/infer_edge.py --case bert-large-squad:fp16 --batches 9405,9407,9412 --out DIR
CPU smoke test of the plumbing: ... --case toy:fp32 --batches 2,4 --device cpu --out DIR
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def allocator_state(device) -> dict:
    """What the caching allocator holds now: bytes allocated/reserved, segments, largest free block."""
    import torch

    if device.type != "cuda":
        return {}
    stats = torch.cuda.memory_stats(device)
    free_blocks, segments = [], 0
    for segment in torch.cuda.memory_snapshot():
        if segment.get("device") not in (None, device.index):
            continue
        segments += 1
        free_blocks += [b["size"] for b in segment["blocks"] if b["state"] == "inactive"]
    free_device, total = torch.cuda.mem_get_info(device)
    return {
        "allocated": stats.get("allocated_bytes.all.current"),
        "reserved": stats.get("reserved_bytes.all.current"),
        "reserved_free": stats.get("reserved_bytes.all.current", 0) - stats.get("allocated_bytes.all.current", 0),
        "segments": segments,
        "largest_free_block": max(free_blocks, default=0),
        "free_blocks_over_1GiB": sorted((b for b in free_blocks if b > 2**30), reverse=True)[:8],
        "device_free": free_device,
        "device_total": total,
        "peak_allocated": stats.get("allocated_bytes.all.peak"),
        "peak_reserved": stats.get("reserved_bytes.all.peak"),
    }


def one(model: str, precision: str, batch: int, device_name: str) -> dict:
    """Build `model` and run the trial and a short timed run at `batch` in this process; what happened."""
    import torch

    from memprobe.core.workload.registry import load_registry
    from memprobe.probe.child.measure import time_steps
    from memprobe.probe.child.worker import apply_precision_flags
    from memprobe.training.step import Memory, run_step, run_trial
    from memprobe.workloads.base import Amp
    from memprobe.workloads.families import family_builder

    workload = load_registry()[model]
    apply_precision_flags(precision, False)
    device = torch.device(device_name)
    if device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
        torch.empty(1, device=device)
    torch.manual_seed(0)
    task = family_builder(workload.family)(workload.params, workload.optimizer, device)
    gc.collect()
    gc.freeze()
    memory = Memory(device)
    out: dict = {"batch": batch, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    started = time.perf_counter()
    out["trial"] = run_trial(task, precision, "infer", batch, 2, memory)
    out["trial"]["message"] = out["trial"]["message"][:600]
    out["trial_seconds"] = round(time.perf_counter() - started, 2)
    if out["trial"]["outcome"] != "fit":
        return out
    memory.reset()
    failed = None
    try:
        amp = Amp(precision, device)
        inputs = task.make_batch(batch)
        run_step(task, amp, inputs, "infer")
        memory.synchronize()
        out["timed_step_seconds"] = time_steps(lambda: run_step(task, amp, inputs, "infer"), 2, device)
    except Exception as exc:  # noqa: BLE001 - the point is to see the state at the failure
        failed = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        out["at_failure"] = allocator_state(device)
        del exc
    out["timed_run"] = failed or "fit"
    inputs = amp = None  # noqa: F841
    out["after"] = allocator_state(device)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", required=True, help="MODEL:PRECISION")
    parser.add_argument("--batches", required=True, help="batch sizes, each in a new process")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", help="folder for infer_edge_<model>_<precision>.jsonl")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: run one batch in this process
    args = parser.parse_args(argv)
    model, precision = args.case.split(":")
    if args.one is not None:
        print(json.dumps(one(model, precision, args.one, args.device)))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = "_expandable" if "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") else ""
    path = out / f"infer_edge_{model}_{precision}{tag}.jsonl"
    for batch in (int(b) for b in args.batches.split(",")):
        t0 = time.perf_counter()
        run = subprocess.run(
            [
                sys.executable,
                __file__,
                "--case",
                args.case,
                "--batches",
                str(batch),
                "--device",
                args.device,
                "--one",
                str(batch),
            ],
            capture_output=True,
            text=True,
        )
        lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
        record = json.loads(lines[-1]) if lines else {"batch": batch, "error": run.stderr[-600:]}
        record["process_seconds"] = round(time.perf_counter() - t0, 1)
        with path.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        trial = record.get("trial", {})
        gib = lambda v: f"{(v or 0) / 2**30:.2f}"  # noqa: E731
        state = record.get("at_failure") or {}
        print(
            f"batch {batch}{tag}: trial {trial.get('outcome')} (peak reserved {gib(trial.get('peak_reserved'))} GiB),"
            f" timed run {record.get('timed_run', '-')}, {record['process_seconds']} s"
            + (
                f"; at failure: allocated {gib(state.get('allocated'))}, reserved {gib(state.get('reserved'))},"
                f" free in cache {gib(state.get('reserved_free'))} in {state.get('segments')} segments, largest free"
                f" {gib(state.get('largest_free_block'))}, device free {gib(state.get('device_free'))} GiB"
                if state
                else ""
            )
            + (
                f"; trial message: {trial.get('message', '')[:200]}"
                if trial.get("outcome") not in (None, "fit")
                else ""
            )
            + (f"; error: {record['error']}" if "error" in record else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
