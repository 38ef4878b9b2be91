"""Benchmark: does memprobe's timing cost throughput? A plain PyTorch loop against memprobe, same batch.

For each workload: a hand-written training loop, as a careful user writes it (autocast + GradScaler
for fp16, fused optimizer on CUDA, channels_last for CNNs, sdpa attention, synthetic inputs made
once), built straight from transformers / timm, NOT through memprobe's task code; and memprobe's
timed run (`Worker.measure`, the code behind `memprobe scan`'s throughput) at the same batch. Each
runs in its own fresh process, alternating plain, memprobe, plain, memprobe, so drift shows up.
Prints samples/s of each run and the ratio memprobe / plain (the goal: >= 0.97).
With --compile, each round also times memprobe's step through torch.compile (`scan --compile`) in
a third fresh process, and prints its compile seconds and the ratio compiled / eager.

GPU: python benchmarks/plain_loop_vs_memprobe.py --out FILE.json
     (defaults: bert-large-squad fp16 at 112 and resnet50 fp16 at 1280, the published batch sizes)
CPU smoke test of the script itself: ... --smoke (tiny models, CPU, a few steps). Its ratio means
nothing: on the CPU memprobe's trial process runs under the fake allocator (cpu_memory.LiveBytes),
which inspects every operator; on CUDA there is no such layer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DEFAULT_CASES = ["bert-large-squad:fp16:112", "resnet50:fp16:1280"]
SMOKE_CASES = ["toy-bert-squad:fp32:4", "toy-resnet:fp32:4"]


def plain_child(model: str, precision: str, batch: int, warmup: int, steps: int, device: str) -> None:
    """The hand-written loop. Prints one JSON line: samples/s from the median step."""
    import torch

    from memprobe.core.workload.registry import load_registry

    params = load_registry()[model].params  # the same architecture as memprobe's workload
    dev = torch.device(device)
    if precision == "fp32":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    if "bert" in model:
        from transformers import BertConfig, BertForQuestionAnswering

        config = BertConfig(
            vocab_size=params["vocab"],
            hidden_size=params["hidden"],
            num_hidden_layers=params["layers"],
            num_attention_heads=params["heads"],
            intermediate_size=params["ffn"],
            max_position_embeddings=max(512, params["seq_len"]),
        )
        with dev:
            net = BertForQuestionAnswering._from_config(config, attn_implementation="sdpa")
        seq = params["seq_len"]
        inputs = {
            "input_ids": torch.randint(0, params["vocab"], (batch, seq), device=dev),
            "start_positions": torch.randint(0, seq, (batch,), device=dev),
            "end_positions": torch.randint(0, seq, (batch,), device=dev),
        }
        optimizer = torch.optim.AdamW(net.parameters(), lr=3e-5, **({"fused": True} if dev.type == "cuda" else {}))

        def loss_fn():
            return net(**inputs).loss
    else:
        import timm

        with dev:
            net = timm.create_model(
                params["model"], pretrained=False, num_classes=params["classes"], **params.get("kwargs", {})
            )
        size = params["image_size"]
        images = torch.randn(batch, 3, size, size, device=dev)
        if dev.type == "cuda":
            net = net.to(memory_format=torch.channels_last)
            images = images.contiguous(memory_format=torch.channels_last)
        labels = torch.randint(0, params["classes"], (batch,), device=dev)
        # foreach, not fused: fused SGD corrupts its momentum on the steps fp16 loss scaling skips
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, foreach=True)

        def loss_fn():
            return torch.nn.functional.cross_entropy(net(images), labels)

    scaler = torch.amp.GradScaler(dev.type) if precision == "fp16" else None
    net.train()

    def step():
        with torch.autocast(dev.type, dtype=dtype, enabled=dtype is not None):
            loss = loss_fn()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        if dev.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000)
        else:
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    print(json.dumps({"samples_per_s": batch / median, "median_s": median}), flush=True)


def run_plain(model: str, precision: str, batch: int, warmup: int, steps: int, device: str) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            __file__,
            "--plain-child",
            f"{model}:{precision}:{batch}",
            "--warmup",
            str(warmup),
            "--steps",
            str(steps),
            "--device",
            device,
        ],
        capture_output=True,
        text=True,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])}
    return json.loads(lines[-1])


def run_memprobe(
    model: str, precision: str, batch: int, warmup: int, steps: int, device: str, compile_step: bool = False
) -> dict:
    from memprobe.core.process.protocol import TrialSettings
    from memprobe.core.workload.registry import load_registry
    from memprobe.probe.runner import Worker, WorkerSpec
    from memprobe.workloads.families import family_module

    workload = load_registry()[model]
    worker = Worker(family_module(workload.family))
    try:
        worker.setup(WorkerSpec(workload, precision, device=device, settings=TrialSettings(compile=compile_step)))
        measured = worker.measure(batch, warmup, steps)
    finally:
        worker.close()
    if measured.get("outcome") != "fit":
        return {"error": measured.get("error", measured.get("outcome"))}
    row = {"samples_per_s": measured["samples_per_s"], "median_s": measured["step_time"]["median_s"]}
    if compile_step:
        row["compile_seconds"] = measured.get("compile_seconds")
        row["first_step_seconds"] = measured.get("first_step_seconds")
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", help="MODEL:PRECISION:BATCH (repeatable)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating plain/memprobe pairs per case")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--smoke", action="store_true", help="tiny models on the CPU, to test this script")
    parser.add_argument("--compile", action="store_true", help="also time memprobe's step through torch.compile")
    parser.add_argument("--out", default="plain_loop_vs_memprobe.json")
    parser.add_argument("--plain-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain_child:
        model, precision, batch = args.plain_child.split(":")
        plain_child(model, precision, int(batch), args.warmup, args.steps, args.device)
        return 0
    if args.smoke:
        args.device, args.warmup, args.steps, args.rounds = "cpu", 1, 2, 1
    cases = args.case or (SMOKE_CASES if args.smoke else DEFAULT_CASES)
    rows = []
    for case in cases:
        model, precision, batch = case.split(":")
        runs = {"plain": [], "memprobe": []} | ({"memprobe_compiled": []} if args.compile else {})
        for _ in range(args.rounds):
            runs["plain"].append(run_plain(model, precision, int(batch), args.warmup, args.steps, args.device))
            runs["memprobe"].append(run_memprobe(model, precision, int(batch), args.warmup, args.steps, args.device))
            if args.compile:
                runs["memprobe_compiled"].append(
                    run_memprobe(model, precision, int(batch), args.warmup, args.steps, args.device, compile_step=True)
                )
        rates = {k: [r["samples_per_s"] for r in v if "samples_per_s" in r] for k, v in runs.items()}

        def ratio_of(a: str, b: str, rates: dict[str, list[float]] = rates) -> float | None:
            return statistics.median(rates[a]) / statistics.median(rates[b]) if rates.get(a) and rates.get(b) else None

        row = {
            "model": model,
            "precision": precision,
            "batch": int(batch),
            "device": args.device,
            "runs": runs,
            "ratio_memprobe_over_plain": ratio_of("memprobe", "plain"),
        }
        if args.compile:
            row["ratio_compiled_over_eager"] = ratio_of("memprobe_compiled", "memprobe")
        rows.append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    from tabulate import tabulate

    def rates_of(runs: list[dict]) -> str:
        return " / ".join(
            f"{x['samples_per_s']:.1f}" if "samples_per_s" in x else x.get("error", "?")[:40] for x in runs
        )

    def fmt(value: float | None) -> str:
        return f"{value:.3f}" if value else "-"

    headers = ["model", "precision", "batch", "plain loop samples/s", "memprobe samples/s", "memprobe / plain"]
    if args.compile:
        headers += ["memprobe --compile samples/s", "compile s", "compiled / eager"]
    table = []
    for r in rows:
        line = [
            r["model"],
            r["precision"],
            r["batch"],
            rates_of(r["runs"]["plain"]),
            rates_of(r["runs"]["memprobe"]),
            fmt(r["ratio_memprobe_over_plain"]),
        ]
        if args.compile:
            compiled = r["runs"]["memprobe_compiled"]
            line += [
                rates_of(compiled),
                " / ".join(f"{x.get('compile_seconds') or 0:.1f}" for x in compiled),
                fmt(r["ratio_compiled_over_eager"]),
            ]
        table.append(line)
    print(tabulate(table, headers=headers, tablefmt="github"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
