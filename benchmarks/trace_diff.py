"""Where predict's allocation trace and a real GPU's part: record a trial on the GPU, diff it with predict's trace.

    # on a GPU machine: one trial at a small batch with PyTorch's memory history recording, and every
    # scaled_dot_product_attention call with the backend CUDA really chose (torch._fused_sdp_choice)
    python benchmarks/trace_diff.py record --model hf-config:t5.json --task seq2seq --seq-len 512 -p bf16 \\
        --batch 2 --out reports/zoo/traces
    # on any machine: predict's trace of the same trial, aligned with the recorded one
    python benchmarks/trace_diff.py diff reports/zoo/traces/<name>.json.gz

`record` builds the workload as a scan's trial process does (memprobe.workloads, training/step.run_trial) and
keeps, per allocator event of the trial: action (alloc / free_requested / segment_alloc ...), size, stream and the
innermost Python frames outside torch; and per SDPA call: shapes, dtypes, strides, mask, dropout, causal and the
backend CUDA picked, beside the one predict's emulation picks for the same arguments (`diff` prints both).

`diff` traces the same trial on fake tensors (predict/trace.py) and walks the two allocation sequences side by
side: the first place where the sizes part (with the ops and frames around it on each side), then per op the
bytes each side allocated in the trial, largest gap first. A zero-size or cached-block reuse on the GPU is not an
allocation of the caching allocator's client; both sides count tensor allocations (the GPU's `alloc` actions,
predict's ALLOC events), not segments.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SDPA_BACKENDS = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}  # sdp::SDPBackend


def _workload(args: argparse.Namespace):
    from memprobe.workloads.custom import CustomOptions, resolve

    size = tuple(int(v) for v in args.input_size.split(",")) if args.input_size else None
    return resolve(args.model, CustomOptions(size, None, args.task, args.seq_len))


def _frames(frames: list[dict[str, Any]], keep: int = 4) -> list[str]:
    """The innermost `keep` frames outside torch's own Python (the model's and the library's lines)."""
    out = []
    for f in frames:
        name = f.get("filename", "")
        if "/torch/" in name and "/torch/nn/" not in name:
            continue
        out.append(f"{name.split('site-packages/')[-1]}:{f.get('line')}:{f.get('name')}")
        if len(out) >= keep:
            break
    return out


def _tensor_meta(t: Any) -> Any:
    import torch

    if not isinstance(t, torch.Tensor):
        return t if isinstance(t, (int, float, bool, type(None))) else repr(t)
    return {
        "shape": list(t.shape),
        "stride": list(t.stride()),
        "dtype": str(t.dtype).removeprefix("torch."),
        "requires_grad": t.requires_grad,
    }


def record(args: argparse.Namespace) -> int:
    """Run one trial on the GPU with memory history on; write the trace and the SDPA choices (gzip JSON)."""
    import torch

    from memprobe.training.step import Memory, run_trial
    from memprobe.workloads.families import family_builder

    workload = _workload(args)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    torch.manual_seed(0)
    task = family_builder(workload.family)(workload.params, workload.optimizer, device)
    calls: list[dict[str, Any]] = []
    original = torch.nn.functional.scaled_dot_product_attention

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        # The op casts its inputs under autocast before choosing; _fused_sdp_choice has no autocast kernel.
        q, k, v, m = query, key, value, attn_mask
        if torch.is_autocast_enabled(device.type):
            low = torch.get_autocast_dtype(device.type)
            q, k, v = (t.to(low) if t.is_floating_point() else t for t in (q, k, v))
            m = m.to(low) if m is not None and m.is_floating_point() else m
        try:
            choice = torch._fused_sdp_choice(q, k, v, m, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
        except Exception as exc:  # noqa: BLE001 - recorded, the step goes on
            choice = f"{type(exc).__name__}: {exc}"[:200]
        calls.append(
            {
                "query": _tensor_meta(query),
                "key": _tensor_meta(key),
                "value": _tensor_meta(value),
                "attn_mask": _tensor_meta(attn_mask),
                "dropout_p": dropout_p,
                "is_causal": is_causal,
                "enable_gqa": enable_gqa,
                "grad_enabled": torch.is_grad_enabled(),
                "backend": SDPA_BACKENDS.get(choice, str(choice)) if isinstance(choice, int) else choice,
            }
        )
        return original(
            query,
            key,
            value,
            attn_mask=attn_mask,
            dropout_p=dropout_p,
            is_causal=is_causal,
            scale=scale,
            enable_gqa=enable_gqa,
        )

    torch.nn.functional.scaled_dot_product_attention = sdpa
    memory = Memory(device)
    snapshot: dict[str, Any] = {"device_traces": [[]]}
    if cuda:  # the CPU runs the same code without a history (to check this script without a GPU)
        torch.cuda.synchronize()
        torch.cuda.memory._record_memory_history(max_entries=2_000_000, context="alloc", stacks="python")
    try:
        result = run_trial(task, args.precision, args.mode, args.batch, args.steps, memory)
        if cuda:
            torch.cuda.synchronize()
            snapshot = torch.cuda.memory._snapshot()
    finally:
        if cuda:
            torch.cuda.memory._record_memory_history(enabled=None)
        torch.nn.functional.scaled_dot_product_attention = original
    events = []
    for e in snapshot["device_traces"][torch.cuda.current_device() if cuda else 0]:
        events.append(
            {
                "action": e["action"],
                "size": e["size"],
                "stream": e.get("stream", 0),
                "addr": e["addr"],
                "frames": _frames(e.get("frames") or []),
            }
        )
    out = {
        "model": args.model,
        "task": args.task,
        "seq_len": args.seq_len,
        "input_size": args.input_size,
        "precision": args.precision,
        "mode": args.mode,
        "batch": args.batch,
        "steps": args.steps,
        "trial": {k: result[k] for k in ("outcome", "peak_allocated", "peak_reserved", "message", "steps")},
        "versions": _versions(),
        "gpu": torch.cuda.get_device_name() if cuda else "cpu",
        "events": events,
        "sdpa": calls,
    }
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    name = (
        args.name or f"{workload.name.replace('/', '_').replace(':', '_')}_{args.precision}_{args.mode}_b{args.batch}"
    )
    path = folder / f"{name}.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump(out, handle)
    backends = Counter(c["backend"] for c in calls)
    print(f"{path}: {len(events)} allocator events, peak reserved {result['peak_reserved']}, sdpa {dict(backends)}")
    return 0


def _versions() -> dict[str, str]:
    import torch

    from memprobe.workloads.torchvision_guard import ensure_loadable

    ensure_loadable()
    import timm
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "timm": timm.__version__}


