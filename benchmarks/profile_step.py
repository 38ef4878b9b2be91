"""Benchmark: where a training step's GPU time goes, to explain a workload's MFU (profiled, not guessed).

Builds the workload exactly as `memprobe scan` does (registry -> family builder -> TrainTask, the
same precision flags, autocast and GradScaler), warms up at one batch, then records a few steps
with torch.profiler and sorts every GPU kernel into a kind by its name: matrix work (GEMM and
convolution kernels, the only ones that reach tensor-core peak), normalization, element-wise and
reductions, optimizer, copies, other. It prints the share of GPU time per kind, the GPU-busy share
of the wall time, and the top kernels, and writes them as JSON.

GPU: python benchmarks/profile_step.py --case resnet50:fp16:1280 --case pix2pixhd:fp16:7 --out DIR
CPU smoke test of the script itself: ... --case toy-resnet:fp32:4 --device cpu --out DIR
(on the CPU there are no kernels to sort; the smoke test checks the plumbing only).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# First match wins, so the order matters: cuDNN also runs normalization and attention kernels
# ("cudnn::batchnorm_bwtr_nhwc...", "cudnn_generated_..._sdpa_..._flash_bprop..."), and many
# convolution kernels are "implicit_gemm".
KINDS = [
    (
        "normalization",
        re.compile(
            r"batchnorm|batch_norm|layer_norm|instance_norm|group_norm|welford|bn_|"
            r"GammaBeta",
            re.I,
        ),
    ),
    # cuDNN's SDPA backward helpers ("cudnn::fusion::compute_dot_do_o...") are attention, not convolution
    ("attention", re.compile(r"sdpa|flash|fmha|attention|cudnn::fusion", re.I)),
    # cuDNN's own layout transposes around a convolution on NCHW tensors are copies, not matrix work
    ("copy / layout / pooling", re.compile(r"nchwToNhwc|nhwcToNchw", re.I)),
    # depthwise convolutions (channel multiplier 1) are memory-bound: no tensor cores
    ("depthwise convolution", re.compile(r"c1_k1|depthwise|dwconv", re.I)),
    ("convolution", re.compile(r"conv|fprop|dgrad|wgrad|implicit_gemm|winograd|cudnn", re.I)),
    ("gemm", re.compile(r"gemm|cutlass|nvjet|sm\d+_xmma|cublas", re.I)),
    ("optimizer", re.compile(r"multi_tensor|foreach|adam|sgd|unscale|inf_check|non_finite", re.I)),
    ("copy / layout / pooling", re.compile(r"copy|memcpy|memset|transpose|nchw|nhwc|cat_|pad|index|pool", re.I)),
    (
        "element-wise / reduction",
        re.compile(
            r"elementwise|vectorized|unrolled|reduce|pointwise|softmax|"
            r"loss|dropout|gelu|relu|fill|where|_kernel",
            re.I,
        ),
    ),
]
MATRIX_KINDS = ("convolution", "gemm", "attention")  # the tensor-core kinds


def kind_of(kernel: str) -> str:
    """The kind of a GPU kernel from its name ("other" when no pattern matches)."""
    for kind, pattern in KINDS:
        if pattern.search(kernel):
            return kind
    return "other"


def profile_case(
    model: str, precision: str, batch: int, device: str, warmup: int, steps: int, overrides: dict | None = None
) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from memprobe.core.workload.registry import load_registry
    from memprobe.probe.child.worker import apply_precision_flags
    from memprobe.training.step import run_step, run_until_state
    from memprobe.workloads.base import Amp
    from memprobe.workloads.families import family_builder

    workload = load_registry()[model]
    params = {**workload.params, **(overrides or {})}
    apply_precision_flags(precision, False)
    dev = torch.device(device)
    torch.manual_seed(0)
    task = family_builder(workload.family)(params, workload.optimizer, dev)
    task.start()
    amp = Amp(precision, dev)
    inputs = task.make_batch(batch)

    def step() -> None:
        run_step(task, amp, inputs, "train")

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    run_until_state(step, amp, warmup, "train")
    sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=activities) as prof:
        started = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        wall = time.perf_counter() - started
    kernels: dict[str, float] = {}
    launches = 0
    for event in prof.key_averages():
        if str(event.device_type).endswith("CUDA"):
            us = getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0)
            kernels[event.key] = kernels.get(event.key, 0.0) + float(us)
            launches += int(event.count)
    summary = summarize_kernels(kernels, steps, wall)
    return {
        "model": model,
        "precision": precision,
        "batch": batch,
        "device": device,
        "overrides": overrides or {},
        "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "steps": steps,
        "wall_seconds_per_step": round(wall / steps, 4),
        "kernel_launches": launches,
        **summary,
    }


def summarize_kernels(kernels: dict[str, float], steps: int, wall: float) -> dict:
    """Shares of GPU time by kind, the GPU-busy share of `wall` seconds, the top kernels, and every
    kernel's microseconds (so a profile can be re-sorted later without another GPU run)."""
    busy_us = sum(kernels.values())
    by_kind: dict[str, float] = {}
    for name, us in kernels.items():
        kind = kind_of(name)
        by_kind[kind] = by_kind.get(kind, 0.0) + us
    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:25]
    share = (lambda us: round(100.0 * us / busy_us, 1)) if busy_us else (lambda us: None)
    return {
        "gpu_busy_seconds_per_step": round(busy_us / 1e6 / steps, 4),
        "gpu_busy_share_of_wall_percent": round(100.0 * busy_us / 1e6 / wall, 1) if wall else None,
        "share_percent_by_kind": {k: share(v) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "matrix_share_percent": share(sum(by_kind.get(k, 0.0) for k in MATRIX_KINDS)),
        "top_kernels": [
            {
                "kernel": name[:160],
                "kind": kind_of(name),
                "percent": share(us),
                "ms_per_step": round(us / 1e3 / steps, 3),
            }
            for name, us in top
        ],
        "kernels_us": {name: round(us, 1) for name, us in sorted(kernels.items(), key=lambda kv: -kv[1])},
    }


def resort(path: Path) -> dict:
    """Re-sort a saved profile's kernels with the current KINDS (rewrites the file)."""
    result = json.loads(path.read_text())
    steps, wall = result["steps"], result["wall_seconds_per_step"] * result["steps"]
    result.update(summarize_kernels(result["kernels_us"], steps, wall))
    path.write_text(json.dumps(result, indent=1) + "\n")
    return result


def show(result: dict) -> None:
    print(
        f"== {result['model']} {result['precision']} batch {result['batch']} {result.get('overrides') or ''} on "
        f"{result['gpu']}: {result['wall_seconds_per_step']} s/step, "
        f"GPU busy {result['gpu_busy_share_of_wall_percent']}% of wall, "
        f"matrix kernels {result['matrix_share_percent']}% of GPU time, {result['kernel_launches']} launches"
    )
    for kind, pct in result["share_percent_by_kind"].items():
        print(f"   {kind:26s} {pct}%")
    for k in result["top_kernels"][:12]:
        print(f"   {k['percent']:5}%  {k['ms_per_step']:9.3f} ms  [{k['kind']}] {k['kernel'][:100]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", action="append", default=[], help="MODEL:PRECISION:BATCH (repeatable)")
    parser.add_argument(
        "--resort",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="re-sort saved profiles with the current kinds instead of profiling",
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PARAM=VALUE",
        help="override a workload parameter (YAML value), e.g. channels_last=false",
    )
    parser.add_argument("--out", help="folder for profile_<model>_<precision>.json")
    args = parser.parse_args(argv)
    if args.resort:
        for path in args.resort:
            show(resort(path))
        return 0
    if not (args.case and args.out):
        parser.error("--case and --out are needed (or --resort)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import yaml

    overrides = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.set)}
    suffix = "".join(f"_{k}-{v}" for k, v in overrides.items())
    for case in args.case:
        model, precision, batch = case.split(":")
        result = profile_case(model, precision, int(batch), args.device, args.warmup, args.steps, overrides)
        (out / f"profile_{model}_{precision}{suffix}.json").write_text(json.dumps(result, indent=1) + "\n")
        show(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
