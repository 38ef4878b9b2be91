"""The scan pipeline over a trial back-end: search -> proof -> soak -> timed runs -> curve -> result file.

No torch here: every step runs in the back-end's trial processes (probe/backend.py: one GPU or torchrun ranks),
so every scan option means the same on one GPU and on N. The result file has one writer (ResultWriter): it is
rewritten atomically after each precision, with whatever the scan records (the nothing-fits explanation
included), so an interrupted scan keeps what it finished and every entry point writes the same file.
"""

from __future__ import annotations

import copy
import time
from contextlib import AbstractContextManager, closing, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from memprobe.core.cards.catalog import peak_tflops
from memprobe.core.cards.memcap import emulated_name
from memprobe.core.estimates.memory_model import Attempt, MemoryModel, edge_model, fit_memory_model
from memprobe.core.process.outcomes import FIT, STOPPING
from memprobe.core.process.protocol import Flops
from memprobe.core.records.generation import generation_record, settings_of
from memprobe.core.records.records import Timed
from memprobe.core.records.results import PrecisionResult, ScanResult, final_status, write_result
from memprobe.core.text.edge_text import edge_text
from memprobe.core.workload.registry import Workload
from memprobe.probe.backend import ScanProgress, TrialBackend
from memprobe.probe.curve_run import add_curve
from memprobe.probe.hint import PrecisionHint, PredictedStart
from memprobe.probe.nothing_fits import explain_precision
from memprobe.probe.options import ScanOptions
from memprobe.probe.proof import EdgeCheck, confirm_edge, proof_record, reusable_checks, unverified_reason
from memprobe.probe.search import HintUse, find_max_batch
from memprobe.probe.soak import soak_max_batch

OnEnvironment = Callable[[dict[str, Any]], None]


@dataclass
class Stage:
    """Where a precision is (search, proof, soak, timed, scaling, curve) and the proof's checks, for an interruption."""

    at: str = "search"
    checks: list[Attempt] = field(default_factory=list)
    reused: list[int] = field(default_factory=list)


class ScanInterrupted(KeyboardInterrupt):
    """Ctrl-C during a scan. `path` is the partial result file written, or None if none finished."""

    def __init__(self, path: Path | None) -> None:
        super().__init__()
        self.path = path


class PrecisionInterrupted(KeyboardInterrupt):
    """Ctrl-C or a signal during a precision: `result` is what it finished. Its trials so far (search trials,
    fresh checks) are kept; status "interrupted", or "done" once B was proven and timed (the 1-GPU baseline or
    the curve stopped); `settings.interrupted_at` names the stage (search, proof, soak, timed, scaling, curve)."""

    def __init__(self, result: PrecisionResult) -> None:
        super().__init__()
        self.result = result


class CurveInterrupted(PrecisionInterrupted):
    """Ctrl-C during a precision's throughput curve: `result` is the precision, done but for the curve."""


class _Recorded:
    """The search's trials, each answer also kept in `attempts` as it comes (what an interrupted search ran)."""

    def __init__(self, trials: Any) -> None:
        self.trials = trials
        self.attempts: list[Attempt] = []

    @property
    def predicted(self) -> int | None:
        return self.trials.predicted

    @predicted.setter
    def predicted(self, batch: int | None) -> None:
        self.trials.predicted = batch

    def __call__(self, batch: int) -> Attempt:
        attempt = self.trials(batch)
        self.attempts.append(attempt)
        return attempt

    def kill(self) -> None:
        self.trials.kill()

    def close(self) -> None:
        self.trials.close()


def reported(attempt: Attempt, progress: ScanProgress, started: float) -> Attempt:
    """Stamp the attempt with its place on the precision's timeline (perf_counter `started`) and report it."""
    attempt.done_at_s = round(time.perf_counter() - started, 3)
    progress.trial_end(attempt)
    return attempt


def memory_models(attempts: list[Attempt]) -> dict[str, MemoryModel]:
    """Static and per-sample bytes fitted on every successful trial, by allocated and reserved peaks."""
    models = {}
    for basis in ("peak_allocated", "peak_reserved"):
        model = fit_memory_model(attempts, basis=basis)
        if model is not None:
            models[basis] = model
    return models


