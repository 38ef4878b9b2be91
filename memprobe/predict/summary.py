"""`memprobe predict`: max batch per memory size and precision, compared with a scan, rendered.

The max batch for a memory size is found by replaying the trace with the allocator's capacity set to that
memory minus the non-allocatable overhead measured on a real card (memprobe/overhead.py); a line
peak(b) = static + per_sample x b through the replayed peaks near the edge is reported beside it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from memprobe.probe.errors import FIT
from memprobe.predict.fakecuda import H100, Target
from memprobe.registry import Workload
from memprobe.probe.search import Attempt, MemoryModel, fit_memory_model
from memprobe.units import gib
from memprobe.predict.sessions import trace_sessions
from memprobe.predict.trace import PredictError, TraceSession
from memprobe.predict.batch_model import FIT_BATCHES, PrecisionTraces


@dataclass
class MemorySize:
    """A memory size asked about, and what the allocator can use of it."""

    label: str
    memory_bytes: int
    capacity_bytes: int
    how: str = ""  # where the capacity comes from (overhead.usable_memory), when not from the Prediction's overhead


@dataclass
class PrecisionPrediction:
    precision: str
    model_allocated: MemoryModel | None  # linear fit of the predicted peak allocated bytes near the edge
    model_reserved: MemoryModel | None  # same for peak reserved
    max_batch: dict[str, int]  # memory label -> predicted max batch (replay through the allocator model)
    linear_max_batch: dict[str, int]  # memory label -> what the linear fit of peak reserved says
    peaks: dict[int, tuple[int, int]]  # batch -> (peak allocated, peak reserved), no capacity limit
    how: str  # "checked": extrapolated and checked byte for byte; "unchecked"; "traced": every batch traced
    oom_request: dict[str, int] = field(default_factory=dict)  # memory label -> size of the request that fails at max+1


@dataclass
class ComparisonRow:
    """One measured trial of a scan beside its prediction (replayed with the scan's allocator capacity)."""

    precision: str
    batch: int
    where: str  # "search" (in the scan's search process) or "fresh" (a fresh-process check)
    measured_outcome: str
    measured_allocated: int | None
    measured_reserved: int | None
    predicted_fits: bool
    predicted_allocated: int
    predicted_reserved: int
    predicted_request: int | None  # the failing request when the prediction is an OOM
    measured_message: str


@dataclass
class MaxBatchComparison:
    precision: str
    capacity_bytes: int
    predicted: int
    measured: int | None
    search: tuple[int | None, int | None]  # (fits, fails) found by the scan's search
    fresh: tuple[int | None, int | None]  # (fits, fails) of the fresh-process checks
    trial_fits_fresh: list[int]  # batches whose 3-step trial fit in a fresh process (the timed run may then fail)


@dataclass
class Prediction:
    workload: str
    target: str
    steps: int
    seconds: float
    build_seconds: float
    sizes: list[MemorySize]
    overhead_bytes: int | None
    overhead_source: str
    precisions: dict[str, PrecisionPrediction]
    notes: list[str]
    comparison: list[ComparisonRow] = field(default_factory=list)
    max_batch_comparison: list[MaxBatchComparison] = field(default_factory=list)
    compared_with: str = ""
    world: str = ""  # "2 GPUs, ddp": the figures are per GPU, for rank 0 of a data-parallel group
    mode: str = "train"  # "infer": forward passes only


def _predict_precision(traces: PrecisionTraces, sizes: Sequence[MemorySize]) -> PrecisionPrediction:
    max_batch: dict[str, int] = {}
    oom: dict[str, int] = {}
    for size in sizes:
        found, fail = traces.max_batch(size.capacity_bytes)
        max_batch[size.label] = found
        if fail is not None and fail.oom is not None:
            oom[size.label] = fail.oom.requested
    edge = max(max_batch.values(), default=0)
    batches = {b for b in FIT_BATCHES if b <= max(8, edge)}
    if edge > 8 and traces.model is not None:
        batches.add(edge)
    peaks: dict[int, tuple[int, int]] = {}
    for b in sorted(batches):
        r = traces.peaks(b)
        peaks[b] = (r.peak_allocated, r.peak_reserved)
    attempts = [Attempt(b, FIT, a, r) for b, (a, r) in peaks.items()]
    # Least squares over every replayed batch, as a scan fits its memory_model over its trials.
    fit_alloc = fit_memory_model(attempts, "peak_allocated")
    fit_res = fit_memory_model(attempts, "peak_reserved")
    linear = {s.label: fit_res.max_batch_for(s.capacity_bytes) if fit_res else 0 for s in sizes}
    return PrecisionPrediction(traces.precision, fit_alloc, fit_res, max_batch, linear, peaks, traces.how, oom)


def trial_fit_batches(checks: Sequence[dict]) -> list[int]:
    """Batches whose 3-step trial fitted in a fresh-process check (proof["checks"] of a result file),
    including those whose timed run failed afterwards (scan_trials.FreshRuns says "..., then failed")."""
    return sorted({c["batch"] for c in checks if c.get("outcome") == "fit"
                   or "ran the 3-step trial" in str(c.get("message", "")) or "then failed" in str(c.get("message", ""))})


def _compare(traces: PrecisionTraces, p) -> tuple[list[ComparisonRow], MaxBatchComparison | None]:
    """Predicted vs measured for every trial a scan's precision result recorded, at its capacity."""
    capacity = p.capacity_bytes
    rows = []
    checks = list((p.proof or {}).get("checks") or [])
    for where, attempts in (("search", p.attempts), ("fresh", checks)):
        for a in attempts:
            a = a if isinstance(a, dict) else a.to_dict()
            r = traces.peaks(a["batch"], capacity)
            rows.append(ComparisonRow(
                traces.precision, a["batch"], where, a["outcome"], a.get("peak_allocated"), a.get("peak_reserved"),
                r.fits, r.peak_allocated, r.peak_reserved, r.oom.requested if r.oom else None,
                str(a.get("message", ""))))
    if not capacity:
        return rows, None
    predicted, _ = traces.max_batch(capacity)
    proof = p.proof or {}
    found = proof.get("search") or proof.get("in_process") or {}  # "in_process": files from before fresh search trials
    trial_fits = trial_fit_batches(checks)
    return rows, MaxBatchComparison(traces.precision, capacity, predicted, p.max_batch,
                                    (found.get("fits"), found.get("fails")),
                                    (proof.get("fits"), proof.get("fails")), trial_fits)


def predict(workload: Workload, precisions: Sequence[str], sizes: Sequence[MemorySize], overhead_bytes: int | None,
            overhead_source: str, steps: int = 3, target: Target = H100, check: bool = True,
            compare_with: tuple[str, Any] | None = None, world: Any = None, mode: str = "train") -> Prediction:
    """Trace `workload` in each precision and predict its max batch for each memory size.

    `compare_with` = (path, ScanResult) of a real scan of this workload adds predicted-vs-measured rows.
    `world` (data_parallel.World) predicts per GPU for rank 0 of N data-parallel GPUs: one traced session per
    precision, since the wrapper depends on it. `mode` "infer": forward passes under inference_mode, as a
    `scan --mode infer` trial (its `steps` forward passes). Raises PredictError when the workload cannot be built,
    wrapped or stepped on fake tensors, ValueError for a precision other than fp32/tf32/fp16/bf16.
    """
    for p in precisions:
        if p not in ("fp32", "tf32", "fp16", "bf16"):
            raise ValueError(f"unknown precision '{p}'")
    if world is not None:
        from memprobe.probe.distributed.scan import DistributedScanError, check_workload

        try:
            check_workload(workload)  # what a multi-GPU scan refuses is not predicted either
        except DistributedScanError as exc:
            raise PredictError(str(exc)) from None
    notes: list[str] = []
    results: dict[str, PrecisionPrediction] = {}
    rows: list[ComparisonRow] = []
    edges: list[MaxBatchComparison] = []
    started = time.perf_counter()
    sdpa: dict = {}
    answers: dict = {}
    behaviour_notes: list[str] = []
    sessions: list[TraceSession] = []
    if world is not None and mode != "train":
        raise ValueError("a data-parallel prediction is of training (--mode train)")
    with trace_sessions(workload, steps, target, world, mode) as session_for:
        for precision in precisions:
            session = session_for(precision)
            if session not in sessions:
                sessions.append(session)
            traces = PrecisionTraces(session, precision, check)
            if traces.how == "traced":
                notes.append(f"{precision}: the op sequence changes with the batch, so every batch needed was traced.")
            results[precision] = _predict_precision(traces, sizes)
            if compare_with is not None and precision in compare_with[1].precisions:
                got_rows, edge = _compare(traces, compare_with[1].precisions[precision])
                rows += got_rows
                if edge is not None:
                    edges.append(edge)
        for session in sessions:  # counted before the sessions close
            for key, n in session.behaviour.sdpa_choices.items():
                sdpa[key] = sdpa.get(key, 0) + n
            for key, n in session.recorder.answers.items():
                answers[key] = answers.get(key, 0) + n
            behaviour_notes += [n for n in session.behaviour.notes if n not in behaviour_notes]
    traced_seconds = sum(s.seconds for s in sessions)
    build_seconds = sum(s.build_seconds for s in sessions)
    if "tf32" in precisions:
        notes.append("tf32: traced like fp32 (TF32 changes the math, not the tensors).")
    choices = ", ".join(f"{backend} ({dtype}) x{n}" for (backend, dtype), n in sorted(sdpa.items()))
    if choices:
        notes.append(f"scaled-dot-product attention calls, emulated as on {target.name}: {choices}.")
    answered = ", ".join(f"{op} -> {value} x{n}" for (op, value), n in sorted(answers.items(), key=str))
    if answered:
        notes.append(f"data-dependent values answered on fake tensors: {answered}.")
    notes += behaviour_notes
    if world is not None:
        from memprobe.predict.data_parallel import notes as world_notes

        notes += world_notes(world)
    notes.append(f"time: {build_seconds:.1f} s to import and build the model, "
                 f"{traced_seconds - build_seconds:.1f} s tracing trials, "
                 f"{time.perf_counter() - started - traced_seconds:.1f} s replaying them through the allocator model.")
    seconds = time.perf_counter() - started
    return Prediction(workload.name, target.name, steps, seconds, build_seconds, list(sizes), overhead_bytes,
                      overhead_source, results, notes, rows, edges, compare_with[0] if compare_with else "",
                      world.label if world is not None else "", mode)


def memory_sizes(labels: Sequence[tuple[str, int]], cards: dict[str, Any] | None = None,
                 override: Any = None) -> list[MemorySize]:
    """Memory sizes with the capacity the allocator gets of each (overhead.usable_memory: the packaged per-card data,
    or `override`, an overhead.Override). `cards` maps a label to its catalog Card (sizes given by card name).

    Raises overhead.OverheadError (a ValueError) for a size not larger than the overhead.
    """
    from memprobe.overhead import usable_memory

    out = []
    for label, nbytes in labels:
        usable = usable_memory(label, nbytes, (cards or {}).get(label), override)
        out.append(MemorySize(label, nbytes, usable.capacity_bytes, usable.how))
    return out


def _pct(pred: float | None, meas: float | None) -> str:
    if pred is None or not meas:
        return "-"
    return f"{(pred / meas - 1) * 100:+.2f}%"


def render(pred: Prediction) -> str:
    """The prediction as text: per precision the fitted line and the predicted max batch per memory size,
    then (with a comparison) predicted vs measured. Every figure is labelled predicted."""
    from tabulate import tabulate

    where = f" per GPU on {pred.world}" if pred.world else ""
    trial = (f"(1 warm-up + {pred.steps - 1} steps, optimizer state included)" if pred.mode == "train"
             else f"of inference ({pred.steps} forward passes under inference_mode)")
    lines = [f"memprobe predict: {pred.workload}{where} -- PREDICTED, not measured: a fake-tensor trace of one trial "
             f"{trial} with the CUDA kernels of {pred.target}, "
             f"replayed through a model of the CUDA caching allocator; {pred.seconds:.1f} s on this CPU."]
    if any(s.how for s in pred.sizes):
        lines += [f"Usable memory, {s.label}: {gib(s.capacity_bytes, 2)} of {gib(s.memory_bytes, 2)} GiB; {s.how}."
                  for s in pred.sizes]
    elif pred.overhead_bytes is not None:
        lines.append(f"Usable memory = memory - {gib(pred.overhead_bytes, 2)} GiB not allocatable, {pred.overhead_source}.")
    else:
        lines.append(f"Usable memory = the memory given ({pred.overhead_source}): the CUDA context and the driver's "
                     "reservation are not subtracted, so these predictions are optimistic.")
    headers = ["precision", "predicted static GiB", "predicted GiB/sample"] + [f"{s.label}: predicted max batch" for s in pred.sizes]
    rows = []
    for name, p in pred.precisions.items():
        m = p.model_reserved
        rows.append([name, gib(m.static_bytes, 2) if m else "-", gib(m.per_sample_bytes, 3) if m else "-"]
                    + [str(p.max_batch[s.label]) for s in pred.sizes])
    lines += ["", tabulate(rows, headers=headers, tablefmt="github"), ""]
    lines.append("static / per sample: least-squares line through the predicted peak reserved bytes at batches "
                 "2, 4, 8, ... up to the largest edge; max batch: the largest batch whose trial fits the usable memory "
                 "in the allocator model (not the line).")
    if pred.comparison:
        lines += ["", f"Predicted vs measured ({pred.compared_with}); predictions replayed with the scan's allocator capacity:", ""]
        crow = []
        for r in pred.comparison:
            measured_ok = r.measured_outcome == "fit"
            measured = r.measured_outcome
            if not measured_ok and "ran the 3-step trial" in r.measured_message:
                measured = "trial fit; timed run oom"  # a fresh check times 3 + 10 more steps after the trial
            crow.append([r.precision, r.batch, r.where, measured,
                         "fit" if r.predicted_fits else f"oom ({gib(r.predicted_request, 2)} GiB request)",
                         gib(r.measured_allocated, 2), gib(r.predicted_allocated, 2),
                         _pct(r.predicted_allocated, r.measured_allocated) if measured_ok else "(oom: partial)",
                         gib(r.measured_reserved, 2), gib(r.predicted_reserved, 2),
                         _pct(r.predicted_reserved, r.measured_reserved) if measured_ok else "(oom: partial)"])
        lines.append(tabulate(crow, headers=["precision", "batch", "trial", "measured", "predicted",
                                             "peak alloc GiB measured", "predicted", "error",
                                             "peak reserved GiB measured", "predicted", "error"], tablefmt="github"))
        if pred.max_batch_comparison:
            lines.append("")
            erow = []
            for e in pred.max_batch_comparison:
                err = f"{(e.predicted / e.measured - 1) * 100:+.1f}%" if e.measured else "-"
                erow.append([e.precision, gib(e.capacity_bytes, 2), e.predicted, e.measured, err,
                             f"{e.search[0]}/{e.search[1]}", f"{e.fresh[0]}/{e.fresh[1]}",
                             ", ".join(map(str, e.trial_fits_fresh)) or "-"])
            lines.append(tabulate(erow, headers=["precision", "capacity GiB", "predicted max batch", "measured max batch",
                                                 "error", "search fits/fails", "fresh fits/fails",
                                                 "3-step trial fit in a fresh process at"], tablefmt="github"))
    lines += [""] + [f"note: {n}" for n in pred.notes]
    return "\n".join(lines) + "\n"
