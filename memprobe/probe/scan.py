"""Scan one workload in each precision: search the max batch, prove it fresh, measure throughput.

No torch here: all GPU work happens in trial processes (runner.Worker). The result file is
rewritten atomically after every precision, so an interrupted scan keeps what it finished.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Protocol

from memprobe.core.catalog import peak_tflops
from memprobe.probe.device import host_environment
from memprobe.core.memcap import emulated_name
from memprobe.core.outcomes import FIT, OOM, STOPPING, USER_ERROR
from memprobe.core.registry import Workload
from memprobe.core.results import PrecisionResult, ScanResult, final_status, result_filename, write_result
from memprobe.probe.runner import WorkerError, WorkerFactory, WorkerSpec
from memprobe.probe.hint import PredictedStart
from memprobe.probe.setup_failure import record_setup_oom
from memprobe.probe.soak import soak_max_batch
from memprobe.probe.curve_run import add_curve
# ScanOptions and its constants are re-exported: callers import them from here.
from memprobe.probe.options import (  # noqa: F401
    CURVE_TIMED_STEPS, CURVE_WARMUP, INFER_TRIAL_STEPS, INFER_WARMUP, MODES, ScanOptions,
)
from memprobe.probe.breakdown_run import measure_at_max
from memprobe.probe.proof import confirm_edge, proof_record, reusable_checks
from memprobe.probe.scan_trials import FRESH_ABOVE_SHARE, FreshRuns, SearchTrials, in_fresh_process, measure_fresh
from memprobe.core.memory_model import Attempt, edge_model, fit_memory_model
from memprobe.probe.search import HintUse, find_max_batch

class NoCudaError(RuntimeError):
    """The trial process found no usable CUDA device."""


class ScanInterrupted(KeyboardInterrupt):
    """Ctrl-C during a scan. `path` is the partial result file written, or None if none finished."""

    def __init__(self, path: Path | None) -> None:
        super().__init__()
        self.path = path


class CurveInterrupted(KeyboardInterrupt):
    """Ctrl-C during a precision's throughput curve: `result` is the precision, done but for the curve."""

    def __init__(self, result: PrecisionResult) -> None:
        super().__init__()
        self.result = result


def interrupted(result: ScanResult, save: Callable[[], None], state: dict[str, Any]) -> ScanInterrupted:
    """Mark a stopped scan: running precisions become interrupted and the file is saved (partial) when any
    precision finished. Returns the ScanInterrupted to raise, naming the file (None when none was written)."""
    for p in result.precisions.values():
        if p.status == "running":
            p.status = "interrupted"
    result.settings["interrupted"] = True
    if any(p.status in ("done", "error") for p in result.precisions.values()):
        save()
    return ScanInterrupted(state["path"])


class Progress(Protocol):
    def precision_start(self, workload: str, precision: str) -> None: ...
    def trial_start(self, workload: str, precision: str, index: int, batch: int, fresh: bool) -> None: ...
    def trial_end(self, attempt: Attempt) -> None: ...
    def note(self, text: str) -> None: ...


def memory_models(attempts: list[Attempt]) -> dict[str, Any]:
    """Static and per-sample bytes fitted on every successful trial, by allocated and reserved peaks."""
    models = {}
    for basis in ("peak_allocated", "peak_reserved"):
        model = fit_memory_model(attempts, basis=basis)
        if model is not None:
            models[basis] = model.to_dict()
    return models


