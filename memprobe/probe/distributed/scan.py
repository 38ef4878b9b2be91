"""Scan one workload on N GPUs under one strategy: per-GPU max batch, its proof, N-GPU and 1-GPU throughput.

No torch here. Every trial is a fresh torchrun launch (launch.py), so every trial is a fresh
process group: the search (search.find_max_batch) runs batch 1 and 2 in the first launch, then one
launch per batch; the fresh-process proof (search.confirm_edge) reuses fresh search trials where the
definition allows. With throughput on, the proof of B times the group in the same launch, and B only
counts as fitting if that run completes on every rank. The 1-GPU baseline is then timed at the same
per-GPU batch in a 1-rank launch with no wrapper (plain training on one GPU), and the scaling
efficiency is throughput_N / (N x throughput_1). Where B does not fit on one GPU (FSDP shards state,
so its per-GPU edge can lie above the single-GPU one), both are timed at halved batches until it does.
"""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from memprobe.probe.device import host_environment
from memprobe.probe.distributed.efficiency import scaling_record
from memprobe.probe.distributed.launch import LaunchRequest, LaunchResult, launch, launch_env, nccl_env
from memprobe.probe.distributed.topology import interconnect, visible_indices
from memprobe.training.wrap import NONE, STRATEGIES, StrategyError, check_workload
from memprobe.core.outcomes import ERROR, FIT, OOM
from memprobe.probe.hint import PredictedStart
from memprobe.probe.proof import confirm_edge, proof_record, reusable_checks
from memprobe.probe.scan import Progress, ScanOptions, interrupted, memory_models
from memprobe.core.memory_model import Attempt
from memprobe.core.records import Timed
from memprobe.probe.search import find_max_batch
from memprobe.core.registry import Workload
from memprobe.core.results import PrecisionResult, ScanResult, final_status, result_filename, write_result

Launcher = Callable[[LaunchRequest], LaunchResult]
BASELINE_HALVINGS = 3  # how often the common batch is halved when B does not train on one GPU
PG_TIMEOUT_S = 180.0  # a collective blocked this long ends its rank (a BERT-Large step takes < 1 s on an H100)


class DistributedScanError(ValueError):
    """Options a multi-GPU scan cannot honour (a user error: one line)."""


def check_options(opts: ScanOptions, world_size: int, strategy: str) -> None:
    """Raise DistributedScanError for what a multi-GPU scan does not support."""
    if world_size < 2:
        raise DistributedScanError("a multi-GPU scan needs at least 2 GPUs (--gpus 1 is the single-GPU scan)")
    if strategy not in STRATEGIES:
        raise DistributedScanError(f"unknown strategy '{strategy}'; choose from {', '.join(STRATEGIES)}")
    if opts.mode != "train":
        raise DistributedScanError("--gpus N measures training (data parallelism): use --mode train")
    if opts.compile:
        raise DistributedScanError("--compile is not supported with --gpus N yet")
    if opts.memory_cap_bytes is not None:
        raise DistributedScanError("--memory-cap is not supported with --gpus N")


class _Launches:
    """Launches for one workload, precision, world size and strategy; announces each to `progress`."""

    def __init__(self, workload: Workload, precision: str, opts: ScanOptions, world_size: int, strategy: str,
                 progress: Progress, launcher: Launcher, label: str) -> None:
        self.workload, self.precision, self.opts = workload, precision, opts
        self.world_size, self.strategy, self.progress, self.launcher, self.label = world_size, strategy, progress, launcher, label
        self.count = 0
        self.started = time.perf_counter()
        self.pg_timeout_s = min(PG_TIMEOUT_S, opts.timeout_s)

    def run(self, batches: list[int], measure: bool, world_size: int | None = None, strategy: str | None = None) -> LaunchResult:
        world = world_size or self.world_size
        where = f"{self.precision} {self.label if world > 1 else '1 GPU'}"
        self.count += 1
        self.progress.trial_start(self.workload.name, where, self.count, batches[0], True)
        request = LaunchRequest(
            self.workload.to_dict(), self.precision, strategy or self.strategy, world, batches, self.opts.steps,
            {"warmup": self.opts.warmup, "steps": self.opts.timed_steps} if measure else None, self.opts.device,
            self.opts.cpu_budget_bytes, settings={"cudnn_benchmark": self.opts.cudnn_benchmark},
            pg_timeout_s=self.pg_timeout_s, timeout_s=self.opts.timeout_s)
        result = self.launcher(request)
        for index, attempt in enumerate(result.attempts):
            attempt.done_at_s = round(time.perf_counter() - self.started, 3)
            if index:  # a later batch of the same launch (same process group)
                self.count += 1
                self.progress.trial_start(self.workload.name, where, self.count, attempt.batch, False)
            self.progress.trial_end(attempt)
        return result


