"""`memprobe predict`: max batch per memory size and precision, compared with a scan, rendered.

The max batch for a memory size is found by replaying the trace with the allocator's capacity set to that
memory minus the non-allocatable overhead measured on a real card (memprobe/core/cards/overhead.py); a line
peak(b) = static + per_sample x b through the replayed peaks near the edge is reported beside it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TypeVar

from memprobe.core.cards.catalog import PRECISIONS
from memprobe.core.estimates.memory_model import Attempt, MemoryModel, fit_memory_model
from memprobe.core.process.outcomes import FIT, LIMIT, OOM
from memprobe.core.records.environment import Environment
from memprobe.core.records.records import Proof
from memprobe.core.records.versions import LIBRARIES, release
from memprobe.core.workload.registry import Workload
from memprobe.predict.batch_model import PrecisionTraces
from memprobe.predict.collector import paused
from memprobe.predict.edge_search import MAX_SEARCH_BATCH
from memprobe.predict.fakecuda import H100, Target
from memprobe.predict.parallel import forked_map
from memprobe.predict.prediction_notes import sessions_notes, time_note, trace_notes
from memprobe.predict.progress import TraceProgress, silent
from memprobe.predict.safe import SAFE_MARGIN, safe_capacity, safe_margin, safe_max_batch
from memprobe.predict.trace import PredictError
from memprobe.predict.tracing import axis_of, traced_precisions

T = TypeVar("T")


@dataclass
class MemorySize:
    """A memory size asked about, and what the allocator can use of it."""

    label: str
    memory_bytes: int
    capacity_bytes: int
    how: str = ""  # where the capacity comes from (overhead.usable_memory), when not from the Prediction's overhead
    # the precisions this card cannot train in (tf32 and bf16 before compute capability 8.0): max batch 0 there
    cannot_train: tuple[str, ...] = ()


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
    # memory label -> the largest batch that fits with SAFE_MARGIN of the usable memory left over: what to run
    safe_max_batch: dict[str, int] = field(default_factory=dict)
    # memory label -> the max batch is the search's cap (every batch up to MAX_SEARCH_BATCH fits): "N or more"
    capped: list[str] = field(default_factory=list)
    # memory label -> the kernel limit the max batch + 1 meets whatever the memory (batch_model.kernel_limit)
    kernel_limit: dict[str, str] = field(default_factory=dict)
    # batch -> the peak reserved bytes its trial needs (no capacity limit), for the batches a capped (the cap) or
    # impossible (1) answer stands on: what the memory would have to hold
    needs: dict[int, int] = field(default_factory=dict)


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
    measured_trial_fit: bool = False  # the trial's steps completed (a fit, or a timed run that failed after them)


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
    precisions: dict[str, PrecisionPrediction]
    notes: list[str]
    comparison: list[ComparisonRow] = field(default_factory=list)
    max_batch_comparison: list[MaxBatchComparison] = field(default_factory=list)
    compared_with: str = ""
    world: str = ""  # "2 GPUs, ddp": the figures are per GPU, for rank 0 of a data-parallel group
    mode: str = "train"  # "infer": forward passes only
    axis: str = "batch"  # "seq_len": n is the sequence length (of `batch` sequences per step), not the batch
    versions: dict[str, str] = field(default_factory=dict)  # the libraries the trace ran (library_versions)
    version_note: str = ""  # with a comparison: the libraries the scan ran where they differ from these
    safe_margin: float = SAFE_MARGIN  # the share of the usable memory the safe batches leave unused

    @property
    def cannot_train(self) -> dict[str, list[str]]:
        """Memory label -> the precisions asked for that the card cannot train in (their max batch is 0)."""
        return {s.label: names for s in self.sizes if (names := [p for p in self.precisions if p in s.cannot_train])}


def _predict_precision(traces: PrecisionTraces, sizes: Sequence[MemorySize], margin: float) -> PrecisionPrediction:
    max_batch: dict[str, int] = {}
    safe: dict[str, int] = {}
    oom: dict[str, int] = {}
    limits: dict[str, str] = {}
    capped: list[str] = []
    for size in sizes:
        if traces.precision in size.cannot_train:  # no answer for a card that cannot run the precision
            max_batch[size.label] = safe[size.label] = 0
            continue
        found, fail = traces.max_batch(size.capacity_bytes)
        max_batch[size.label] = found
        safe[size.label] = safe_max_batch(traces, size.capacity_bytes, margin, found)
        if fail is not None and fail.oom is not None:
            oom[size.label] = fail.oom.requested
        if fail is not None and fail.limit:
            limits[size.label] = fail.limit
        if fail is None:  # nothing failed up to the search's cap: the answer is the cap, not an edge
            capped.append(size.label)
    # What an answer with no edge stands on: the trial at the cap, or batch 1 where nothing fits.
    nothing = any(max_batch[s.label] == 0 for s in sizes if traces.precision not in s.cannot_train)
    stands_on = ([MAX_SEARCH_BATCH] if capped else []) + ([1] if nothing else [])
    needs = {b: traces.peaks(b).peak_reserved for b in stands_on}
    peaks: dict[int, tuple[int, int]] = {}
    for b in traces.fit_batches(max(max_batch.values(), default=0)):
        r = traces.peaks(b)
        peaks[b] = (r.peak_allocated, r.peak_reserved)
    attempts = [Attempt(b, FIT, a, r) for b, (a, r) in peaks.items()]
    # Least squares over every replayed batch, as a scan fits its memory_model over its trials.
    fit_alloc = fit_memory_model(attempts, "peak_allocated")
    fit_res = fit_memory_model(attempts, "peak_reserved")
    linear = {s.label: fit_res.max_batch_for(s.capacity_bytes) if fit_res else 0 for s in sizes}
    return PrecisionPrediction(
        traces.precision,
        fit_alloc,
        fit_res,
        max_batch,
        linear,
        peaks,
        traces.how,
        oom_request=oom,
        safe_max_batch=safe,
        capped=capped,
        needs=needs,
        kernel_limit=limits,
    )


def trial_fit_batches(checks: Sequence[Attempt]) -> list[int]:
    """Batches whose trial fitted in a fresh-process check (the proof's checks of a result file), including those
    whose timed run failed afterwards (Attempt.trial_fitted: the recorded trial_fit, or an old file's message)."""
    return sorted({c.batch for c in checks if c.trial_fitted})


def library_versions() -> dict[str, str]:
    """The installed versions of the libraries that decide a model's code path (LIBRARIES), as a scan records
    them (environment.versions)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in LIBRARIES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def version_note(mine: dict[str, str], scan_environment: Environment) -> str:
    """One sentence naming each library whose version the scan (its environment) ran differently from `mine`, or
    "" when they agree or the scan did not record them. torch's local build tag (+cpu, +cu130) is not a difference."""
    scanned = scan_environment.versions or {}
    if not isinstance(scanned, dict):
        return ""

    differ = [
        f"{name} {scanned[name]} (here {mine[name]})"
        for name in LIBRARIES
        if scanned.get(name) and name in mine and release(scanned[name]) != release(mine[name])
    ]
    if not differ:
        return ""
    return (
        "the scan ran " + ", ".join(differ) + ": a library version can change a model's code path and its memory "
        "(T5's attention takes the math path with transformers 5.17 and the memory-efficient one with 5.24); "
        "compare like with like"
    )


def run_capacity(p) -> int | None:
    """What a scan's allocator could use during its trials: the capacity it recorded at setup, less the memory that
    kernels and libraries take outside the allocator afterwards (core/cards/overhead.py's run overhead; on a rank of a
    data-parallel group, the group's, NCCL's buffers included)."""
    from memprobe.core.cards.overhead import default_overhead_table

    if not p.capacity_bytes:
        return None
    table = default_overhead_table()
    group = (p.settings.world_size or 1) > 1
    return p.capacity_bytes - (table.group_run_overhead_bytes if group else table.run_overhead_bytes)


def _compare(traces: PrecisionTraces, p) -> tuple[list[ComparisonRow], MaxBatchComparison | None]:
    """Predicted vs measured for every trial a scan's precision result recorded, at its capacity during the run."""
    capacity = run_capacity(p)
    rows = []
    checks = p.checks
    for where, attempts in (("search", p.attempts), ("fresh", checks)):
        for a in attempts:
            if not a.fits and a.outcome not in (OOM, LIMIT):
                continue  # a trial that failed for another reason (a batch too small for batch norm) has no peak
            try:
                r = traces.peaks(a.batch, capacity)
            except PredictError:
                continue  # a batch the step cannot run at on fake tensors either: nothing to set beside it
            rows.append(
                ComparisonRow(
                    traces.precision,
                    a.batch,
                    where,
                    a.outcome,
                    a.peak_allocated,
                    a.peak_reserved,
                    r.fits,
                    r.peak_allocated,
                    r.peak_reserved,
                    r.oom.requested if r.oom else None,
                    str(a.message or ""),
                    a.trial_fitted,
                )
            )
    if not capacity:
        return rows, None
    predicted, _ = traces.max_batch(capacity)
    proof = p.proof or Proof()
    found = proof.found
    trial_fits = trial_fit_batches(checks)
    return rows, MaxBatchComparison(
        traces.precision,
        capacity,
        predicted,
        p.max_batch,
        (found.fits, found.fails),
        (proof.fits, proof.fails),
        trial_fits,
    )


def predict(
    workload: Workload,
    precisions: Sequence[str],
    sizes: Sequence[MemorySize],
    steps: int = 3,
    target: Target = H100,
    check: bool = True,
    compare_with: tuple[str, Any] | None = None,
    world: Any = None,
    mode: str = "train",
    workers: int = 1,
    progress: TraceProgress | None = None,
) -> Prediction:
    """Trace `workload` in each precision and predict its max batch for each memory size.

    `compare_with` = (path, ScanResult) of a real scan of this workload adds predicted-vs-measured rows.
    `world` (data_parallel.World) predicts per GPU for rank 0 of N data-parallel GPUs: one traced session per
    precision, since the wrapper depends on it. `mode` "infer": forward passes under inference_mode, as a
    `scan --mode infer` trial (its `steps` forward passes). `workers` > 1 traces that many trials at once (forked
    children, parallel.py; the numbers do not depend on it); `progress` gets a line per trace. Raises PredictError
    when the workload cannot be built, wrapped or stepped on fake tensors, ValueError for a precision other than
    fp32/tf32/fp16/bf16.
    """
    _check(workload, precisions, world, mode)
    started = time.perf_counter()
    progress = progress or silent()
    scanned = compare_with[1].precisions if compare_with is not None else {}
    margin = safe_margin(world)
    capacities = [s.capacity_bytes for s in sizes] + [safe_capacity(s.capacity_bytes, margin) for s in sizes]
    capacities += [c for p in scanned.values() if (c := run_capacity(p))]
    with traced_precisions(workload, precisions, capacities, steps, target, world, mode, check, workers, progress) as (
        traces_for,
        traced,
    ):

        def replays(precision: str) -> tuple[PrecisionPrediction, list[ComparisonRow], MaxBatchComparison | None]:
            traces = traces_for(precision)
            with paused():  # replays make cycles only in their allocators: collections walk the traces for nothing
                got_rows, edge = _compare(traces, scanned[precision]) if precision in scanned else ([], None)
                return _predict_precision(traces, sizes, margin), got_rows, edge

        # One session traced every precision at its first call where the traces are shared: their replays only read
        # them, so they run side by side in forked children where there are cores.
        shared = world is None and mode != "generate"
        done = _replay_all(replays, traces_for, precisions, shared, workers, progress)
        session_notes = sessions_notes(traced.sessions, target)  # counted before the sessions close
    results = {precision: result for precision, (result, _rows, _edge) in zip(precisions, done)}
    rows = [row for _result, got_rows, _edge in done for row in got_rows]
    edges = [edge for _result, _rows, edge in done if edge is not None]
    notes = trace_notes(results, traced, precisions) + session_notes
    if world is not None:
        from memprobe.predict.data_parallel import notes as world_notes

        notes += world_notes(world)
    notes.append(time_note(traced, workers, time.perf_counter() - started))
    build_seconds = traced.build_seconds
    seconds = time.perf_counter() - started
    versions = library_versions()
    mismatch = version_note(versions, compare_with[1].environment) if compare_with is not None else ""
    return Prediction(
        workload.name,
        target.name,
        steps,
        seconds,
        build_seconds,
        list(sizes),
        results,
        notes,
        rows,
        edges,
        compare_with[0] if compare_with else "",
        world.label if world is not None else "",
        mode,
        axis_of(workload),
        versions,
        mismatch,
        margin,
    )


def _replay_all(
    replays: Callable[[str], T],
    traces_for: Callable[[str], Any],
    precisions: Sequence[str],
    shared: bool,
    workers: int,
    progress: TraceProgress,
) -> list[T]:
    """Each precision's replays, in order: with `shared` traces, every precision traced first and the replays run
    all at once in forked children; else each traced and replayed in turn."""
    if not shared:
        done = []
        for precision in precisions:
            traces_for(precision)
            progress.phase(f"replaying {precision} through the allocator model")
            done.append(replays(precision))
        return done
    for precision in precisions:
        traces_for(precision)
    progress.phase(f"replaying {', '.join(precisions)} through the allocator model")
    # All at once where there are cores to share: three precisions on two cores end together, not
    # two and then one alone.
    return forked_map(replays, list(precisions), max(workers, len(precisions)) if workers > 1 else 1)


def _check(workload: Workload, precisions: Sequence[str], world: Any, mode: str) -> None:
    """Raises ValueError for a precision other than fp32/tf32/fp16/bf16 or a data-parallel prediction of anything
    but training, PredictError for a workload a multi-GPU scan refuses."""
    for p in precisions:
        if p not in PRECISIONS:
            raise ValueError(f"unknown precision '{p}'")
    if world is not None:
        from memprobe.core.workload.strategies import StrategyError, check_workload

        try:
            check_workload(workload)  # what a multi-GPU scan refuses is not predicted either
        except StrategyError as exc:
            raise PredictError(str(exc)) from None
    if world is not None and mode != "train":
        raise ValueError("a data-parallel prediction is of training (--mode train)")


def memory_sizes(
    labels: Sequence[tuple[str, int]], cards: dict[str, Any] | None = None, override: Any = None, group: bool = False
) -> list[MemorySize]:
    """Memory sizes with the capacity the allocator gets of each (overhead.usable_memory: the packaged per-card data,
    or `override`, an overhead.Override; `group`: on a rank of a data-parallel group). `cards` maps a label to its
    catalog Card (sizes given by card name).

    Raises overhead.OverheadError (a ValueError) for a size not larger than the overhead.
    """
    from memprobe.core.cards.overhead import usable_memory

    out = []
    for label, nbytes in labels:
        card = (cards or {}).get(label)
        usable = usable_memory(label, nbytes, card, override, group=group)
        cannot = tuple(p for p in PRECISIONS if card is not None and not card.supports(p))
        out.append(MemorySize(label, nbytes, usable.capacity_bytes, usable.how, cannot))
    return out
