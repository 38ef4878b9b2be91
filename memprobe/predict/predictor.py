"""Predict a workload's peak GPU memory and its max batch for any memory size, with no GPU.

The trial of a scan (one warm-up step + K more, optimizer state included; trial.run_trial) is run on
fake tensors, with PyTorch's code paths switched to what they do on CUDA (fakecuda.py). Every
storage the step allocates and frees is recorded in order, with the workspaces CUDA kernels allocate
for themselves; the trace is replayed through a model of the caching allocator (allocator.py),
which gives what max_memory_allocated / max_memory_reserved would say, and whether a card of a
given capacity would run out of memory.

Tracing is the slow part (about a second per step for BERT-Large), so each precision is traced at
two batch sizes (2 and 3) only: every allocation of a transformer step is affine in the batch, so
the two traces give the trace at any batch; a third traced batch (4) checks that byte for byte.
Batch 1, and every batch of a workload whose op sequence changes with the batch, is traced
directly. The max batch for a memory size is then found by replaying the trace with the allocator's
capacity set to that memory minus the non-allocatable overhead measured on a real card
(guide.overhead_for); a line peak(b) = static + per_sample x b through the replayed peaks near the
edge is reported beside it.
"""

from __future__ import annotations

import gc
import time
import weakref
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_flatten

from memprobe.predict.allocator import ALLOC, FREE, MARK, ReplayResult, replay
from memprobe.probe.errors import FIT
from memprobe.predict.fakecuda import CUBLAS_OPS, H100, FakeCudaMode, Target, cuda_optimizers, fake_session, kernel_workspaces
from memprobe.registry import Workload, family_builder
from memprobe.probe.search import Attempt, MemoryModel, fit_memory_model
from memprobe.probe.trial import run_step, run_until_state
from memprobe.units import gib
from memprobe.workloads.base import Amp

TRIAL_MARK = "trial"  # where run_trial called reset_peak_memory_stats (after empty_cache)
FIT_BATCHES = (2, 4, 8, 16, 32, 64, 128, 256, 512)  # replayed for the reported linear fit (up to the edge)
MAX_SEARCH_BATCH = 1 << 16
MODEL_BATCHES = (2, 3)  # traced and extrapolated from; batch 1 can take other paths (size-1 dims broadcast)
CHECK_BATCH = 4  # traced to check the extrapolation byte for byte


class PredictError(RuntimeError):
    """The workload cannot be predicted (it cannot be built or stepped on fake tensors)."""


# --- recording --------------------------------------------------------------------------------