class _SearchTrials:
    """try_batch for the search: the first launch runs batch 1 and 2 (it also reports the capacity),
    every later trial is a launch of its own, i.e. a fresh process group."""

    def __init__(self, launches: _Launches, max_batch: int) -> None:
        self.launches = launches
        self.cached: dict[int, Attempt] = {}
        first = launches.run([1, 2] if max_batch >= 2 else [1], measure=False)
        self.first = first
        for attempt in first.attempts:
            self.cached[attempt.batch] = attempt

    @property
    def capacity_bytes(self) -> int | None:
        """The smallest capacity any rank reported (free + reserved after building the model)."""
        values = [r["setup"]["capacity_bytes"] for r in self.first.ranks if r and r.get("setup")]
        values = [v for v in values if v]
        return min(values) if values else None

    def __call__(self, batch: int) -> Attempt:
        if batch in self.cached:
            return self.cached.pop(batch)
        return self.launches.run([batch], measure=False).attempts[0]


class _Checks:
    """check(n) for confirm_edge: a fresh launch at n; with throughput on, B also runs the timed steps."""

    def __init__(self, launches: _Launches, measure: bool) -> None:
        self.launches, self.measure = launches, measure
        self.measurements: dict[int, dict[str, Any]] = {}

    def __call__(self, batch: int) -> Attempt:
        result = self.launches.run([batch], measure=self.measure)
        attempt = result.attempts[0]
        if not (attempt.fits and self.measure):
            return attempt
        measured = result.measure or {"outcome": ERROR, "error": "no measurement came back"}
        if measured.get("outcome") == FIT:
            self.measurements[batch] = measured
            return attempt
        return Attempt(batch, measured.get("outcome", ERROR), measured.get("peak_allocated"), measured.get("peak_reserved"),
                       attempt.seconds, f"ran the {self.launches.opts.steps}-step trial, then failed in the timed run "
                       f"(step {measured.get('failed_at_step')}): {str(measured.get('error', ''))[:200]}",
                       fresh=True, wall_seconds=attempt.wall_seconds, trial_fit=True)


def _baseline(launches: _Launches, batch: int, group: dict[str, Any] | None) -> dict[str, Any]:
    """Time one GPU (1 rank, no wrapper) at `batch`; halve the common batch while it does not fit."""
    note = ""
    for _ in range(BASELINE_HALVINGS + 1):
        single = launches.run([batch], measure=True, world_size=1, strategy=NONE).measure
        if single and single.get("outcome") == FIT and group and group.get("outcome") == FIT:
            return scaling_record(launches.world_size, batch, group, single, note)
        if group is None or group.get("outcome") != FIT or batch <= 1:
            return scaling_record(launches.world_size, batch, group, single, note or "a timed run did not complete")
        note = (f"per-GPU max batch does not train on one GPU ({single and single.get('outcome')}); "
                f"both timed at batch {batch // 2}")
        batch //= 2
        group = launches.run([batch], measure=True).measure
    return scaling_record(launches.world_size, batch, group, None, note)


def scan_precision_distributed(workload: Workload, precision: str, opts: ScanOptions, world_size: int, strategy: str,
                               progress: Progress, launcher: Launcher = launch,
                               start: PredictedStart | None = None) -> tuple[PrecisionResult, dict | None]:
    """Search, prove and time one precision on `world_size` GPUs; returns the result and rank 0's setup record.
    `start` gives the search a predicted first batch (predict --gpus N, on the CPU)."""
    label = f"{world_size}x{strategy}"
    result = PrecisionResult(precision, status="running")
    launches = _Launches(workload, precision, opts, world_size, strategy, progress, launcher, label)
    started, started_at = time.perf_counter(), time.time()
    trials = _SearchTrials(launches, opts.max_batch)
    setup = trials.first.setup
    result.capacity_bytes = trials.capacity_bytes
    result.settings = {"world_size": world_size, "strategy": strategy, "per_gpu": True,
                       "wrap": (setup or {}).get("wrap"), "task": (setup or {}).get("task"),
                       "weights_bytes": (setup or {}).get("weights_bytes"),
                       "weights_after_wrap_bytes": (setup or {}).get("weights_after_wrap_bytes"),
                       "flags": ((setup or {}).get("environment") or {}).get("flags", {})}
    if setup is None and trials.first.attempts and trials.first.attempts[0].outcome != OOM:
        # No rank got as far as building the model, and not for lack of memory: the launch itself
        # failed (an import, the launcher, NCCL), which says nothing about any batch.
        result.status, result.error = "error", trials.first.attempts[0].message
        return result, None
    hint = (start.hint_for(precision, result.capacity_bytes, result.settings, progress.note, started_at)
            if start else None)
    found = find_max_batch(trials, result.capacity_bytes, opts.max_batch, opts.max_trials,
                           hint=hint.poll if hint else None, on_hint=hint.decided if hint else None)
    result.search_seconds = round(time.perf_counter() - started, 2)
    if hint is not None:
        hint.finish(found, result.search_seconds)
    result.attempts = [replace(a) for a in found.attempts]
    result.memory_model = memory_models(found.attempts)
    result.stop = found.stop
    if found.stop == "error":
        result.status, result.error, result.max_batch = "error", found.error, None
        return result, setup
    checks = _Checks(launches, opts.measure)
    # With throughput on, a check of a fit also runs the timed steps, which the search's launches did not.
    known = reusable_checks(found.attempts, checks.measurements if opts.measure else None)
    edge = confirm_edge(checks, found, opts.fresh_checks, opts.max_batch, known)
    result.max_batch = edge.max_batch
    result.proof = proof_record(edge, found, known)
    if result.proof.non_monotone:
        progress.note(result.proof.non_monotone["note"])
    result.proof.fit_check = (f"{opts.steps} steps on each of {world_size} ranks in a fresh process group"
                                 + (f", then {opts.warmup} warm-up + {opts.timed_steps} timed steps" if opts.measure else ""))
    result.proof.seconds = round(time.perf_counter() - started - result.search_seconds, 2)
    if not edge.agreed:
        progress.note(f"fresh check moved the per-GPU edge: search {found.max_batch}, fresh {edge.max_batch}")
    if opts.measure and edge.max_batch > 0:
        measured = checks.measurements.get(edge.max_batch)
        if measured is None:
            measured = launches.run([edge.max_batch], measure=True).measure
        result.throughput = Timed.from_dict(measured) if measured is not None else None
        result.settings["scaling"] = _baseline(launches, edge.max_batch, measured)
    result.status = "done"
    return result, setup


