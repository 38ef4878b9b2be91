"""Benchmark: the real CUDA caching allocator's event trace of one trial, against memprobe's model of it.

`memprobe predict` replays a fake-tensor trace through memprobe/allocator.py. When a prediction is
off, either the trace (which sizes are allocated and freed, in which order) or the allocator model
(how blocks are split, cached and merged) is wrong. This script tells which:

- `capture` (GPU): builds the workload as `memprobe scan` does, records the allocator's history
  (torch.cuda.memory._record_memory_history) through one trial (trial.run_trial: warm-up + K steps)
  at a batch size, and writes every alloc / free / segment event with the Python frame that made it.
- `compare` (no GPU): replays the captured events through memprobe's allocator model at the
  capacity the real trial had, and says whether the model reproduces the real peaks and segments;
  then traces the same trial on fake tensors (as `memprobe predict` does) and lines its allocations
  up with the real ones, printing where the two sequences first part.

GPU: python benchmarks/allocator_trace.py capture --case transformer-big:fp16:679 --loss-scale 65536 --out DIR
CPU: python benchmarks/allocator_trace.py compare DIR/transformer-big_fp16_679.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# Allocated and freed between the trial's reset and its first step (run_trial's `before` hook), so
# the trial's start can be found in the real trace. An odd size no workload asks for, in the small
# pool: its 2 MiB segment is all it leaves behind, and the step's small tensors reuse that.
MARKER_BYTES = 1_000_003


def _frame_label(frames: list[dict]) -> str:
    """The innermost frame outside torch itself (the model or memprobe code that allocated), else the innermost."""
    for frame in frames:
        name = frame.get("filename", "")
        if "/torch/" not in name or "/workloads/" in name:
            return f"{Path(name).name}:{frame.get('line')}:{frame.get('name')}"
    if frames:
        return f"{Path(frames[0].get('filename', '')).name}:{frames[0].get('line')}:{frames[0].get('name')}"
    return ""


def capture(model: str, precision: str, batch: int, steps: int, loss_scale: float | None, out: Path) -> Path:
    """Run one trial on the GPU with the allocator's history recorded; write it as gzipped JSON."""
    import torch

    from memprobe.core.workload.registry import load_registry
    from memprobe.probe.child.worker import apply_precision_flags
    from memprobe.training.step import Memory, run_trial
    from memprobe.workloads.families import family_builder

    workload = load_registry()[model]
    dev = torch.device("cuda", torch.cuda.current_device())
    apply_precision_flags(precision, False)
    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python")
    torch.cuda.init()
    torch.empty(1, device=dev)  # as the trial worker does before building
    torch.manual_seed(0)
    task = family_builder(workload.family)(workload.params, workload.optimizer, dev)
    torch.cuda.synchronize(dev)
    free, total = torch.cuda.mem_get_info(dev)
    capacity = free + torch.cuda.memory_reserved(dev)

    def marker() -> None:
        torch.empty(MARKER_BYTES, dtype=torch.uint8, device=dev)

    attempt = run_trial(task, precision, "train", batch, steps, Memory(dev), before=marker, loss_scale=loss_scale)
    stats = torch.cuda.memory_stats(dev)
    started = time.perf_counter()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    labels: dict[str, int] = {}
    events = []
    for entry in snapshot["device_traces"][dev.index]:
        label = _frame_label(entry.get("frames") or [])
        # "oom" entries carry the free device bytes instead of an address
        events.append(
            [
                entry["action"],
                entry.get("addr", entry.get("device_free", 0)),
                entry.get("size", 0),
                labels.setdefault(label, len(labels)),
            ]
        )
    doc = {
        "model": model,
        "precision": precision,
        "batch": batch,
        "steps": steps,
        "loss_scale": loss_scale,
        "gpu": torch.cuda.get_device_name(dev),
        "torch": torch.__version__,
        "capacity_bytes": capacity,
        "total_bytes": total,
        "attempt": attempt,
        "stats": {
            k: stats.get(k)
            for k in (
                "num_alloc_retries",
                "num_ooms",
                "allocated_bytes.all.peak",
                "reserved_bytes.all.peak",
                "segment.all.peak",
            )
        },
        "marker_bytes": MARKER_BYTES,
        "labels": list(labels),
        "events": events,
        "snapshot_seconds": round(time.perf_counter() - started, 2),
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{model}_{precision}_{batch}.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
    print(
        f"{model} {precision} batch {batch}: {attempt['outcome']}, peak allocated {attempt['peak_allocated'] / 2**30:.2f} "
        f"reserved {attempt['peak_reserved'] / 2**30:.2f} GiB, capacity {capacity / 2**30:.2f} GiB, "
        f"{len(events)} events, retries {stats.get('num_alloc_retries')} -> {path}"
    )
    return path


def real_events(doc: dict) -> tuple[list[tuple], list[str], list[tuple]]:
    """The captured trace as allocator.replay events (ALLOC/FREE/MARK), their frame labels, and the
    real segment events (action, size). The marker allocation becomes the trial MARK; a request that
    ran out of memory ("oom") becomes a final ALLOC."""
    from memprobe.predict.allocator import ALLOC, FREE, MARK
    from memprobe.predict.trace import TRIAL_MARK

    out: list[tuple] = []
    labels: list[str] = []
    segments: list[tuple] = []
    live: dict[int, int] = {}
    next_id = 0
    marker = None
    # free_completed is when a block is back in the cache (free_requested may come earlier when other
    # streams still use it); a trace without it has only the requests.
    freed = "free_completed" if any(e[0] == "free_completed" for e in doc["events"]) else "free_requested"
    for action, addr, size, label in doc["events"]:
        if action == "alloc":
            if size == doc["marker_bytes"] and marker is None:
                marker = addr
                out.append((MARK, TRIAL_MARK))
                labels.append("trial start")
                continue
            next_id += 1
            live[addr] = next_id
            out.append((ALLOC, next_id, size, ""))
            labels.append(doc["labels"][label])
        elif action == freed:
            if addr == marker:
                marker = -1
                continue
            if addr in live:
                out.append((FREE, live.pop(addr)))
                labels.append(doc["labels"][label])
        elif action in ("segment_alloc", "segment_free", "segment_map", "segment_unmap", "oom"):
            segments.append((action, size, len(out)))
            if action == "oom":
                # the request that failed (its size; the address field holds the device's free bytes):
                # replayed last, so the model must fail there too
                next_id += 1
                out.append((ALLOC, next_id, size, ""))
                labels.append("the request that ran out of memory")
    return out, labels, segments


def _gib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f}"