class _Recorder(FakeCudaMode):
    """Records storage allocations and frees of CPU-device fake tensors (standing in for CUDA memory).

    A storage is allocated when it first appears in an op's output and freed when the last tensor
    seen holding it dies. A tensor made without an op (Parameter(t), .data) can keep a storage alive
    unseen; such storages wait in `_lingering` until they really die (StorageWeakRef), so nothing is
    freed early.
    """

    def __init__(self, target: Target) -> None:
        super().__init__()
        self.target = target
        self.events: list[tuple] = []
        self._live: dict[int, list] = {}  # storage cdata -> [alloc id, nbytes, tensors seen, StorageWeakRef]
        self._objs: dict[int, weakref.ref] = {}  # id(tensor) -> weakref with the death callback
        self._lingering: dict[int, list] = {}
        self._pending: list[int] = []
        self._next_id = 0
        self._ops = 0
        self.cublas_allocated = False
        self.recording = True

    # events
    def _alloc(self, nbytes: int, label: Any = "") -> int:
        self._next_id += 1
        self.events.append((ALLOC, self._next_id, nbytes, label))
        return self._next_id

    def _free(self, alloc_id: int) -> None:
        self.events.append((FREE, alloc_id))

    def mark(self, name: str) -> int:
        """Add a named point to the trace; return its index."""
        self.sweep()
        self.events.append((MARK, name))
        return len(self.events) - 1

    # storage lifetimes
    def track(self, t: torch.Tensor, label: Any = "") -> None:
        device = getattr(t, "fake_device", None) or t.device  # fake_device: no dispatch to ask
        if device.type != "cpu":
            return  # meta tensors (models built on the meta device) hold no memory
        known = self._objs.get(id(t))
        if known is not None and known() is t:
            return
        storage = t.untyped_storage()
        key = storage._cdata
        entry = self._live.get(key)
        if entry is not None and entry[3].expired():  # an old storage at a reused address
            self._release(key)
            entry = None
        if entry is None:
            entry = self._lingering.pop(key, None)
        if entry is None:
            entry = [self._alloc(storage.nbytes(), label), storage.nbytes(), 0, StorageWeakRef(storage)]
        self._live[key] = entry
        entry[2] += 1
        self._objs[id(t)] = weakref.ref(t, partial(self._dead, key, id(t)))

    def before_swap(self, t1: torch.Tensor, t2: torch.Tensor) -> None:
        for t in (t1, t2):
            ref = self._objs.get(id(t))
            if ref is None or ref() is not t:
                continue
            del self._objs[id(t)]  # the weakref dies with its last reference: no callback
            key = t.untyped_storage()._cdata
            entry = self._live.get(key)
            if entry is not None:
                entry[2] -= 1
                if entry[2] <= 0:
                    self._lingering[key] = self._live.pop(key)
            del ref

    def after_swap(self, t1: torch.Tensor, t2: torch.Tensor) -> None:
        if self.recording:
            self.track(t1)
            self.track(t2)

    def _dead(self, key: int, obj_id: int, ref: weakref.ref) -> None:
        # Runs while the tensor is being destroyed, before it lets go of its storage: whether the
        # storage dies with it is checked at the next op (_settle).
        if self._objs.get(obj_id) is ref:
            del self._objs[obj_id]
        entry = self._live.get(key)
        if entry is None:
            return
        entry[2] -= 1
        if entry[2] <= 0:
            self._pending.append(key)

    def _settle(self) -> None:
        """Free the storages whose last seen tensor died since the last op, if nothing else holds them."""
        pending, self._pending = self._pending, []
        for key in pending:
            entry = self._live.get(key)
            if entry is None or entry[2] > 0:
                continue  # seen again in the meantime
            if entry[3].expired():
                self._release(key)
            else:
                self._lingering[key] = self._live.pop(key)

    def _release(self, key: int) -> None:
        entry = self._live.pop(key)
        self._free(entry[0])

    def sweep(self) -> None:
        """Settle recent deaths and free lingering storages that have died since."""
        self._settle()
        for key in [k for k, e in self._lingering.items() if e[3].expired()]:
            self._free(self._lingering.pop(key)[0])

    def observe(self, func, args, kwargs, out) -> None:
        if not self.recording:
            return
        self._ops += 1
        if self._pending:
            self._settle()
        if self._lingering and self._ops % 64 == 0:
            self.sweep()
        if isinstance(out, torch.Tensor):
            self.track(out, func)
        elif isinstance(out, (tuple, list)):
            for item in tree_flatten(out)[0]:
                if isinstance(item, torch.Tensor):
                    self.track(item, func)
        if func in CUBLAS_OPS and not self.cublas_allocated:
            # The cuBLAS workspace comes from the caching allocator at the first GEMM and stays.
            self.cublas_allocated = True
            self._alloc(self.target.cublas_workspace_bytes, "cuBLAS workspace")
        temps = [self._alloc(n, f"{func} workspace") for n in kernel_workspaces(func, args, out) if n > 0]
        for alloc_id in temps:
            self._free(alloc_id)


# --- traces -----------------------------------------------------------------------------------

@dataclass
class Trace:
    """The events of building the model and of one trial at `batch`, ids renumbered 1..n in ALLOC order."""

    batch: int
    events: list[tuple]
    steps: int