# ---------------------------------------------------------------------------------------------------------------
# diff


def _predicted(recorded: dict[str, Any]) -> tuple[list[tuple[int, str]], Any]:
    """predict's trial at the recorded batch: (size, op) per allocation of the trial, and the session's choices."""
    from memprobe.predict.allocator import ALLOC, MARK
    from memprobe.predict.trace import TRIAL_MARK, TraceSession

    ns = argparse.Namespace(
        model=recorded["model"], task=recorded["task"], seq_len=recorded["seq_len"], input_size=recorded["input_size"]
    )
    with TraceSession(_workload(ns), steps=recorded["steps"], mode=recorded["mode"]) as session:
        trace = session.trace(recorded["precision"], recorded["batch"])
        choices = dict(session.behaviour.sdpa_choices)
    start = next(i for i, e in enumerate(trace.events) if e[0] == MARK and e[1] == TRIAL_MARK)
    return [(e[2], str(e[3])) for e in trace.events[start:] if e[0] == ALLOC], choices


def _real(recorded: dict[str, Any]) -> list[tuple[int, str]]:
    return [(e["size"], " < ".join(e["frames"][:2])) for e in recorded["events"] if e["action"] == "alloc"]


def diff(args: argparse.Namespace) -> int:
    """Print where the recorded and the predicted allocation sequences first part, and the bytes per op."""
    with gzip.open(args.recorded, "rt") as handle:
        recorded = json.load(handle)
    real = _real(recorded)
    predicted, choices = _predicted(recorded)
    print(f"{recorded['model']} {recorded['precision']} {recorded['mode']} batch {recorded['batch']}")
    print(f"  GPU ({recorded['gpu']}, {recorded['versions']}): {len(real)} allocations, {sum(s for s, _ in real):,} B")
    print(f"  predict: {len(predicted)} allocations, {sum(s for s, _ in predicted):,} B")
    real_sdpa = Counter(c["backend"] for c in recorded["sdpa"])
    print(f"  sdpa on the GPU: {dict(real_sdpa)}; emulated: {choices}")
    for c in recorded["sdpa"][:1]:
        print(f"  first sdpa call on the GPU: {json.dumps(c)}")
    # Align on rounded sizes (the allocator rounds to 512 B): the first index where the two sequences differ.
    rounded = [(-(-s // 512) * 512) for s, _ in real]
    guessed = [(-(-s // 512) * 512) for s, _ in predicted]
    first = next((i for i, (a, b) in enumerate(zip(rounded, guessed)) if a != b), min(len(rounded), len(guessed)))
    print(f"  the sequences agree for {first} allocations; then:")
    for i in range(max(0, first - 3), min(first + args.context, max(len(real), len(predicted)))):
        left = f"{real[i][0]:>12,} {real[i][1][:70]}" if i < len(real) else ""
        right = f"{predicted[i][0]:>12,} {predicted[i][1][:40]}" if i < len(predicted) else ""
        mark = ">>" if i == first else "  "
        print(f"  {mark}{i:6} GPU {left:<86} | predict {right}")
    real_sizes = Counter(-(-s // 512) * 512 for s, _ in real)
    pred_sizes = Counter(-(-s // 512) * 512 for s, _ in predicted)
    gaps = []
    for size in set(real_sizes) | set(pred_sizes):
        gap = (real_sizes[size] - pred_sizes[size]) * size
        if gap:
            gaps.append((abs(gap), size, real_sizes[size], pred_sizes[size]))
    print("  allocation sizes whose counts differ (largest bytes first): size, GPU count, predict count")
    for _, size, r, p in sorted(gaps, reverse=True)[: args.top]:
        where = next((f for s, f in real if -(-s // 512) * 512 == size), "")
        print(f"    {size:>14,} B  GPU {r:5}  predict {p:5}  {where[:90]}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    for p in (r,):
        p.add_argument("--model", required=True)
        p.add_argument("--task")
        p.add_argument("--seq-len", type=int)
        p.add_argument("--input-size")
    r.add_argument("-p", "--precision", default="bf16")
    r.add_argument("--mode", default="train")
    r.add_argument("--batch", type=int, default=2)
    r.add_argument("--steps", type=int, default=3)
    r.add_argument("--out", default=str(ROOT / "reports" / "zoo" / "traces"))
    r.add_argument("--name")
    r.add_argument("--device", default="cuda", help="cpu: the same run without a memory history (a check)")
    d = sub.add_parser("diff")
    d.add_argument("recorded", type=Path)
    d.add_argument("--context", type=int, default=12)
    d.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    if args.cmd == "record":
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        return record(args)
    return diff(args)


if __name__ == "__main__":
    sys.exit(main())
