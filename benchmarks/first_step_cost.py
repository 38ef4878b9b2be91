"""Benchmark: what the first training step at a new batch size costs, and where that time goes.

NasNet-Large search trials take 10-34 s on the H100 while a step takes at most 1.3 s, and the cost is
per batch size, not per process (batch 1 then batch 2 in one process: 14.4 s and 15.8 s for 3 steps;
a timed run right after a trial at the same batch: first step 0.68 s). Nothing in memprobe or timm's
nasnet runs per batch size in Python (plain nn.Conv2d, padding fixed at build), so the suspect is
per-shape set-up below PyTorch: cuDNN choosing and building an execution plan for every new
convolution shape (forward, data-gradient and weight-gradient of ~100 distinct depthwise and
pointwise shapes), or kernels loaded lazily for the shapes' algorithms.

This script builds the workload as `memprobe scan` does and, in one process, runs batch sizes in turn
(e.g. 8,16,8), timing every step synchronized: a cost that comes back for a new size and not for a
size seen before is per-shape set-up. With --profile, the first step at the second size is recorded
with torch.profiler (CPU and CUDA): the CPU operators with the most self time, and how much of the
step's wall time the GPU was busy, say whether cuDNN's plan building (CPU time under
aten::cudnn_convolution and its backward) is the cost. --no-cudnn repeats it with cuDNN off (PyTorch's
own kernels) to attribute it; --set channels_last=false with NCHW tensors.

GPU:  python benchmarks/first_step_cost.py --case nasnet-large:bf16 --batches 8,16,8 --profile --out DIR
CPU smoke test of the plumbing: ... --case toy:fp32 --batches 2,4,2 --device cpu --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def step_times(
    model: str, precision: str, batches: list[int], device: str, steps: int, profile: bool, cudnn: bool, overrides: dict
) -> dict:
    """Seconds of every step (synchronized) per batch size, in one process, and a profile of the first
    step at the second batch size when `profile`."""
    import torch

    from memprobe.core.workload.registry import load_registry
    from memprobe.probe.child.worker import apply_precision_flags
    from memprobe.training.step import run_step
    from memprobe.workloads.base import Amp
    from memprobe.workloads.families import family_builder

    workload = load_registry()[model]
    apply_precision_flags(precision, False)
    torch.backends.cudnn.enabled = cudnn
    dev = torch.device(device)
    torch.manual_seed(0)
    started = time.perf_counter()
    task = family_builder(workload.family)({**workload.params, **overrides}, workload.optimizer, dev)
    build = time.perf_counter() - started

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    runs, profiled = [], None
    for index, batch in enumerate(batches):
        task.start()
        amp = Amp(precision, dev)
        inputs = task.make_batch(batch)
        sync()
        seconds = []
        for s in range(steps):
            if profile and index == 1 and s == 0:
                profiled = _profile_one(lambda: run_step(task, amp, inputs, "train"), sync, dev)  # noqa: B023 (called here)
                seconds.append(profiled["wall_seconds"])
                continue
            t0 = time.perf_counter()
            run_step(task, amp, inputs, "train")
            sync()
            seconds.append(round(time.perf_counter() - t0, 4))
        runs.append({"batch": batch, "seen_before": batch in batches[:index], "step_seconds": seconds})
        task.stop()
        inputs = amp = None
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return {
        "model": model,
        "precision": precision,
        "device": device,
        "cudnn": cudnn,
        "overrides": overrides,
        "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "cudnn_version": torch.backends.cudnn.version() if dev.type == "cuda" else None,
        "environment": {k: v for k, v in os.environ.items() if k.startswith(("TORCH_CUDNN", "CUDNN", "CUDA_MODULE"))},
        "build_seconds": round(build, 3),
        "runs": runs,
        "profile_of_first_step_at_second_batch": profiled,
    }


def _profile_one(step, sync, dev) -> dict:
    """One step under torch.profiler: wall seconds, GPU-busy seconds and the top CPU operators by self time."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        step()
        sync()
        wall = time.perf_counter() - t0
    cpu, gpu_us = [], 0.0
    for event in prof.key_averages():
        if str(event.device_type).endswith("CUDA"):
            gpu_us += float(getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0))
        else:
            cpu.append((event.key, float(event.self_cpu_time_total), int(event.count)))
    cpu.sort(key=lambda e: -e[1])
    return {
        "wall_seconds": round(wall, 4),
        "gpu_busy_seconds": round(gpu_us / 1e6, 4),
        "top_cpu_ops": [{"op": k[:120], "self_cpu_ms": round(us / 1e3, 2), "calls": n} for k, us, n in cpu[:25]],
    }


def show(result: dict) -> None:
    print(
        f"== {result['model']} {result['precision']} on {result['gpu']} (cudnn {'on' if result['cudnn'] else 'off'}"
        f"{', env ' + str(result['environment']) if result.get('environment') else ''}"
        f"{', ' + str(result['overrides']) if result['overrides'] else ''}): build {result['build_seconds']} s"
    )
    for run in result["runs"]:
        print(
            f"   batch {run['batch']:>5} ({'seen before' if run['seen_before'] else 'new size'}): steps "
            + ", ".join(f"{s:.3f}" for s in run["step_seconds"])
            + " s"
        )
    prof = result.get("profile_of_first_step_at_second_batch")
    if prof:
        print(f"   profiled first step: wall {prof['wall_seconds']} s, GPU busy {prof['gpu_busy_seconds']} s")
        for op in prof["top_cpu_ops"][:12]:
            print(f"     {op['self_cpu_ms']:10.1f} ms  x{op['calls']:<6} {op['op']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", action="append", required=True, help="MODEL:PRECISION (repeatable)")
    parser.add_argument("--batches", default="8,16,8", help="batch sizes in turn, in one process")
    parser.add_argument("--steps", type=int, default=3, help="steps per batch size")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--profile", action="store_true", help="profile the first step at the second batch size")
    parser.add_argument("--no-cudnn", action="store_true", help="torch.backends.cudnn.enabled = False")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PARAM=VALUE",
        help="override a workload parameter (YAML value), e.g. channels_last=false",
    )
    parser.add_argument("--tag", default="", help="added to the file name (e.g. the environment variant run)")
    parser.add_argument("--out", required=True, help="folder for first_step_<model>_<precision>[...].json")
    args = parser.parse_args(argv)
    import yaml

    overrides = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.set)}
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = (
        "".join(f"_{k}-{v}" for k, v in overrides.items())
        + ("_nocudnn" if args.no_cudnn else "")
        + (f"_{args.tag}" if args.tag else "")
    )
    for case in args.case:
        model, precision = case.split(":")
        result = step_times(
            model, precision, batches, args.device, args.steps, args.profile, not args.no_cudnn, overrides
        )
        (out / f"first_step_{model}_{precision}{suffix}.json").write_text(json.dumps(result, indent=1) + "\n")
        show(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