def compare(path: Path, fake: bool) -> None:
    """Replay a captured trace through the allocator model; then line it up with the fake-tensor trace."""
    from memprobe.predict.allocator import ALLOC, FREE, CachingAllocator, replay
    from memprobe.predict.trace import TRIAL_MARK

    with gzip.open(path, "rt") as fh:
        doc = json.load(fh)
    events, labels, segments = real_events(doc)
    attempt = doc["attempt"]
    print(
        f"{doc['model']} {doc['precision']} batch {doc['batch']} on {doc['gpu']} (torch {doc['torch']}): "
        f"{attempt['outcome']}, peak allocated {_gib(attempt['peak_allocated'])} GiB, reserved "
        f"{_gib(attempt['peak_reserved'])} GiB, capacity {_gib(doc['capacity_bytes'])} GiB; allocator stats {doc['stats']}"
    )
    real_allocs = sum(1 for s in segments if s[0] == "segment_alloc")
    print(
        f"real trace: {sum(1 for e in events if e[0] == ALLOC)} allocations, {real_allocs} segment allocations, "
        f"{sum(1 for s in segments if s[0] == 'segment_free')} segment frees"
    )
    for cap in (None, doc["capacity_bytes"]):
        result = replay(events, capacity=cap, measure_from=TRIAL_MARK)
        where = ""
        if result.oom is not None:
            where = f", OOM at event {result.oom_at} ({labels[result.oom_at]}): {result.oom}"
        print(
            f"model replay of the real trace, capacity {_gib(cap) if cap else 'unlimited'}: peak allocated "
            f"{_gib(result.peak_allocated)} reserved {_gib(result.peak_reserved)} GiB, "
            f"{result.stats.segments} segments at the end, retries {result.stats.retries}{where}"
        )
    # Segment by segment: the sizes the model would cudaMalloc, in order, against the real ones.
    alloc = CachingAllocator(None)
    handles: dict = {}
    model_segments: list[tuple[int, int]] = []
    for index, event in enumerate(events):
        if event[0] == ALLOC:
            before = alloc.stats.reserved
            handles[event[1]] = alloc.malloc(event[2])  # no capacity: never runs out
            if alloc.stats.reserved > before:
                model_segments.append((alloc.stats.reserved - before, index))
        elif event[0] == FREE:
            alloc.free(handles.pop(event[1]))
        elif event[1] == TRIAL_MARK:
            alloc.empty_cache()
    real_segs = [(s[1], s[2]) for s in segments if s[0] == "segment_alloc"]
    print(
        f"segments malloc'd: real {len(real_segs)} ({_gib(sum(s for s, _ in real_segs))} GiB), "
        f"model {len(model_segments)} ({_gib(sum(s for s, _ in model_segments))} GiB)"
    )
    big = [(s, i) for s, i in real_segs if s >= 1 << 30]
    print(
        "real segments >= 1 GiB (size GiB @ event, label):",
        ", ".join(f"{_gib(s)}@{i} {labels[i] if i < len(labels) else ''}" for s, i in big[:40]),
    )
    mbig = [(s, i) for s, i in model_segments if s >= 1 << 30]
    print("model segments >= 1 GiB:", ", ".join(f"{_gib(s)}@{i} {labels[i]}" for s, i in mbig[:40]))
    if fake:
        compare_fake(doc, events, labels)


