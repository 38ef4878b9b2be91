"""Build a workload on fake tensors and trace one scan trial at a batch (build + trial events).

The trial of a scan (one warm-up step + K more, optimizer state included; probe/trial.run_trial) is run on
fake tensors with PyTorch's code paths switched to what they do on CUDA (fakecuda.py); the recorder gives
the allocation events, which allocator.py replays.
"""

from __future__ import annotations

import gc
import inspect
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from memprobe.core.process.deadline import TimeLimitError, TimeLimitExceeded, how_to_extend, limit_s, time_limit
from memprobe.core.process.outcomes import described
from memprobe.core.workload.registry import Workload
from memprobe.core.workload.run_length import steps_at_fit
from memprobe.predict.allocator import ALLOC, FREE, MARK
from memprobe.predict.collector import paused
from memprobe.predict.fake_mode import BuildValues
from memprobe.predict.fakecuda import H100, Target, cuda_optimizers
from memprobe.predict.recorder import Recorder
from memprobe.predict.session import fake_session
from memprobe.training.step import run_step, run_until_state
from memprobe.workloads.base import Amp, UserModelError, cuda_stand_in
from memprobe.workloads.families import family_builder

TRIAL_MARK = "trial"  # where run_trial called reset_peak_memory_stats (after empty_cache)
STEP_MARK = "step"  # where a traced step begins (dropped from a Trace's events)
DECODE_MARK, DECODE_END = "decode", "decode-end"  # a generation's decode forwards (dropped from a Trace's events)
# Decode forwards traced per generation where every one has the same shapes (workloads/generation.py): the last two
# are compared byte for byte, and the replay runs the last one again for the N - 1 - DECODE_TRACED not traced.
DECODE_TRACED = 3


class PredictError(RuntimeError):
    """The workload cannot be predicted (it cannot be built or stepped on fake tensors)."""


@dataclass
class Trace:
    """The events of building the model and of one trial at `batch`, ids renumbered 1..n in ALLOC order."""

    batch: int
    events: list[tuple]
    steps: int
    repeated: bool = False  # the last step is the one before it repeated, not traced (repeat_last_step)
    step_at: tuple[int, ...] = ()  # index in events where each step starts, and where the last one ends
    # A generation's trace: (mark, index) of each decode forward's start (DECODE_MARK) and each decode loop's end
    # (DECODE_END), and how many more times each generation's last decode forward runs than were traced.
    decode_at: tuple[tuple[str, int], ...] = ()
    decode_more: int = 0

    def decode_spans(self) -> list[tuple[int, int]]:
        """(start, end) in events of each generation's last traced decode forward."""
        spans, last = [], None
        for mark, index in self.decode_at:
            if mark == DECODE_MARK:
                last = index
            elif last is not None:
                spans.append((last, index))
                last = None
        return spans

    def decode_repeats(self) -> bool:
        """Whether each generation's last two traced decode forwards are the same, byte for byte (the same events,
        each freeing only what it allocated): what running the last one again for the untraced ones assumes."""
        starts = [index for mark, index in self.decode_at if mark == DECODE_MARK]
        for start, end in self.decode_spans():
            before = max((s for s in starts if s < start), default=None)
            if before is None or not _same_step(self.events[before:start], self.events[start:end]):
                return False
        return True

    # (op, its largest output in elements) for the ops whose CUDA kernel counts them in 32 bits (INT32_COUNT_OPS)
    int32_counts: tuple[tuple[str, int], ...] = ()

    @property
    def traced(self) -> int:
        """How many leading events were traced: all of them, or those before the repeated step."""
        return self.step_at[-2] if self.repeated else len(self.events)

    def last_step_repeats(self) -> bool:
        """Whether the last step is the one before it again, byte for byte: the same events, its allocations
        (numbered in order) at the same offsets, and each step freeing only what it allocated. A trace of every
        step that says so shows, for its workload and precision, what repeat_last_step assumes."""
        if self.repeated or len(self.step_at) < 3:
            return False
        a, b, end = self.step_at[-3:]
        return _same_step(self.events[a:b], self.events[b:end])