def distributed_environment(world_size: int, strategy: str, device: str, setup: dict | None) -> dict[str, Any]:
    """What a multi-GPU result file records about the group: world size, strategy, backend, NCCL
    version and NCCL_* variables in force, and the GPUs' interconnect."""
    env = launch_env()
    facts: dict[str, Any] = {"world_size": world_size, "strategy": strategy,
                             "backend": "nccl" if device == "cuda" else "gloo",
                             "launcher": "torch.distributed.run (torchrun) --standalone",
                             "nccl_version": ((setup or {}).get("environment") or {}).get("nccl_version"),
                             "nccl_env": nccl_env(env)}
    if device == "cuda":
        facts["interconnect"] = interconnect(visible_indices(world_size, env.get("CUDA_VISIBLE_DEVICES")))
    return facts


def scan_distributed(workload: Workload, opts: ScanOptions, world_size: int, strategy: str, out_dir: str | Path,
                     progress: Progress, launcher: Launcher = launch) -> tuple[ScanResult, Path]:
    """Scan every requested precision of one workload on `world_size` GPUs under `strategy`, writing
    the result file after each. Raises DistributedScanError for unsupported options; on
    KeyboardInterrupt writes what finished, marked partial, and raises ScanInterrupted."""
    check_options(opts, world_size, strategy)
    try:
        check_workload(workload)
    except StrategyError as exc:
        raise DistributedScanError(str(exc)) from None
    result = ScanResult(workload=workload.to_dict(), environment=host_environment(),
                        settings=opts.to_dict() | {"world_size": world_size, "strategy": strategy})
    state: dict[str, Any] = {"path": None, "env": False}

    def save() -> None:
        if state["path"] is None:
            gpu = result.gpu_name(unknown=opts.device)
            state["path"] = Path(out_dir) / result_filename(f"{world_size}x {gpu}", f"{workload.name}-{strategy}", opts.mode)
        write_result(result, state["path"])

    start = (PredictedStart(workload, opts.precisions, opts.steps, world=(world_size, strategy))
             if opts.uses_predicted_start else None)
    try:
        with start or nullcontext():
            _scan_precisions(workload, opts, world_size, strategy, progress, launcher, start, result, state, save)
    except KeyboardInterrupt:
        raise interrupted(result, save, state) from None
    return result, state["path"]


def _scan_precisions(workload: Workload, opts: ScanOptions, world_size: int, strategy: str, progress: Progress,
                     launcher: Launcher, start: PredictedStart | None, result: ScanResult, state: dict[str, Any],
                     save: Any) -> None:
    """scan_distributed's loop over the precisions, saving after each."""
    for precision in opts.precisions:
        progress.precision_start(workload.name, f"{precision} on {world_size} GPUs ({strategy})")
        result.precisions[precision] = PrecisionResult(precision, status="running")
        precision_result, setup = scan_precision_distributed(workload, precision, opts, world_size, strategy,
                                                             progress, launcher, start)
        result.precisions[precision] = precision_result
        if not state["env"] and setup is not None:
            state["env"] = True
            result.environment.update(setup.get("environment") or {})
            result.environment["distributed"] = distributed_environment(world_size, strategy, opts.device, setup)
        save()
    result.status = final_status(result.precisions)  # failed when every precision ended in an error
    save()


def gpu_count(visible: str | None = None) -> int:
    """How many GPUs the ranks may use: CUDA_VISIBLE_DEVICES's entries when set, else NVML's count.
    Raises NoGPUError without a driver."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if visible is not None and visible.strip():
        return len([v for v in visible.split(",") if v.strip()])
    from memprobe.probe.device import gpus

    return len(gpus())
