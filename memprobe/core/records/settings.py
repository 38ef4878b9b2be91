"""How a scan ran: a result's scan-level settings and each precision's, with the task, scaling and nothing-fits parts.

No torch. Sections (core/records/records.py): each named key an attribute (None when the file lacks it), the keys a file
holds written back as read, unknown ones kept in `extra`. The fields are those memprobe writes: ScanSettings from
probe/options.ScanOptions (plus what a frontier, a distributed or a --parallel scan adds), PrecisionSettings from
the trial process's set-up (probe/local.py, probe/distributed/backend.py) and what the pipeline adds after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from memprobe.core.records.fieldtypes import (
    BATCH_MAX,
    Batch1,
    Bytes,
    Bytes1,
    Count,
    Flops,
    Mode,
    Precision,
    Range,
    Ranks,
    Rate,
    Seconds,
    Strategy,
    Unit,
)
from memprobe.core.records.records import ABSENT, Section


@dataclass(kw_only=True)
class ScanSettings(Section):
    """The options the scan ran with (ScanOptions.to_dict), and what the run added: `interrupted` (stopped by a
    signal), a distributed scan's world size and strategy, a frontier's search and budget, a predicted frontier's
    capacity, a --parallel scan's GPUs."""

    mode: Mode | None = ABSENT  # read through ScanResult.mode: None is "train"
    steps: Count | None = ABSENT
    warmup: Count | None = ABSENT
    timed_steps: Count | None = ABSENT
    batches: list[Batch1] | None = ABSENT
    max_batch: Batch1 | None = ABSENT
    max_trials: Count | None = ABSENT
    fresh_checks: Count | None = ABSENT
    repeat: Count | None = ABSENT  # K: the fresh runs B must fit in (absent before the repeat rule: 1)
    edge_budget_s: Seconds | None = ABSENT  # the fresh walk's seconds near a flaky edge (probe/edge_walk.py)
    measure: bool | None = ABSENT
    device: str | None = ABSENT
    cpu_budget_bytes: Bytes | None = ABSENT
    cudnn_benchmark: bool | None = ABSENT
    compile: bool | None = ABSENT
    timeout_s: Seconds | None = ABSENT
    memory_cap_bytes: Bytes1 | None = ABSENT
    curve: bool | None = ABSENT
    curve_batches: list[Batch1] | None = ABSENT
    curve_points: Count | None = ABSENT
    curve_budget_s: Seconds | None = ABSENT
    timed_budget_s: Seconds | None = ABSENT
    soak: Count | None = ABSENT
    predicted_start: bool | None = ABSENT
    breakdown: bool | None = ABSENT
    # generate: the decode forwards a search trial's generations stop after (absent before trials were cut: whole)
    search_decode_steps: Count | None = ABSENT
    precisions: list[Precision] | None = ABSENT
    interrupted: bool | None = ABSENT
    world_size: Ranks | None = ABSENT
    strategy: Strategy | None = ABSENT
    search: str | None = ABSENT
    frontier_budget_s: Seconds | None = ABSENT
    predicted: bool | None = ABSENT
    capacity_bytes: Bytes | None = ABSENT
    capacity_how: str | None = ABSENT
    parallel: dict[str, Any] | None = ABSENT


@dataclass(kw_only=True)
class Task(Section):
    """What the workload built, as its builder describes it (workloads/base.py describe(), and each family's
    additions, kept in `extra`): parameters, optimizer, units per sample, and what reports read."""

    parameters: Annotated[int, Range(0, 1 << 50)] | None = ABSENT
    optimizer: str | None = ABSENT
    optimizer_fused: bool | None = ABSENT
    units_per_sample: Annotated[float, Range(1e-9, BATCH_MAX)] | None = ABSENT
    tokens_per_sample: Annotated[float, Range(0, BATCH_MAX)] | None = ABSENT
    flops_per_sample: Flops | None = ABSENT
    compiled: Any = ABSENT


@dataclass(kw_only=True)
class NothingFits(Section):
    """Why batch 1 does not train, and what would (probe/nothing_fits.py): the bytes one sample's trial needs."""

    precision: Precision | None = ABSENT
    capacity_bytes: Bytes | None = ABSENT
    need_bytes: Bytes | None = ABSENT
    error: str | None = ABSENT
    alternatives: list[Any] | None = ABSENT


@dataclass(kw_only=True)
class Scaling(Section):
    """A distributed scan's 1-GPU baseline at the per-GPU batch, and the scaling efficiency (probe/distributed)."""

    world_size: Ranks | None = ABSENT
    per_gpu_batch: Batch1 | None = ABSENT
    throughput_n: Rate | None = ABSENT
    throughput_1: Rate | None = ABSENT
    units_per_s_n: Rate | None = ABSENT
    units_per_s_1: Rate | None = ABSENT
    unit: Unit | None = ABSENT
    speedup: Annotated[float, Range(0, 1e6)] | None = ABSENT
    efficiency: Annotated[float, Range(0, 1e3)] | None = ABSENT
    note: str | None = ABSENT
    single_gpu_run: dict[str, Any] | None = ABSENT


@dataclass(kw_only=True)
class PrecisionSettings(Section):
    """A precision's set-up and what its run added: the task, the flags in force, the weights, the set-up's times,
    an emulated cap, the FLOPs per sample, the predicted start, the curve's cost, why nothing fits, a distributed
    precision's wrapping, launches and scaling, where an interrupt stopped it."""

    task: Task | None = ABSENT
    flags: dict[str, Any] | None = ABSENT
    weights_bytes: Bytes | None = ABSENT
    build_seconds: Seconds | None = ABSENT
    cuda_init_seconds: Seconds | None = ABSENT
    first_process_ready_seconds: Seconds | None = ABSENT
    emulation: dict[str, Any] | None = ABSENT
    flops_per_sample: Flops | None = ABSENT
    flops_error: str | None = ABSENT
    predicted_start: dict[str, Any] | None = ABSENT  # probe/hint.py: the answer, when it came, whether used
    curve_cost: dict[str, Any] | None = ABSENT  # probe/curve_cost.py's estimate inputs and the budget
    nothing_fits: NothingFits | None = ABSENT
    setup_failure: dict[str, Any] | None = ABSENT  # probe/setup_failure.py: out of memory before the first trial
    breakdown_error: str | None = ABSENT
    world_size: Ranks | None = ABSENT
    strategy: Strategy | None = ABSENT
    per_gpu: bool | None = ABSENT
    wrap: dict[str, Any] | None = ABSENT
    weights_after_wrap_bytes: Bytes | None = ABSENT
    launches: dict[str, Any] | None = ABSENT
    scaling: Scaling | None = ABSENT
    interrupted_at: str | None = ABSENT
    curve_interrupted: bool | None = ABSENT
    parallel: dict[str, Any] | None = ABSENT  # a --parallel scan: the GPU this precision ran on