def _same_step(before: list[tuple], last: list[tuple]) -> bool:
    """Whether `last` is `before` again: the same events, its allocations (numbered in order) at the same offsets and
    sizes, and each freeing only what it allocated."""
    if len(before) != len(last):
        return False
    first_id = [next((e[1] for e in part if e[0] == ALLOC), 0) for part in (before, last)]
    counts = [sum(1 for e in part if e[0] == ALLOC) for part in (before, last)]
    for x, y in zip(before, last):
        if x[0] != y[0]:
            return False
        if x[0] == ALLOC:
            if x[2:] != y[2:] or x[1] - first_id[0] != y[1] - first_id[1]:
                return False
        elif x[0] == FREE:
            offset = x[1] - first_id[0]
            if not 0 <= offset < counts[0] or offset != y[1] - first_id[1]:
                return False
        elif x != y:
            return False
    return True


def _canonical(
    build: list[tuple], trial: list[tuple], step_at: list[int] | None = None, decode_at: list | None = None
) -> list[tuple]:
    """Build events, the trial mark, then the trial's events; ids renumbered; frees of storages
    allocated outside these sections (an earlier trial's leftovers) dropped. Step and decode marks are dropped too;
    with `step_at` (`decode_at`), where each stood (an index into the result) is appended to it."""
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
        elif kind == MARK and event[1] == STEP_MARK and step_at is not None:
            step_at.append(len(out))
        elif kind == MARK and event[1] in (DECODE_MARK, DECODE_END) and decode_at is not None:
            decode_at.append((event[1], len(out)))
    return out


def repeat_last_step(trial: list[tuple]) -> list[tuple] | None:
    """`trial` (events with a STEP_MARK before each step and after the last) with its last step's events once
    more, under new ids; None when that step keeps memory for a later step or frees an earlier step's (each of
    its allocations must be freed within it, and each free be of one of them): such a step may not repeat itself.

    Steps after the warm-up run the same ops on the same sizes from the same live memory (train_step drops
    the gradients and the loss at its end), so the trial's third step is the second one again. Whether that
    holds for a workload is checked where it matters: a batch model made from such traces is compared byte
    for byte with a trace of all its steps (batch_model.PrecisionTraces)."""
    marks = [i for i, e in enumerate(trial) if e[0] == MARK and e[1] == STEP_MARK]
    if len(marks) < 2:
        return None
    last = trial[marks[-2] : marks[-1]]
    allocated = {e[1] for e in last if e[0] == ALLOC}
    if allocated != {e[1] for e in last if e[0] == FREE}:
        return None
    new_ids = {old: -(n + 1) for n, old in enumerate(allocated)}  # negative: never one of the recorder's ids
    again = [
        (ALLOC, new_ids[e[1]], e[2], e[3]) if e[0] == ALLOC else (FREE, new_ids[e[1]]) if e[0] == FREE else e
        for e in last
    ]
    return trial[: marks[-1]] + again + trial[marks[-1] :]


