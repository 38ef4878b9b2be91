"""The scaling table: per-GPU max batch on N GPUs per strategy, N-GPU against 1-GPU throughput, efficiency."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Sequence, TypeVar

from memprobe.compare.report import render
from memprobe.compare.tables import Table, fmt_number
from memprobe.core.cards.catalog import PRECISIONS
from memprobe.core.records.results import PrecisionResult, ScanResult
from memprobe.core.records.settings import Scaling
from memprobe.core.text.edge_text import band_text, runs_text

T = TypeVar("T", bound="ScanResult | tuple[Any, ScanResult]")


def world_size(result: ScanResult) -> int:
    """The number of GPUs a result was measured on (1 for every file written before multi-GPU scans)."""
    dist = result.environment.distributed
    return int((dist.world_size if dist is not None else None) or result.settings.world_size or 1)


def strategy(result: ScanResult) -> str | None:
    """The data-parallel strategy of a multi-GPU result ("ddp", "fsdp"); None for a one-GPU result."""
    if world_size(result) < 2:
        return None
    dist = result.environment.distributed
    return (dist.strategy if dist is not None else None) or result.settings.strategy or "?"


def split_by_world_size(items: Sequence[T]) -> tuple[list[T], list[T]]:
    """(single-GPU, multi-GPU) items; an item is a ScanResult or a (path, ScanResult) pair."""
    single: list[T] = []
    multi: list[T] = []
    for item in items:
        result = item[1] if isinstance(item, tuple) else item
        (multi if world_size(result) > 1 else single).append(item)
    return single, multi


def _single_gpu_edges(results: Sequence[ScanResult]) -> dict[tuple[str, str, str], int]:
    """(GPU, workload, precision) -> the newest proven single-GPU max batch in training (the mode every multi-GPU
    scan runs in: an inference scan's edge beside it would read as what the wrapper costs)."""
    edges: dict[tuple[str, str, str], tuple[datetime, int]] = {}
    for r in results:
        if r.mode != "train":
            continue
        gpu = r.gpu_name()
        for name, p in r.precisions.items():
            key = (gpu, str(r.workload.name), name)
            if p.status == "done" and p.max_batch is not None and (key not in edges or r.created_at >= edges[key][0]):
                edges[key] = (r.created_at, p.max_batch)
    return {k: v[1] for k, v in edges.items()}


def _proof_cell(p: PrecisionResult) -> str:
    """The proof column: the fresh groups' pair with B's fresh runs and the flaky band, B marked unverified, or why
    there is no B (interrupted, error)."""
    proof = p.proof
    band = f"; {band_text(proof, counts=False)}" if band_text(proof, counts=False) else ""
    if proof is not None and proof.verified:
        runs = f" ({runs_text(proof, short=True)})" if runs_text(proof) else ""
        return f"{proof.fits} fits{runs}, {proof.fails} {proof.fail_outcome or 'fails'}{band}"
    if p.max_batch is not None:
        return f"{p.max_batch} (unverified){band}"
    return p.status if p.status != "done" else "-"


def _rate(value: float | None, unit: str | None) -> str:
    return "-" if value is None else f"{fmt_number(value)} {unit or 'samples'}/s"


def scaling_rows(multi: Sequence[ScanResult], single: Sequence[ScanResult] = ()) -> list[list[Any]]:
    """One row per GPU, workload, precision, world size and strategy, from the newest file that has it."""
    return [row for row, _result in scaling_entries(multi, single)]


def scaling_entries(
    multi: Sequence[ScanResult], single: Sequence[ScanResult] = ()
) -> list[tuple[list[Any], ScanResult]]:
    """scaling_rows' rows, each with the multi-GPU result it was read from."""
    newest: dict[tuple, tuple[ScanResult, Any]] = {}
    for r in multi:
        gpu = r.gpu_name()
        for name, p in r.precisions.items():
            key = (gpu, str(r.workload.name), name, world_size(r), strategy(r))
            rank = (p.status == "done", r.created_at)
            if key not in newest or rank >= (newest[key][1].status == "done", newest[key][0].created_at):
                newest[key] = (r, p)
    edges = _single_gpu_edges(single)
    order = {name: i for i, name in enumerate(PRECISIONS)}
    rows: list[tuple[list[Any], ScanResult]] = []
    for key in sorted(newest, key=lambda k: (k[0], k[1], order.get(k[2], 99), k[3], k[4])):
        gpu, workload, precision, n, how = key
        r, p = newest[key]
        scaling = p.settings.scaling or Scaling()
        unit = scaling.unit
        dist = r.environment.distributed
        interconnect = ((dist.interconnect if dist is not None else None) or {}).get("summary", "-")
        row = [
            gpu,
            workload,
            precision,
            how,
            n,
            "-" if p.max_batch is None else p.max_batch,
            _proof_cell(p),
            edges.get((gpu, workload, precision), "-"),
            "-" if scaling.per_gpu_batch is None else scaling.per_gpu_batch,
            _rate(scaling.units_per_s_1, unit),
            _rate(scaling.units_per_s_n, unit),
            "-" if scaling.speedup is None else f"{scaling.speedup:.2f}x",
            "-" if scaling.efficiency is None else f"{100 * scaling.efficiency:.1f}%",
            interconnect,
        ]
        rows.append((row, r))
    return rows


COLUMNS = [
    "GPU",
    "model",
    "precision",
    "strategy",
    "GPUs",
    "per-GPU max batch",
    "proof (fresh process groups)",
    "1-GPU max batch",
    "timed at per-GPU batch",
    "1 GPU",
    "N GPUs",
    "speed-up",
    "efficiency",
    "interconnect",
]


def scaling_table(multi: Sequence[ScanResult], single: Sequence[ScanResult] = (), fmt: str = "github") -> str:
    """The scaling table as text (github, plain, csv or json); single-GPU results add the 1-GPU max batch."""
    return render([scaling_rows_table(multi, single)], fmt)


def scaling_rows_table(
    multi: Sequence[ScanResult],
    single: Sequence[ScanResult] = (),
    source_of: Callable[[ScanResult], str] | None = None,
) -> Table:
    """The scaling table as a Table; single-GPU results add the 1-GPU max batch. With `source_of`, each row
    names its result file (Table.sources)."""
    entries = scaling_entries(multi, single)
    return Table(
        "scaling",
        "Scaling: per-GPU max batch and throughput of N GPUs against 1",
        COLUMNS,
        [row for row, _result in entries],
        [
            "efficiency = throughput of N GPUs / (N x throughput of 1 GPU), both at the per-GPU batch shown "
            "(1 GPU: plain training, no wrapper)",
            "per-GPU max batch: B trains on every rank of K fresh process groups in a row (K and the runs in the "
            "proof column), B+1 fails on at least one; flaky: batches that trained in one fresh group and failed in "
            "another",
            "1-GPU max batch: from the single-GPU scan of the same GPU model, where given",
        ],
        [source_of(result) for _row, result in entries] if source_of else [],
        keep=5,
    )
