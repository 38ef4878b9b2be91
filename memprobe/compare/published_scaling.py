"""Published multi-GPU scaling: a machine's throughput against N x the same card's one-GPU figure (no torch)."""

from __future__ import annotations

from typing import Any, Sequence

from memprobe.compare.published import Figure, default_published, load_published
from memprobe.compare.report import render
from memprobe.compare.tables import Table, fmt_number

COLUMNS = [
    "machine (published)",
    "model",
    "precision",
    "GPUs",
    "batch per machine",
    "per GPU",
    "1 GPU (published)",
    "N GPUs (published)",
    "speed-up",
    "efficiency (derived)",
]


def _index(figures: Sequence[Figure]) -> dict[tuple, Figure]:
    return {(f.source, f.gpu, f.memprobe_workload, f.precision, f.metric, f.num_gpu): f for f in figures}


def published_scaling_rows(
    workloads: Sequence[str] | None = None,
    multi: Sequence[Figure] | None = None,
    single: Sequence[Figure] | None = None,
) -> list[list[Any]]:
    """One row per published machine of N > 1 GPUs, workload and precision that has a throughput and the
    same card's one-GPU throughput from the same source; `workloads` keeps only those memprobe workloads.
    Raises PublishedDataError when a packaged file is malformed."""
    multi = load_published(multi_gpu=True) if multi is None else multi
    one = _index(default_published() if single is None else single)
    many = _index(multi)
    rows = []
    for f in sorted(multi, key=lambda f: (f.memprobe_workload, f.gpu, f.num_gpu)):
        if f.metric != "throughput" or f.value is None or not f.memprobe_workload:
            continue
        if workloads is not None and f.memprobe_workload not in workloads:
            continue
        base = one.get((f.source, f.gpu, f.memprobe_workload, f.precision, "throughput", 1))
        if base is None or not base.value:
            continue
        batch = many.get((f.source, f.gpu, f.memprobe_workload, f.precision, "max_batch", f.num_gpu))
        base_batch = one.get((f.source, f.gpu, f.memprobe_workload, f.precision, "max_batch", 1))
        speedup = f.value / base.value
        rows.append(
            [
                f.gpu_as_published,
                f.memprobe_workload,
                f.precision,
                f.num_gpu,
                "-" if batch is None or batch.value is None else int(batch.value),
                "-" if batch is None or batch.value is None else fmt_number(batch.value / f.num_gpu),
                f"{fmt_number(base.value)} {base.unit}"
                + (f" @ {int(base_batch.value)}" if base_batch and base_batch.value else ""),
                f"{fmt_number(f.value)} {f.unit}",
                f"{speedup:.2f}x",
                f"{100 * speedup / f.num_gpu:.1f}%",
            ]
        )
    return rows


def published_scaling_table(workloads: Sequence[str] | None = None, fmt: str = "github") -> str:
    """The published scaling table as text (github, plain, csv or json)."""
    return render([published_scaling(workloads)], fmt)


def published_scaling(workloads: Sequence[str] | None = None) -> Table:
    """The published scaling table as a Table (see published_scaling_rows)."""
    return Table(
        "published_scaling",
        "Published multi-GPU scaling (figures from elsewhere, not measured here)",
        COLUMNS,
        published_scaling_rows(workloads),
        [
            "source: lambdal/deeplearning-benchmark PyTorch catalog 2023-2025 (commit aa5addb6), NVIDIA "
            "DeepLearningExamples in NGC containers, data-parallel; batches hand-picked per memory size, "
            "not searched",
            "efficiency (derived here) = published N-GPU throughput / (N x the same card's published 1-GPU "
            "throughput); the two were run at different batches per GPU where the batch columns differ; above "
            "100%: the runs differ in more than the GPU count (3-run averages, truncated; timers that include "
            "the first steps), shown as published",
        ],
        keep=4,
    )