def compare_fake(doc: dict, events: list[tuple], labels: list[str]) -> None:
    """Trace the same trial on fake tensors and print where the allocation sequences part."""
    from memprobe.core.workload.registry import load_registry
    from memprobe.predict.allocator import ALLOC, FREE, replay
    from memprobe.predict.batch_model import PrecisionTraces
    from memprobe.predict.trace import TRIAL_MARK, TraceSession

    workload = load_registry()[doc["model"]]
    with TraceSession(workload, steps=doc["steps"]) as session:
        fake = PrecisionTraces(session, doc["precision"], check=False).events_at(doc["batch"])
    result = replay(fake, capacity=doc["capacity_bytes"], measure_from=TRIAL_MARK)
    unlimited = replay(fake, capacity=None, measure_from=TRIAL_MARK)
    print(
        f"fake trace: {sum(1 for e in fake if e[0] == ALLOC)} allocations; replay unlimited: peak allocated "
        f"{_gib(unlimited.peak_allocated)} reserved {_gib(unlimited.peak_reserved)} GiB; at the real capacity: "
        f"{'fits' if result.fits else 'OOM at event %d: %s' % (result.oom_at, result.oom)}"
    )

    def trial_part(evs: list[tuple]) -> list[tuple]:
        start = next(i for i, e in enumerate(evs) if e[0] == "mark" and e[1] == TRIAL_MARK)
        return evs[start + 1 :]

    real_t, fake_t = trial_part(events), trial_part(fake)
    real_labels = labels[len(events) - len(real_t) :]

    def signature(evs: list[tuple]) -> list[tuple]:
        # ids differ between traces; compare allocation sizes (512-rounded) and which earlier alloc a free frees
        order: dict = {}
        sig = []
        for e in evs:
            if e[0] == ALLOC:
                order[e[1]] = len(order)
                sig.append(("A", -(-e[2] // 512) * 512))
            elif e[0] == FREE:
                sig.append(("F", len(order) - order[e[1]] if e[1] in order else None))
        return sig

    rs, fs = signature(real_t), signature(fake_t)
    shown = 0
    i = j = 0
    while i < len(rs) and j < len(fs) and shown < 25:
        if rs[i] == fs[j]:
            i += 1
            j += 1
            continue
        print(
            f"  part at real #{i} {rs[i]} ({real_labels[i]})  vs fake #{j} {fs[j]}; "
            f"real next {rs[i + 1 : i + 4]} fake next {fs[j + 1 : j + 4]}"
        )
        shown += 1
        # resynchronise on the next allocation of the same size in both
        i += 1
        j += 1
    print(f"  compared {i} real and {j} fake trial events of {len(rs)} / {len(fs)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    cap = sub.add_parser("capture", help="GPU: record the allocator's history through one trial")
    cap.add_argument("--case", action="append", required=True, help="MODEL:PRECISION:BATCH (repeatable)")
    cap.add_argument("--steps", type=int, default=3)
    cap.add_argument(
        "--loss-scale", type=float, default=None, help="fp16: start from this loss scale, as a scan's later trials do"
    )
    cap.add_argument("--out", type=Path, required=True)
    cmp_ = sub.add_parser("compare", help="no GPU: replay captured traces through the allocator model")
    cmp_.add_argument("paths", nargs="+", type=Path)
    cmp_.add_argument("--no-fake", action="store_true", help="skip tracing the same trial on fake tensors")
    args = parser.parse_args(argv)
    if args.cmd == "capture":
        if len(args.case) > 1:
            # One fresh process per case, as a scan's fresh checks: nothing of one case stays for the next.
            rest = ["--steps", str(args.steps), "--out", str(args.out)]
            if args.loss_scale is not None:
                rest += ["--loss-scale", str(args.loss_scale)]
            return max(
                subprocess.run([sys.executable, __file__, "capture", "--case", case, *rest]).returncode
                for case in args.case
            )
        model, precision, batch = args.case[0].split(":")
        capture(model, precision, int(batch), args.steps, args.loss_scale, args.out)
    else:
        for path in args.paths:
            compare(path, not args.no_fake)
    return 0


if __name__ == "__main__":
    sys.exit(main())