def scan_precision(workload: Workload, precision: str, opts: ScanOptions, factory: WorkerFactory,
                   progress: Progress, on_environment: Callable[[dict[str, Any]], None],
                   start: PredictedStart | None = None) -> PrecisionResult:
    """Search, prove and measure one precision; `start` predicts the max batch beside the search (polled, never waited for).
    Raises NoCudaError when there is no CUDA device."""
    result = PrecisionResult(precision, status="running")
    spec = WorkerSpec(workload, precision, opts.mode, opts.device, opts.cpu_budget_bytes,
                      {"cudnn_benchmark": opts.cudnn_benchmark, "memory_cap_bytes": opts.memory_cap_bytes,
                       "compile": opts.compile},
                      opts.timeout_s)
    counter = {"n": 0}

    def announce(batch: int, fresh: bool) -> None:
        counter["n"] += 1
        progress.trial_start(workload.name, precision, counter["n"], batch, fresh)

    started, started_at = time.perf_counter(), time.time()
    try:
        worker = factory.fresh(spec)  # the first waits for the fork server's imports
    except WorkerError as exc:
        if exc.kind == "no_cuda":
            raise NoCudaError(str(exc)) from exc
        if exc.kind == OOM:
            return record_setup_oom(result, exc, opts.device)
        result.status, result.error = "error", str(exc)
        if exc.kind == USER_ERROR:  # the user's build raised or the name cannot be built: no trial ran
            result.stop = USER_ERROR
        return result
    emulation = worker.info.get("emulation")
    on_environment({**worker.info["environment"], "emulation": emulation} if emulation else worker.info["environment"])
    result.capacity_bytes = worker.info.get("capacity_bytes")
    result.settings = {"task": worker.info.get("task", {}), "flags": worker.info["environment"].get("flags", {}),
                       "weights_bytes": worker.info.get("weights_bytes"), "build_seconds": worker.info.get("build_seconds"),
                       "cuda_init_seconds": worker.info.get("cuda_init_seconds"),
                       "first_process_ready_seconds": round(time.perf_counter() - started, 3),
                       "emulation": emulation}

    flops = worker.flops() if opts.measure else {}
    result.settings["flops_per_sample"] = flops.get("flops_per_sample")
    if flops.get("error"):
        result.settings["flops_error"] = flops["error"]
    fresh = FreshRuns(factory, spec, opts, announce)
    trials = SearchTrials(fresh, worker, result.capacity_bytes)
    hint = (start.hint_for(precision, result.capacity_bytes, result.settings, progress.note, started_at)
            if start else None)

    def on_hint(use: HintUse) -> None:
        assert hint is not None
        hint.decided(use)
        if use.used:
            trials.predicted = use.batch  # likely B: its fresh fit goes on to the timed run

    try:
        found = find_max_batch(trials, result.capacity_bytes, opts.max_batch, opts.max_trials,
                               on_attempt=lambda a: _reported(a, progress, started),
                               hint=hint.poll if hint else None, on_hint=on_hint)
    except BaseException:
        trials.kill()  # interrupted: do not wait for the shared process's running steps
        raise
    finally:
        trials.close()
    result.search_seconds = round(time.perf_counter() - started, 2)
    if hint is not None:
        hint.finish(found, result.search_seconds)
    result.attempts = [a.to_dict() for a in found.attempts]
    result.memory_model = memory_models(found.attempts)
    result.stop = found.stop
    if found.stop in STOPPING:
        result.status, result.error, result.max_batch = "error", found.error, None
        return result

    # A fresh search trial is a fresh check by the same definition where it ran what a check runs (with
    # throughput on, a fit the search thought could be B went on to the timed run), so the proof takes it
    # instead of building that batch size again.
    known = reusable_checks(found.attempts, fresh.measurements if opts.measure else None)
    edge = confirm_edge(lambda n: _reported(fresh(n), progress, started), found, opts.fresh_checks, opts.max_batch,
                        known)
    result.max_batch = edge.max_batch
    result.proof = proof_record(edge, found, known)
    result.proof["fit_check"] = (f"{opts.trial_steps} steps (1 warm-up + {opts.trial_steps - 1})"
                                 + (f", then in the same run 1 more warm-up + {opts.timed_steps} timed steps"
                                    + (f" (fewer past {opts.timed_budget_s:g} s)" if opts.timed_budget_s else "")
                                    if opts.measure else ""))
    result.proof["seconds"] = round(time.perf_counter() - started - result.search_seconds, 2)
    if not edge.agreed:
        progress.note(f"fresh-process check moved the edge: search {found.max_batch}, fresh {edge.max_batch}"
                      + ("" if edge.verified else " (not verified within the check limit)"))
    if "non_monotone" in result.proof:
        progress.note(result.proof["non_monotone"]["note"])
    if opts.soak and edge.max_batch > 0:
        def soak_run(batch: int, steps: int) -> Attempt:
            announce(batch, True)
            return _reported(in_fresh_process(factory, spec, batch, lambda worker: worker.trial(batch, steps)),
                             progress, started)

        result.max_batch = soak_max_batch(result.proof, result.max_batch, opts.soak, soak_run, progress.note)
    if opts.measure and result.max_batch > 0:
        result.throughput = fresh.measurements.get(result.max_batch)
        if result.throughput is None:  # not proven fresh (check limit, batch cap, soak): time it now
            result.throughput = measure_fresh(factory, spec, result.max_batch, opts)
    for batch in opts.batches:
        if batch in fresh.measurements:  # timed fresh already, the same way
            progress.note(f"requested batch {batch}: the timed run of its fresh trial")
            result.extra_batches.append(dict(fresh.measurements[batch]))
            continue
        progress.note(f"timing {opts.timed_steps} steps at requested batch {batch}")
        result.extra_batches.append(measure_fresh(factory, spec, batch, opts))
    if opts.measures_breakdown and result.max_batch > 0:
        measure_at_max(factory, spec, result, opts.trial_steps, progress.note)
    gpu = worker.info["environment"].get("gpu", {}).get("name", "")
    for measured in [result.throughput, *result.extra_batches]:
        add_mfu(measured, result.settings["flops_per_sample"], gpu, precision)
    result.status = "done"
    if opts.measure and opts.curve and edge.max_batch > 0:
        try:
            add_curve(result, factory, spec, opts, edge_model(found.attempts),
                      FRESH_ABOVE_SHARE * result.capacity_bytes if result.capacity_bytes else None, progress.note)
        except KeyboardInterrupt:
            # B is proven and timed: keep the precision, with the curve points timed before Ctrl-C
            result.settings["curve_interrupted"] = True
            raise CurveInterrupted(result) from None
    return result