def add_mfu(measured: Timed | None, flops_per_sample: float | None, gpu: str, precision: str) -> None:
    """Add achieved TFLOP/s and MFU (against the catalog's dense peak for this GPU and precision) to a
    timed run, in place. Without a FLOP count or a known peak, `mfu` is None and `mfu_note` says why."""
    if measured is None or measured.outcome != FIT:
        return
    flops_per_sample = measured.flops_per_sample or flops_per_sample  # counted at its own n, where it varies
    if not flops_per_sample:
        measured.mfu, measured.mfu_note = None, "no FLOP count for this workload"
        return
    achieved = flops_per_sample * (measured.samples_per_s or 0.0) / 1e12
    peak = peak_tflops(gpu, precision)
    measured.flops_per_sample, measured.achieved_tflops, measured.peak_tflops = flops_per_sample, achieved, peak
    measured.mfu = achieved / peak if peak else None
    if not peak:
        measured.mfu_note = f"no dense {precision} peak for '{gpu}' in memprobe's GPU catalog"


def run_precision(
    backend: TrialBackend,
    workload: Workload,
    precision: str,
    opts: ScanOptions,
    progress: ScanProgress,
    on_environment: OnEnvironment,
    start: PredictedStart | None = None,
) -> PrecisionResult:
    """Search, prove, soak, time and curve one precision over `backend`; `start` predicts the max batch beside the
    search (polled, never waited for). Raises what the back-end's open raises (NoCudaError: no CUDA device) and
    CurveInterrupted on Ctrl-C during the curve (B proven and timed)."""
    with closing(backend):  # its processes end whatever happens
        result = PrecisionResult(precision, status="running")
        started, started_at = time.perf_counter(), time.time()
        seen: dict[str, Any] = {}
        stage = Stage()

        def environment(env: dict[str, Any]) -> None:
            seen.update(env)
            on_environment(env)

        if not backend.open(result, environment):
            return result
        if backend.counts_flops:
            flops = backend.flops() if opts.measure else Flops()
            result.settings.flops_per_sample = flops.flops_per_sample
            if flops.error:
                result.settings.flops_error = flops.error
        trials = _Recorded(backend.search_trials())
        hint = (
            start.hint_for(precision, result.capacity_bytes, result.settings, progress.note, started_at)
            if start
            else None
        )
        try:
            found = find_max_batch(
                trials,
                result.capacity_bytes,
                opts.max_batch,
                opts.max_trials,
                hint=hint.poll if hint else None,
                on_hint=_on_hint(hint, trials),
            )
        except BaseException as exc:
            trials.kill()  # interrupted: do not wait for the shared process's running steps
            if isinstance(exc, KeyboardInterrupt):
                raise _interrupted(result, "search", trials.attempts, started) from None
            raise
        finally:
            trials.close()
        result.search_seconds = round(time.perf_counter() - started, 2)
        if hint is not None:
            hint.finish(found, result.search_seconds)
        result.attempts = [replace(a) for a in found.attempts]  # copies: the records the file keeps
        result.memory_model = memory_models(found.attempts)
        result.stop = found.stop
        if found.stop in STOPPING:
            result.status, result.error, result.max_batch = "error", found.error, None
            return result
        try:
            _proven(backend, result, found, workload, opts, progress, seen, started, stage)
        except CurveInterrupted:
            raise
        except KeyboardInterrupt:
            if stage.at == "proof":
                edge = EdgeCheck(
                    found.max_batch, None, None, False, False, list(stage.checks), list(stage.reused), opts.repeat
                )
                edge.ended_by = "interrupted"
                result.proof = proof_record(edge, found)
                result.proof.fit_check = backend.fit_check()
            raise _interrupted(result, stage.at, None, started, opts.measure) from None
        return result


def _interrupted(
    result: PrecisionResult, stage: str, attempts: list[Attempt] | None, started: float, measure: bool = True
) -> PrecisionInterrupted:
    """The PrecisionInterrupted of a precision stopped at `stage`, keeping what it finished (`attempts`: the
    search's trials so far, where the search was stopped; `measure`: whether B is timed in this scan)."""
    if attempts is not None:
        result.attempts = [replace(a) for a in attempts]
        result.memory_model = memory_models(attempts)
        result.search_seconds = round(time.perf_counter() - started, 2)
    result.settings.interrupted_at = stage
    # B proven and timed, only the scaling baseline or the curve left: the precision is done but for them.
    timed = result.max_batch is not None and (result.throughput is not None or not measure)
    result.status = "done" if stage in ("scaling", "curve") and timed else "interrupted"
    return PrecisionInterrupted(result)