class _EmulatedAmp(Amp):
    """Amp whose autocast is the emulated CUDA autocast (fakecuda.CudaBehaviour.autocast)."""

    def __init__(self, precision: str, behaviour, scaler_class: type | None = None) -> None:
        super().__init__(precision, torch.device("cpu"), scaler_class=scaler_class)
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

    def __init__(
        self,
        workload: Workload,
        steps: int = 3,
        target: Target = H100,
        wrap: Callable[[Any], dict[str, Any]] | None = None,
        fresh: bool = False,
        mode: str = "train",
        precision: str | None = None,
    ) -> None:
        """`wrap(task)`, when given, wraps the built task's model (data_parallel.wrap_for_trace) before the
        build events are taken, so what the wrapper allocates counts as built. `fresh`: build the model
        again before every trace after the first, for wrappers whose state outlives a trial (FSDP2
        initialises lazily at its first forward; a scan's trial runs in a fresh process). `mode` "infer"
        traces forward passes under inference_mode, as a `--mode infer` trial runs them; "generate" whole generations
        (workloads/generation.py), built for `precision` (the weights' dtype), a few decode forwards traced per
        generation where they all have the same shapes (DECODE_TRACED)."""
        if mode not in ("train", "infer", "generate"):
            raise ValueError(f"unknown mode '{mode}'")
        if steps < (3 if mode == "train" else 1):
            raise ValueError("a trial is 1 warm-up step + K >= 2 steps")
        self.mode, self.precision = mode, precision
        if (
            mode == "generate"
        ):  # every generation of a fit is traced (core/workload/run_length.py): none is repeated whole
            steps = steps_at_fit(mode, steps)
        self._short_decode = mode == "generate"  # trace DECODE_TRACED decode forwards (until a trace shows otherwise)
        self.workload = workload
        self.steps = steps
        self.target = target
        self.wrap = wrap
        self.fresh = fresh
        try:
            self.limit = limit_s()  # the build and each trace: a model's code that never returns must not hang here
        except TimeLimitError as exc:
            raise PredictError(str(exc)) from None
        self._traced = 0
        self._repeats = mode == "train"  # repeat_last_step holds here (until a trace shows it does not)
        self.last_in_process = False  # this process ends after its next trace: what the trial held is not collected
        self.seconds = 0.0
        self.build_seconds = 0.0
        self._stack: list = []
        self.trial_edit: Any = None

    def __enter__(self) -> "TraceSession":
        started = time.perf_counter()
        with paused():  # imports the family's libraries (timm, transformers): see collector.py
            build = _builder(self.workload)
        session = fake_session(self.target)
        self.fake, self.behaviour = session.__enter__()
        self._stack.append(session)
        self.recorder = Recorder(self.target)
        self.recorder.__enter__()
        try:
            # A build reads true tensor values (fake_mode.BuildValues) and makes the layouts it makes on CUDA
            with time_limit(self.limit), BuildValues(), cuda_stand_in():
                takes = self.precision is not None and "precision" in inspect.signature(build).parameters
                extra = {"precision": self.precision} if takes else {}
                self.task = build(self.workload.params, self.workload.optimizer, torch.device("cpu"), **extra)
                # Adopt the weights: Parameter(...) and swap_tensors made them without an op.
                for t in [*self.task.model.parameters(), *self.task.model.buffers()]:
                    self.recorder.track(t)
                if self.wrap is not None:
                    wrapped_from = len(self.recorder.events)
                    self.wrap(self.task)
                    # What a wrapper does to each trial that the trace cannot run (data_parallel: DDP's bucket
                    # rebuild), given the allocations the wrap made.
                    self.trial_edit = getattr(self.task, "trial_edit", None)
                    if self.trial_edit is not None and not self.trial_edit.adopt(self.recorder.events[wrapped_from:]):
                        self.trial_edit = None
            gc.collect()
            self.recorder.sweep()
        except TimeLimitExceeded as late:
            self.__exit__(None, None, None)
            raise PredictError(
                f"{self.workload.name}: building the model on fake tensors {late} (a build that waits for input, a "
                f"lock or the network never returns); {how_to_extend(late.seconds)}"
            ) from None
        except Exception as exc:
            self.__exit__(None, None, None)
            if isinstance(exc, PredictError):
                raise
            if isinstance(exc, UserModelError):  # says what to change already: the class name adds nothing
                said, target = str(exc).splitlines()[0], str(self.workload.params.get("target") or "")
                named = said.replace(target, self.workload.name) if target and target in said else None
                raise PredictError(named or f"{self.workload.name}: {said}") from exc
            raise PredictError(
                f"{self.workload.name}: cannot build it on fake tensors: {described(exc).splitlines()[0]}"
            ) from exc
        self.build_events = list(self.recorder.events)
        built = time.perf_counter() - started
        self.build_seconds += built  # summed over rebuilds (fresh)
        self.seconds += built
        return self

    def __exit__(self, *exc) -> None:
        recorder = getattr(self, "recorder", None)
        if recorder is not None:
            recorder.__exit__(None, None, None)
            del self.recorder  # a closed session has none (trace refuses to run)
        while self._stack:
            self._stack.pop().__exit__(None, None, None)

    def _rebuild(self) -> None:
        """Close the fake session and build the model again in a new one, keeping the counts the notes use."""
        answers, choices, notes = self.recorder.answers, self.behaviour.sdpa_choices, self.behaviour.notes
        self.__exit__(None, None, None)
        self.__enter__()
        self.recorder.answers.update(answers)
        self.behaviour.sdpa_choices.update(choices)
        self.behaviour.notes[:0] = [n for n in notes if n not in self.behaviour.notes]

    def trace(self, precision: str, batch: int, repeat_last: bool = False) -> Trace:
        """Run one trial (trial.run_trial's steps) at `batch` and return build + trial events.

        `repeat_last`: trace all steps but the last and repeat the one before it (repeat_last_step), a third
        less work, where the session's traces allow it; otherwise every step is traced. Only for traces that
        are checked against a trace of every step. Raises PredictError when the step fails on fake tensors.
        """
        repeat = repeat_last and self._repeats
        if getattr(self, "recorder", None) is None:
            raise PredictError(f"{self.workload.name}: the trace session is closed")
        if self.fresh and self._traced:
            self._rebuild()
        self._traced += 1
        rec = self.recorder
        started = time.perf_counter()
        rec.cublas_allocated = False  # each traced trial stands for a fresh process
        rec.int32_counts = {}
        start = rec.mark(TRIAL_MARK)
        task = self.task
        ran, decode_more = 0, 0
        try:
            with time_limit(self.limit):
                # The batch and the mixed-precision state live in _steps' frame alone: gone when it returns.
                ran, decode_more = self._steps(task, rec, precision, batch, self.steps - 1 if repeat else self.steps)
            failure = None
        except TimeLimitExceeded as late:  # make_batch or the step waits for something that never comes
            failure = f"{late}; {how_to_extend(late.seconds)}"
        except Exception as exc:  # noqa: BLE001 - reported as a PredictError below, outside the except block
            failure = described(exc).splitlines()[0]
        trial = rec.events[start + 1 : self.end_trial(collect=False)]
        repeated = repeat_last_step(trial) if repeat and failure is None else None
        if self.trial_edit is not None and failure is None:  # after the repeat: an edit may span the steps
            trial = self.trial_edit(trial, STEP_MARK)
            repeated = self.trial_edit(repeated, STEP_MARK) if repeated is not None else None
        if not self.last_in_process or (repeat and failure is None and repeated is None):
            self.collect()  # for the next trace here (in a forked child that is the full trace done below)
        self.seconds += time.perf_counter() - started
        if failure is not None:
            raise PredictError(
                f"{self.workload.name} {precision} batch {batch}: the step failed on fake tensors: {failure}"
            )
        step_at: list[int] = []
        counts = tuple(sorted(rec.int32_counts.items()))
        if repeat:
            if repeated is None:
                self._repeats = False
                return self.trace(precision, batch)
            events = _canonical(self.build_events, repeated, step_at)
            return Trace(batch, events, ran + 1, repeated=True, step_at=tuple(step_at), int32_counts=counts)
        decode_at: list[tuple[str, int]] = []
        events = _canonical(self.build_events, trial, step_at, decode_at)
        made = Trace(
            batch,
            events,
            ran,
            step_at=tuple(step_at),
            decode_at=tuple(decode_at),
            decode_more=decode_more,
            int32_counts=counts,
        )
        if decode_more and not made.decode_repeats():  # the decode forwards differ: trace every one of them
            self._short_decode = False
            return self.trace(precision, batch)
        return made

    def _steps(self, task: Any, rec: Recorder, precision: str, batch: int, steps: int) -> tuple[int, int]:
        """A traced trial's steps (trace), each after a STEP_MARK, and the mark that ends the last: (steps run, how
        many more decode forwards each generation runs than were traced). Raises what a step raises."""
        if self.mode == "train":
            task.start()
            cuda_optimizers(task)
        amp = _EmulatedAmp(precision, self.behaviour, getattr(task, "scaler_class", None))
        inputs = task.make_batch(batch)
        decode_more = self._generating(task, rec)

        def step() -> None:
            rec.boundary(STEP_MARK)
            run_step(task, amp, inputs, self.mode)

        ran = run_until_state(step, amp, steps, self.mode)
        rec.boundary(STEP_MARK)  # where the last step ends: before the batch and the state are freed, on return
        return ran, decode_more

    def _generating(self, task: Any, rec: Recorder) -> int:
        """In generate mode, have the task's generations mark their decode forwards in the trace and run
        DECODE_TRACED of them where they all have the same shapes; returns how many more each generation runs
        (0: all traced)."""
        if self.mode != "generate":
            return 0

        def mark(point: str) -> None:
            if point in ("decode", "end"):
                rec.boundary(DECODE_MARK if point == "decode" else DECODE_END)

        task.mark = mark
        decoded = task.settings.new_tokens - 1
        short = self._short_decode and decoded > DECODE_TRACED and task.decode_shapes_repeat()
        task.decode_steps = DECODE_TRACED if short else None
        return decoded - DECODE_TRACED if short else 0

    def end_trial(self, collect: bool = True) -> int:
        """Close a traced trial (trace, and predict/breakdown.py's tracked one): mark its end and (`collect`)
        collect what it held (see collect()). Returns the end mark's index."""
        end = self.recorder.mark("end")
        if collect:
            self.collect()
        return end

    def collect(self) -> None:
        """After a trial's end mark: stop the task and collect what it held with recording off, then sweep the
        recorder, so the next trial here starts from the state after the build. A forked child that ends after
        its one trace skips it (last_in_process): a third of a second of a full collection, wasted there."""
        rec = self.recorder
        rec.recording = False
        self.task.stop()
        gc.collect()
        rec.recording = True
        rec.sweep()