def add_mfu(measured: dict[str, Any] | None, flops_per_sample: float | None, gpu: str, precision: str) -> None:
    """Add achieved TFLOP/s and MFU (against the catalog's dense peak for this GPU and precision) to a
    timed run, in place. Without a FLOP count or a known peak, `mfu` is None and `mfu_note` says why."""
    if not measured or measured.get("outcome") != FIT:
        return
    flops_per_sample = measured.get("flops_per_sample") or flops_per_sample  # counted at its own n, where it varies
    if not flops_per_sample:
        measured.update(mfu=None, mfu_note="no FLOP count for this workload")
        return
    achieved = flops_per_sample * measured["samples_per_s"] / 1e12
    peak = peak_tflops(gpu, precision)
    measured.update(flops_per_sample=flops_per_sample, achieved_tflops=achieved, peak_tflops=peak,
                    mfu=achieved / peak if peak else None)
    if not peak:
        measured["mfu_note"] = f"no dense {precision} peak for '{gpu}' in memprobe's GPU catalog"


def _reported(attempt: Attempt, progress: Progress, started: float) -> Attempt:
    """Stamp the attempt with its place on the precision's timeline (perf_counter `started`) and report it."""
    attempt.done_at_s = round(time.perf_counter() - started, 3)
    progress.trial_end(attempt)
    return attempt


def scan_workload(workload: Workload, opts: ScanOptions, out_dir: str | Path, progress: Progress) -> tuple[ScanResult, Path]:
    """Scan every requested precision of one workload, writing the result file after each.

    Returns the result and its path. Raises NoCudaError (nothing written) when there is no CUDA
    device; on KeyboardInterrupt writes what finished, marked partial, and re-raises.
    """
    result = ScanResult(workload=workload.to_dict(), environment=host_environment(), settings=opts.to_dict())
    factory = WorkerFactory(workload)
    state: dict[str, Any] = {"path": None, "env_seen": False}

    def on_environment(env: dict[str, Any]) -> None:
        if not state["env_seen"]:
            state["env_seen"] = True
            result.environment.update(env)
            emulation = env.get("emulation")
            if emulation:
                # Label the card as what it emulates, so no report takes it for the real card.
                gpu = result.environment["gpu"] = dict(result.environment["gpu"])  # not the worker's dict
                gpu["real_name"] = gpu["name"]
                gpu["name"] = emulated_name(gpu["name"], emulation["memory_cap_bytes"])
                gpu["emulated_total_bytes"] = emulation["memory_cap_bytes"]

    def save() -> None:
        if state["path"] is None:
            gpu = result.environment.get("gpu", {}).get("name") or _nvml_gpu_name(opts.device)
            state["path"] = Path(out_dir) / result_filename(gpu, workload.name, opts.mode)
        write_result(result, state["path"])

    start = (PredictedStart(workload, opts.precisions, opts.trial_steps, mode=opts.mode)
             if opts.uses_predicted_start else None)
    try:
        with start or nullcontext():
            for precision in opts.precisions:
                progress.precision_start(workload.name, precision)
                result.precisions[precision] = PrecisionResult(precision, status="running")
                result.precisions[precision] = scan_precision(workload, precision, opts, factory, progress, on_environment,
                                                              start)
                save()
        result.status = final_status(result.precisions)
        save()
    except KeyboardInterrupt as stop:
        if isinstance(stop, CurveInterrupted):
            result.precisions[stop.result.precision] = stop.result
        raise interrupted(result, save, state) from None
    finally:
        factory.close()
    return result, state["path"]


def _nvml_gpu_name(device: str) -> str:
    """The GPU's name from NVML, for file names when no trial process reported one."""
    if device == "cpu":
        return "cpu"
    try:
        from memprobe.probe.device import visible_gpu

        return visible_gpu().name
    except Exception:  # noqa: BLE001 - only a file name is at stake
        return "unknown-gpu"