def _canonical(build: list[tuple], trial: list[tuple]) -> list[tuple]:
    """Build events, the trial mark, then the trial's events; ids renumbered; frees of storages
    allocated outside these sections (an earlier trial's leftovers) dropped."""
    mapping: dict[int, int] = {}
    out: list[tuple] = []
    for event in [*build, (MARK, TRIAL_MARK), *trial]:
        kind = event[0]
        if kind == ALLOC:
            mapping[event[1]] = len(mapping) + 1
            out.append((ALLOC, mapping[event[1]], event[2], event[3]))
        elif kind == FREE:
            if event[1] in mapping:
                out.append((FREE, mapping[event[1]]))
        elif kind == MARK and event[1] == TRIAL_MARK:
            out.append(event)
    return out


class _EmulatedAmp(Amp):
    """Amp whose autocast is the emulated CUDA autocast (fakecuda.CudaBehaviour.autocast)."""

    def __init__(self, precision: str, behaviour) -> None:
        super().__init__(precision, torch.device("cpu"))
        self._behaviour = behaviour

    def autocast(self):
        if self.dtype is None:
            return super().autocast()
        return self._behaviour.autocast(self.dtype)


def _builder(workload: Workload) -> Callable:
    try:
        return family_builder(workload.family)
    except ImportError as exc:
        raise PredictError(f"{workload.name}: cannot import its family '{workload.family}' ({exc})") from exc