def _proven(
    backend: TrialBackend,
    result: PrecisionResult,
    found: Any,
    workload: Workload,
    opts: ScanOptions,
    progress: ScanProgress,
    seen: dict[str, Any],
    started: float,
    stage: Stage,
) -> None:
    """After the search: the proof, the soak, the timed runs and the curve; `stage` says where it is (and holds
    the proof's checks so far), for an interruption."""
    # A fresh search trial is a fresh check by the same definition where it ran what a check runs (with
    # throughput on, a fit the search thought could be B went on to the timed run), so the proof takes it
    # instead of building that batch size again.
    known = reusable_checks(found.attempts, backend.measurements if opts.measure else None)
    stage.at = "proof"
    unused, reused = dict(known), stage.reused

    def check(batch: int) -> Attempt:
        # The search trials taken as checks are handed out here rather than by confirm_edge, so that an
        # interrupted proof knows every check it had (stage.checks).
        if batch in unused:
            attempt = unused.pop(batch)
            reused.append(batch)
        else:
            attempt = backend.check(batch)
        stage.checks.append(attempt)
        return attempt

    # The search's fresh fits that are not checks still bound the proof's walk down (bert-large fp16 DDP on 4 H100s:
    # 100 fitted fresh in the search, the served group then fitted up to 104, and the walk down from 105 went on
    # to 97 before it bisected back up to 100).
    fresh_fits = [a.batch for a in found.attempts if a.fresh and a.fits]
    edge = confirm_edge(
        check,
        found,
        opts.fresh_checks,
        opts.max_batch,
        fresh_fits=fresh_fits,
        repeat=opts.repeat,
        budget_s=opts.edge_budget_s,
    )
    edge.reused = list(reused)
    result.max_batch = edge.max_batch
    result.proof = proof_record(edge, found, known)
    result.proof.fit_check = backend.fit_check()
    result.proof.seconds = round(time.perf_counter() - started - (result.search_seconds or 0.0), 2)
    if not edge.agreed:
        progress.note(
            f"fresh-process check moved the edge: search {found.max_batch}, fresh {edge.max_batch}"
            + ("" if edge.verified else f" (not verified: {unverified_reason(edge)})")
        )
    if result.proof.non_monotone:
        progress.note(result.proof.non_monotone["note"])
    if edge.repeat > 1 or result.proof.band is not None:
        progress.note(f"fresh runs: {edge_text(edge.max_batch, result.proof)}")
    if opts.soak and edge.max_batch > 0:
        stage.at = "soak"
        result.max_batch = soak_max_batch(result.proof, result.max_batch, opts.soak, backend.soak, progress.note)
    stage.at = "timed"
    _timed_runs(backend, result, opts, progress, str((seen.get("gpu") or {}).get("name") or ""), stage)
    _generation(result, workload, seen)
    result.status = "done"
    if opts.measure and opts.curve and edge.max_batch > 0:
        stage.at = "curve"
        try:
            add_curve(
                result,
                backend.curve_timer(edge_model(found.attempts), result.capacity_bytes, result.max_batch),
                workload,
                opts,
                progress.note,
            )
        except KeyboardInterrupt:
            # B is proven and timed: keep the precision, with the curve points timed before Ctrl-C
            result.settings.curve_interrupted = True
            result.settings.interrupted_at = "curve"
            raise CurveInterrupted(result) from None


def _generation(result: PrecisionResult, workload: Workload, seen: dict[str, Any]) -> None:
    """A generation's record at B (core/records/generation.py): the KV cache, the peak by category, the KV capacity."""
    settings = settings_of(workload)
    if settings is None or not result.max_batch:
        return
    task = result.settings.task
    per_token = task.extra.get("kv_bytes_per_token") if task is not None else None
    fit = next((c for c in reversed(result.checks) if c.batch == result.max_batch and c.fits), None)
    result.generation = generation_record(
        settings,
        result.max_batch,
        per_token,
        result.settings.weights_bytes,
        result.capacity_bytes,
        (seen.get("gpu") or {}).get("total_bytes"),
        result.throughput,
        (fit.peak_allocated, fit.peak_reserved) if fit is not None else (None, None),
    )


def _on_hint(hint: PrecisionHint | None, trials: Any) -> Callable[[HintUse], None] | None:
    """The search's on_hint: record the decision, and tell the trials which batch is the predicted max batch."""
    if hint is None:
        return None

    def on_hint(use: HintUse) -> None:
        hint.decided(use)
        if use.used:
            trials.predicted = use.batch  # likely B: its fresh fit goes on to the timed run

    return on_hint


