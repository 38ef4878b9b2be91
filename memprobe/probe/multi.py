"""What `scan --gpus N[,N...] --strategy ...` runs: the world sizes and strategies, one result file each."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator, Sequence

from memprobe.core.records.results import ScanResult
from memprobe.core.text.textlists import comma_items
from memprobe.core.workload.registry import Workload
from memprobe.core.workload.strategies import STRATEGIES
from memprobe.probe import scan as single_gpu
from memprobe.probe.scan import ScanOptions, ScanProgress


def parse_gpus(text: str | Sequence[str] | None, count: Callable[[], int]) -> list[int]:
    """World sizes from `--gpus`: '1', '1,2', 'all' (every visible GPU: `count()`), or those items as a list; None
    or no item means [1]. Raises ValueError for anything else, or a size above what `count()` reports (only asked when needed)."""
    items = comma_items(text) if text is None or isinstance(text, str) else [t.strip() for t in text if t.strip()]
    if not items:
        return [1]
    sizes: list[int] = []
    for item in items:
        if item == "all":
            value = count()
        else:
            try:
                value = int(item)
            except ValueError:
                raise ValueError(f"--gpus takes numbers or 'all', got '{item}'") from None
        if value < 1:
            raise ValueError(f"--gpus: a world size must be at least 1, got {value}")
        if value not in sizes:
            sizes.append(value)
    if max(sizes) > 1:
        available = count()
        if max(sizes) > available:
            raise ValueError(f"--gpus {max(sizes)}: only {available} GPU(s) visible")
    return sizes


def parse_strategies(text: str | Sequence[str] | None) -> list[str]:
    """Strategies from `--strategy` ('ddp', 'fsdp', 'ddp,fsdp', or those items as a list; None: ddp), each once.
    Raises ValueError for an unknown one, or none."""
    chosen = ["ddp"] if text is None else comma_items(text) if isinstance(text, str) else [t.strip() for t in text]
    unknown = [s for s in chosen if s not in STRATEGIES]
    if unknown or not chosen:
        raise ValueError(f"unknown strategy {', '.join(unknown) or '(none)'}; choose from {', '.join(STRATEGIES)}")
    return list(dict.fromkeys(chosen))


def check_runs(workload: Workload, opts: ScanOptions, sizes: list[int], strategies: list[str]) -> None:
    """Refuse, before anything runs, what no world size > 1 in `sizes` can honour (DistributedScanError)."""
    if max(sizes) > 1:
        from memprobe.probe.distributed.scan import check_options

        for size in (s for s in sizes if s > 1):
            for strategy in strategies:
                check_options(opts, size, strategy, workload)


def scan_runs(
    workload: Workload,
    opts: ScanOptions,
    sizes: list[int],
    strategies: list[str],
    out_dir: str | Path,
    progress: ScanProgress,
) -> Iterator[tuple[ScanResult, Path]]:
    """Scan `workload` at every world size: 1 is the single-GPU scan (unchanged), N > 1 one
    multi-GPU scan per strategy. Yields (result, path) as each file is complete; raises what
    scan_workload and scan_distributed raise (DistributedScanError before any scan runs)."""
    check_runs(workload, opts, sizes, strategies)
    for size in sizes:
        if size == 1:
            yield single_gpu.scan_workload(workload, opts, out_dir, progress)
            continue
        from memprobe.probe.distributed.scan import scan_distributed

        for strategy in strategies:
            yield scan_distributed(workload, opts, size, strategy, out_dir, progress)