class TraceSession:
    """One workload built on fake tensors, traced at any batch and precision. Use as a context manager."""

    def __init__(self, workload: Workload, steps: int = 3, target: Target = H100) -> None:
        if steps < 3:
            raise ValueError("a trial is 1 warm-up step + K >= 2 steps")
        self.workload = workload
        self.steps = steps
        self.target = target
        self.seconds = 0.0
        self.build_seconds = 0.0
        self._stack: list = []

    def __enter__(self) -> "TraceSession":
        started = time.perf_counter()
        build = _builder(self.workload)
        session = fake_session(self.target)
        self.fake, self.behaviour = session.__enter__()
        self._stack.append(session)
        self.recorder = _Recorder(self.target)
        self.recorder.__enter__()
        try:
            self.task = build(self.workload.params, self.workload.optimizer, torch.device("cpu"))
            # Adopt the weights: Parameter(...) and swap_tensors made them without an op.
            for t in [*self.task.model.parameters(), *self.task.model.buffers()]:
                self.recorder.track(t)
            gc.collect()
            self.recorder.sweep()
        except Exception as exc:
            self.__exit__(None, None, None)
            if isinstance(exc, PredictError):
                raise
            raise PredictError(f"{self.workload.name}: cannot build it on fake tensors: "
                               f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
        self.build_events = list(self.recorder.events)
        self.build_seconds = time.perf_counter() - started
        self.seconds += self.build_seconds
        return self

    def __exit__(self, *exc) -> None:
        recorder = getattr(self, "recorder", None)
        if recorder is not None:
            recorder.__exit__(None, None, None)
            self.recorder = None
        while self._stack:
            self._stack.pop().__exit__(None, None, None)

    def trace(self, precision: str, batch: int) -> Trace:
        """Run one trial (trial.run_trial's steps) at `batch` and return build + trial events.

        Raises PredictError when the step fails on fake tensors.
        """
        rec = self.recorder
        if rec is None:
            raise PredictError(f"{self.workload.name}: the trace session is closed")
        started = time.perf_counter()
        rec.cublas_allocated = False  # each traced trial stands for a fresh process
        start = rec.mark(TRIAL_MARK)
        task = self.task
        ran = None
        try:
            task.start()
            cuda_optimizers(task)
            amp = _EmulatedAmp(precision, self.behaviour)
            inputs = task.make_batch(batch)
            ran = run_until_state(lambda: run_step(task, amp, inputs, "train"), amp, self.steps, "train")
            failure = None
        except Exception as exc:  # noqa: BLE001 - reported as a PredictError below, outside the except block
            failure = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        inputs = amp = None  # noqa: F841
        end = rec.mark("end")
        rec.recording = False
        task.stop()
        gc.collect()
        rec.recording = True
        rec.sweep()
        self.seconds += time.perf_counter() - started
        if failure is not None:
            raise PredictError(f"{self.workload.name} {precision} batch {batch}: the step failed on fake tensors: {failure}")
        return Trace(batch, _canonical(self.build_events, rec.events[start + 1:end]), ran)


# --- replay at any batch ------------------------------------------------------------------------

@dataclass
class BatchModel:
    """Traces of one precision at two batches; gives the trace at any batch (sizes affine in the batch)."""

    low: Trace
    high: Trace
    checked: Trace | None = None
    exact: bool = False  # the extrapolation reproduced the checked trace byte for byte

    def aligned(self) -> bool:
        """Whether the two traces have the same events in the same order (only ALLOC sizes may differ)."""
        a, b = self.low.events, self.high.events
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            if x[0] != y[0] or x[1] != y[1] or (x[0] == ALLOC and x[3] != y[3]):
                return False
        return True

    def events_at(self, batch: int) -> list[tuple]:
        """The trace at `batch`. Raises ValueError if the two traces do not align or a size goes negative."""
        lo, hi = self.low, self.high
        span = hi.batch - lo.batch
        out = []
        for x, y in zip(lo.events, hi.events):
            if x[0] != ALLOC:
                out.append(x)
                continue
            step, rem = divmod(y[2] - x[2], span)
            if rem:
                raise ValueError("allocation sizes are not affine in the batch")
            size = x[2] + step * (batch - lo.batch)
            if size < 0:
                raise ValueError("an allocation size would be negative at this batch")
            out.append((ALLOC, x[1], size, x[3]))
        return out


def _replay(events: list[tuple], capacity: int | None = None) -> ReplayResult:
    return replay(events, capacity=capacity, measure_from=TRIAL_MARK)


def max_batch_for(events_at: Callable[[int], list[tuple]], capacity: int, guess: int = 2,
                  limit: int = MAX_SEARCH_BATCH) -> tuple[int, ReplayResult | None]:
    """The largest batch whose replayed trial fits in `capacity` bytes (0 when batch 1 does not), and
    the replay that failed at max + 1 (None when everything up to `limit` fits).

    Walks from `guess` (e.g. a linear estimate) with steps 1, 2, 4, ... until the edge is bracketed,
    then bisects; assumes fitting is monotone in the batch. Batch 1 is only replayed when 2 does not fit.
    """
    cache: dict[int, ReplayResult] = {}

    def fits(b: int) -> bool:
        if b not in cache:
            cache[b] = _replay(events_at(b), capacity)
        return cache[b].fits

    lo, hi = 0, limit + 1  # lo fits (0: nothing known), hi does not (limit + 1: unknown)
    b = min(max(guess, MODEL_BATCHES[0]), limit)
    step = 1
    if fits(b):
        lo = b
        while hi == limit + 1 and lo < limit:
            b = min(lo + step, limit)
            if fits(b):
                lo = b
            else:
                hi = b
            step *= 2
    else:
        hi = b
        while lo == 0 and hi > 1:
            b = max(hi - step, MODEL_BATCHES[0]) if hi > MODEL_BATCHES[0] else 1
            if fits(b):
                lo = b
            else:
                hi = b
            step *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, cache.get(hi)


# --- per precision --------------------------------------------------------------------------------

class PrecisionTraces:
    """The trial of one precision at any batch: extrapolated from two traces, or traced (and kept)."""

    def __init__(self, session: TraceSession, precision: str, check: bool = True) -> None:
        self.session = session
        self.precision = precision
        self.model, traces = batch_model(session, precision, check)
        self._traced: dict[int, list[tuple]] = {b: t.events for b, t in traces.items()}
        if self.model is None:
            self.how = "traced"
        else:
            self.how = "checked" if self.model.exact else "unchecked"

    def events_at(self, batch: int) -> list[tuple]:
        """The trace at `batch` (build + trial). Raises PredictError if tracing fails."""
        if batch in self._traced:
            return self._traced[batch]
        if self.model is not None and batch >= MODEL_BATCHES[0]:
            return self.model.events_at(batch)
        self._traced[batch] = self.session.trace(self.precision, batch).events
        return self._traced[batch]

    def peaks(self, batch: int, capacity: int | None = None) -> ReplayResult:
        return _replay(self.events_at(batch), capacity)

    def linear_guess(self, capacity: int) -> int:
        """Where a line through the peaks reserved at two batches puts the edge (a starting point only)."""
        a, b = MODEL_BATCHES[0], 4 * MODEL_BATCHES[0]
        ra, rb = self.peaks(a).peak_reserved, self.peaks(b).peak_reserved
        per = (rb - ra) / (b - a)
        if per <= 0:
            return MODEL_BATCHES[0]
        return max(1, int((capacity - (ra - per * a)) / per))


# --- the prediction -----------------------------------------------------------------------------

@dataclass
class MemorySize:
    """A memory size asked about, and what the allocator can use of it."""

    label: str
    memory_bytes: int
    capacity_bytes: int


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


def batch_model(session: TraceSession, precision: str, check: bool = True) -> tuple[BatchModel | None, dict[int, Trace]]:
    """Trace `precision` at MODEL_BATCHES (and CHECK_BATCH, to check the extrapolation byte for byte).

    Returns (None, traces) when the traces do not line up: every batch is then traced instead.
    """
    low = session.trace(precision, MODEL_BATCHES[0])
    high = session.trace(precision, MODEL_BATCHES[1])
    model = BatchModel(low, high)
    traces = {low.batch: low, high.batch: high}
    if not model.aligned():
        return None, traces
    if check:
        checked = session.trace(precision, CHECK_BATCH)
        traces[CHECK_BATCH] = checked
        model.checked = checked
        try:
            model.exact = model.events_at(CHECK_BATCH) == checked.events
        except ValueError:
            model.exact = False
        if not model.exact:
            return None, traces
    return model, traces


def _predict_precision(traces: PrecisionTraces, sizes: Sequence[MemorySize]) -> PrecisionPrediction:
    max_batch: dict[str, int] = {}
    oom: dict[str, int] = {}
    for size in sizes:
        guess = traces.linear_guess(size.capacity_bytes) if traces.model is not None else MODEL_BATCHES[0]
        found, fail = max_batch_for(traces.events_at, size.capacity_bytes, guess)
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
    including those whose timed run failed afterwards (scan._FreshChecks says "..., then failed")."""
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
    predicted, _ = max_batch_for(traces.events_at, capacity, traces.linear_guess(capacity) if traces.model else 2)
    proof = p.proof or {}
    found = proof.get("search") or proof.get("in_process") or {}  # "in_process": files from before fresh search trials
    trial_fits = trial_fit_batches(checks)
    return rows, MaxBatchComparison(traces.precision, capacity, predicted, p.max_batch,
                                    (found.get("fits"), found.get("fails")),
                                    (proof.get("fits"), proof.get("fails")), trial_fits)


def predict(workload: Workload, precisions: Sequence[str], sizes: Sequence[MemorySize], overhead_bytes: int | None,
            overhead_source: str, steps: int = 3, target: Target = H100, check: bool = True,
            compare_with: tuple[str, Any] | None = None) -> Prediction:
    """Trace `workload` in each precision and predict its max batch for each memory size.

    `compare_with` = (path, ScanResult) of a real scan of this workload adds predicted-vs-measured rows.
    Raises PredictError when the workload cannot be built or stepped on fake tensors, ValueError for a
    precision other than fp32/tf32/fp16/bf16.
    """
    for p in precisions:
        if p not in ("fp32", "tf32", "fp16", "bf16"):
            raise ValueError(f"unknown precision '{p}'")
    notes: list[str] = []
    results: dict[str, PrecisionPrediction] = {}
    rows: list[ComparisonRow] = []
    edges: list[MaxBatchComparison] = []
    started = time.perf_counter()
    with TraceSession(workload, steps, target) as session:
        for precision in precisions:
            traces = PrecisionTraces(session, precision, check)
            if traces.how == "traced":
                notes.append(f"{precision}: the op sequence changes with the batch, so every batch needed was traced.")
            results[precision] = _predict_precision(traces, sizes)
            if compare_with is not None and precision in compare_with[1].precisions:
                got_rows, edge = _compare(traces, compare_with[1].precisions[precision])
                rows += got_rows
                if edge is not None:
                    edges.append(edge)
        if "tf32" in precisions:
            notes.append("tf32: traced like fp32 (TF32 changes the math, not the tensors).")
        choices = ", ".join(f"{backend} ({dtype}) x{n}" for (backend, dtype), n in sorted(session.behaviour.sdpa_choices.items()))
        if choices:
            notes.append(f"scaled-dot-product attention calls, emulated as on {target.name}: {choices}.")
        answered = ", ".join(f"{op} -> {value} x{n}" for (op, value), n in sorted(session.recorder.answers.items(), key=str))
        if answered:
            notes.append(f"data-dependent values answered on fake tensors: {answered}.")
        notes += session.behaviour.notes
        notes.append(f"time: {session.build_seconds:.1f} s to import and build the model, "
                     f"{session.seconds - session.build_seconds:.1f} s tracing trials, "
                     f"{time.perf_counter() - started - session.seconds:.1f} s replaying them through the allocator model.")
    seconds, build_seconds = time.perf_counter() - started, session.build_seconds
    return Prediction(workload.name, target.name, steps, seconds, build_seconds, list(sizes), overhead_bytes,
                      overhead_source, results, notes, rows, edges, compare_with[0] if compare_with else "")


# --- the overhead a card's allocator cannot use --------------------------------------------------

def measured_overhead(paths: Sequence[str | Path]) -> tuple[int | None, str]:
    """The non-allocatable memory measured on a real card (guide.overhead_for: datasheet memory minus the
    allocator capacity a scan recorded), from the newest result file under `paths` that has one;
    (None, why) when there is none."""
    from memprobe.catalog import default_catalog
    from memprobe.compare.guide import overhead_for
    from memprobe.results import load_results

    existing = [Path(p) for p in paths if Path(p).exists()]
    if not existing:
        return None, "no scan result found to measure the overhead from"
    results = load_results(existing, strict_files=False)
    results.sort(key=lambda item: item[1].created, reverse=True)  # the newest measurement first
    for path, result in results:
        for p in result.precisions.values():
            overhead = overhead_for(result, p, default_catalog())
            if overhead is not None:
                return overhead.bytes, f"{overhead.describe()} ({path})"
    return None, f"no scan result with a recorded allocator capacity under {', '.join(str(p) for p in existing)}"


def memory_sizes(labels: Sequence[tuple[str, int]], overhead_bytes: int | None) -> list[MemorySize]:
    """Memory sizes with the capacity the allocator gets (memory - overhead; the memory itself without one).

    Raises ValueError for a size not larger than the overhead.
    """
    out = []
    for label, nbytes in labels:
        capacity = nbytes - (overhead_bytes or 0)
        if capacity <= 0:
            raise ValueError(f"{label} is not larger than the measured overhead of {overhead_bytes / 2**30:.2f} GiB")
        out.append(MemorySize(label, nbytes, capacity))
    return out


# --- text --------------------------------------------------------------------------------------------

def _pct(pred: float | None, meas: float | None) -> str:
    if pred is None or not meas:
        return "-"
    return f"{(pred / meas - 1) * 100:+.2f}%"


def render(pred: Prediction) -> str:
    """The prediction as text: per precision the fitted line and the predicted max batch per memory size,
    then (with a comparison) predicted vs measured. Every figure is labelled predicted."""
    from tabulate import tabulate

    lines = [f"memprobe predict: {pred.workload} -- PREDICTED, not measured: a fake-tensor trace of one trial "
             f"(1 warm-up + {pred.steps - 1} steps, optimizer state included) with the CUDA kernels of {pred.target}, "
             f"replayed through a model of the CUDA caching allocator; {pred.seconds:.1f} s on this CPU."]
    if pred.overhead_bytes is not None:
        lines.append(f"Usable memory = memory - {gib(pred.overhead_bytes, 2)} GiB not allocatable, {pred.overhead_source}.")
    else:
        lines.append(f"Usable memory = the memory given ({pred.overhead_source}): the CUDA context and the driver's "
                     "reservation are not subtracted, so these predictions are optimistic; give --overhead-from a scan "
                     "result to subtract the overhead measured on a real card.")
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