def _timed_runs(
    backend: TrialBackend,
    result: PrecisionResult,
    opts: ScanOptions,
    progress: ScanProgress,
    gpu: str,
    stage: Stage,
) -> None:
    """The throughput at B, the requested batches (--batch), their MFU, then what the back-end adds (scaling;
    `stage` says so, for an interruption)."""
    if opts.measure and result.max_batch:
        measured = backend.measurements.get(result.max_batch)
        if measured is None:  # not proven fresh (check limit, batch cap, soak): time it now
            measured = backend.measure(result.max_batch)
        result.throughput = copy.deepcopy(measured)  # the file's record, completed in place below (add_mfu)
    for batch in opts.batches:
        if batch in backend.measurements:  # timed fresh already, the same way
            progress.note(f"requested batch {batch}: the timed run of its fresh trial")
            result.extra_batches.append(copy.deepcopy(backend.measurements[batch]))
            continue
        progress.note(f"timing {opts.timed_steps} steps at requested batch {batch}")
        result.extra_batches.append(backend.measure(batch))
    if backend.counts_flops:
        for measured in [result.throughput, *result.extra_batches]:
            add_mfu(measured, result.settings.flops_per_sample, gpu, result.precision)
    stage.at = "scaling"
    backend.finish(result)


class ResultWriter:
    """The one writer of a scan's result file: named on its first save (`filename(gpu name or None)`), then
    rewritten atomically in place."""

    def __init__(self, result: ScanResult, out_dir: str | Path, filename: Callable[[str | None], str]) -> None:
        self.result, self.out_dir, self.filename = result, Path(out_dir), filename
        self.path: Path | None = None

    def save(self) -> None:
        if self.path is None:
            self.path = self.out_dir / self.filename(self.result.gpu_name(unknown="") or None)
        write_result(self.result, self.path)

    def interrupted(self) -> ScanInterrupted:
        """Mark a stopped scan: running precisions become interrupted and the file is saved (partial) when any
        precision finished or ran a trial. Returns the ScanInterrupted to raise, naming the file (None when none
        was written)."""
        for p in self.result.precisions.values():
            if p.status == "running":
                p.status = "interrupted"
        self.result.settings.interrupted = True
        if any(p.status in ("done", "error") or p.attempts for p in self.result.precisions.values()):
            self.save()
        return ScanInterrupted(self.path)


def scan_precisions(
    workload: Workload,
    opts: ScanOptions,
    writer: ResultWriter,
    progress: ScanProgress,
    run_one: Callable[[str, PredictedStart | None, OnEnvironment], PrecisionResult],
    label: Callable[[str], str] = str,
    start: PredictedStart | None = None,
) -> tuple[ScanResult, Path]:
    """Run `run_one(precision, start, on_environment)` for every precision, explain a precision where nothing
    trains at 1 (a traced need, in a child process), and save after each. Returns the result and its path. On
    KeyboardInterrupt writes what finished, marked partial, and raises ScanInterrupted."""
    result = writer.result
    seen = {"env": False}

    def on_environment(env: dict[str, Any]) -> None:
        if seen["env"]:
            return
        seen["env"] = True
        result.environment.merge(env)  # the GPU read as a record of its own, not the worker's dict
        emulation = env.get("emulation")
        gpu = result.environment.gpu
        if emulation and gpu is not None:
            # Label the card as what it emulates, so no report takes it for the real card.
            gpu.real_name = gpu.name
            gpu.name = emulated_name(gpu.name, emulation["memory_cap_bytes"])
            gpu.emulated_total_bytes = emulation["memory_cap_bytes"]

    context: AbstractContextManager[Any] = start if start is not None else nullcontext()
    try:
        with context:
            for precision in opts.precisions:
                progress.precision_start(workload.name, label(precision))
                result.precisions[precision] = PrecisionResult(precision, status="running")
                result.precisions[precision] = run_one(precision, start, on_environment)
                _explain(result, precision, workload, progress, opts.env)
                writer.save()
        result.status = final_status(result.precisions)  # failed when every precision ended in an error
        writer.save()
    except KeyboardInterrupt as stop:
        if isinstance(stop, PrecisionInterrupted):
            result.precisions[stop.result.precision] = stop.result
        raise writer.interrupted() from None
    assert writer.path is not None
    return result, writer.path


def _explain(
    result: ScanResult, precision: str, workload: Workload, progress: ScanProgress, env: dict[str, str]
) -> None:
    """Where nothing trains at n = 1, trace the need (no GPU used; the child gets `env`, ScanOptions.env) and record
    it in the precision's settings."""
    p = result.precisions[precision]
    if p.status == "done" and p.max_batch == 0:
        what = "generates" if result.mode == "generate" else "trains"
        progress.note(f"nothing {what} at 1: tracing what it would need (no GPU used) ...")
        explain_precision(result, precision, workload, env=env)
