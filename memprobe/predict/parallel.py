"""Trace several trials at once, each in a forked copy of this process that has the model built.

A trace runs one trial on fake tensors: single-threaded Python for seconds. The trials of one prediction
(each precision at batches 2, 3 and 4) do not depend on each other, so on a machine with several cores
each runs in a child forked from the process that built the model, `workers` at a time, and sends its
events back through a pipe. A forked child starts from the state right after the build, as a scan's
trial starts in a fresh process; the parent never traces, so every child starts from the same state and
the events are those of a trace run here (tests/test_predict_parallel.py compares them). What a child's trace
added to the fake tensors' dispatch cache comes back with its answer and is added here, so the children forked
after it start with it (dispatch_cache.py). Without fork (not Linux) or with one worker, the traces run here, one
after another.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import sys
import warnings
from collections import Counter
from contextlib import closing
from dataclasses import dataclass, replace
from typing import Any, Callable, Generator, Sequence, TypeVar

import torch

from memprobe.predict import dispatch_cache
from memprobe.predict.allocator import ALLOC
from memprobe.predict.collector import paused
from memprobe.predict.progress import TraceProgress, silent
from memprobe.predict.trace import PredictError, Trace, TraceSession
from memprobe.predict.workspaces import Workspace

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Job:
    """One trial to trace: a precision at a batch, in an open session."""

    session: TraceSession
    precision: str
    batch: int
    what: str  # for the progress line: "bert-large fp16 at batch 2"
    repeat_last: bool = False  # TraceSession.trace's: the last step repeated, not traced


def cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_FORK_BROKEN = "Unable to handle autograd's threading in combination with fork"
_fork_failed = False  # a child here met autograd's fork check: trace here from now on


def can_fork() -> bool:
    """Whether traces can run in forked children here: Linux, and a process that sees no GPU. Where this process
    sees one, tracing fake CUDA tensors may start CUDA (torch's FakeTensor init_gpu_context) or autograd's
    per-device threads, neither of which a forked child can use ("CUDA error: initialization error", "Unable to
    handle autograd's threading ... fork"). The CLI hides the GPUs before tracing; an API caller on a GPU machine
    traces one trial at a time."""
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "fork")
        and not _fork_failed
        and not torch.cuda.is_initialized()
        and torch.cuda.device_count() == 0
    )


Then = Callable[[Job, "Trace | PredictError"], list[Job]]


def trace_jobs(
    jobs: Sequence[Job], workers: int = 1, progress: TraceProgress | None = None, then: Then | None = None
) -> dict[Job, Trace | PredictError]:
    """Trace every job; returns job -> its Trace, or the PredictError it raised (raised where it is needed), the
    jobs in the order given, then those `then` added.
    `then(job, result)`, called as each job ends, gives jobs to trace after it (the caller counts them in
    `progress`): what to trace next can depend on what a trace showed, and no worker waits for a round to end.

    With workers > 1 (and fork), at most `workers` children run at once. A child that dies without an
    answer (a signal, memory) gives a PredictError saying so. A child that autograd refuses to run after fork
    (this process ran autograd's device threads before) is traced again here, and so is every later job.
    """
    global _fork_failed
    progress = progress or silent()
    then = then or (lambda job, result: [])
    progress.plan(len(jobs))
    if workers <= 1 or not can_fork():
        return _trace_all_here(list(jobs), progress, then)
    results = _trace_in_children(list(jobs), workers, progress, then)
    again = [job for job, r in results.items() if _fork_broke(r)]
    if again:
        _fork_failed = True
        progress.plan(len(again))
        results.update(_trace_all_here(again, progress, then))
    return {**{job: results[job] for job in jobs if job in results}, **results}  # children end in any order


def _fork_broke(result: Trace | PredictError) -> bool:
    return isinstance(result, PredictError) and _FORK_BROKEN in str(result)


def _trace_all_here(jobs: list[Job], progress: TraceProgress, then: Then) -> dict[Job, Trace | PredictError]:
    """Trace the jobs here, one after another, and those `then` adds."""
    results: dict[Job, Trace | PredictError] = {}
    while jobs:
        job = jobs.pop(0)
        results[job] = _trace_here(job, progress)
        jobs += then(job, results[job])
    return results


def _trace_here(job: Job, progress: TraceProgress) -> Trace | PredictError:
    label = progress.tracing(job.what)
    try:
        return job.session.trace(job.precision, job.batch, job.repeat_last)
    except PredictError as exc:
        return exc
    finally:
        progress.done(label)


# --- children ---------------------------------------------------------------------------------------


def _portable(events: list[tuple]) -> list[tuple]:
    """Events with op labels (OpOverload, not picklable) as ("op", "aten.mm.default")."""
    return [
        (e[0], e[1], e[2], e[3] if isinstance(e[3], (str, Workspace)) else ("op", str(e[3]))) if e[0] == ALLOC else e
        for e in events
    ]


def _resolve(events: list[tuple]) -> list[tuple]:
    """_portable's inverse: op labels back to the OpOverload objects a trace made here holds."""
    op = dispatch_cache.op_named
    return [(e[0], e[1], e[2], op(e[3][1])) if e[0] == ALLOC and isinstance(e[3], tuple) else e for e in events]


@dataclass(frozen=True)
class Counts:
    """What a session counted and noted while tracing: the recorder's answers, the SDPA back-ends chosen, notes."""

    answers: Counter
    sdpa_choices: Counter
    notes: list[str]

    @classmethod
    def of(cls, session: TraceSession) -> Counts:
        """A copy of what `session` has counted and noted so far."""
        return cls(
            Counter(session.recorder.answers), Counter(session.behaviour.sdpa_choices), list(session.behaviour.notes)
        )

    def since(self, before: Counts) -> Counts:
        """What was counted and noted after `before`."""
        notes = [n for n in self.notes if n not in before.notes]
        return Counts(self.answers - before.answers, self.sdpa_choices - before.sdpa_choices, notes)


@dataclass(frozen=True)
class Warned:
    """A warning a child caught, to be shown here (warnings.warn_explicit's arguments)."""

    message: str
    category: type[Warning]
    filename: str
    lineno: int


@dataclass(frozen=True)
class TraceAnswer:
    """What a forked tracing child sends back, pickled: its Trace (op labels portable, _portable) or the text of
    the PredictError it raised, what it counted, noted and warned, and its dispatch-cache entries
    (dispatch_cache.added_since)."""

    trace: Trace | None
    error: str | None
    counts: Counts
    warned: list[Warned]
    cache: bytes


def _child_answer(job: Job) -> bytes:
    """In a forked child: trace the job; the pickled TraceAnswer."""
    before = Counts.of(job.session)
    cache = dispatch_cache.mark()
    trace, error = None, None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # the parent's filters decide what is shown, once
        try:
            job.session.last_in_process = True
            traced = job.session.trace(job.precision, job.batch, job.repeat_last)
            trace = replace(traced, events=_portable(traced.events))
        except PredictError as exc:
            error = str(exc)
    warned = [Warned(str(w.message), w.category, w.filename, w.lineno) for w in caught]
    answer = TraceAnswer(trace, error, Counts.of(job.session).since(before), warned, dispatch_cache.added_since(cache))
    return pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)


def read_trace_answer(data: bytes) -> TraceAnswer | None:
    """The TraceAnswer a child wrote, or None where it wrote nothing. Raises ValueError where it wrote something
    else (not a pickle, or not a TraceAnswer)."""
    if not data:
        return None
    try:
        answer = pickle.loads(data)
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
        raise ValueError(f"not a trace answer: {type(exc).__name__}: {exc}") from exc
    if not isinstance(answer, TraceAnswer):
        raise ValueError(f"not a trace answer: a {type(answer).__name__}")
    return answer


def _fork(answer: Callable[[], bytes]) -> tuple[int, int]:
    """Fork a child that writes answer()'s bytes to a pipe and ends; returns (the pipe's read end, the pid). The
    child dies with this process, ends quietly on Ctrl-C (the parent reports it), and writes nothing when answer()
    raises: the parent sees no answer."""
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid != 0:
        os.close(write_fd)
        return read_fd, pid
    code = 0
    try:
        os.close(read_fd)
        from memprobe.core.process.lifeline import set_death_signal

        set_death_signal()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        view = memoryview(answer())
        while view:
            view = view[os.write(write_fd, view) :]
    except BaseException:  # noqa: BLE001 - nothing may escape into the parent's code; the parent sees no answer
        code = 1
    finally:
        os._exit(code)


def _end(pid: int, fd: int) -> None:
    """Kill and reap a child still running, and close its pipe."""
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
    os.close(fd)


def _forked(
    waiting: list[T], start: Callable[[T], tuple[int, int]], workers: int, beat: Callable[[], None] | None = None
) -> Generator[tuple[T, bytes, int], None, None]:
    """Run a forked child per item of `waiting` (`start(item)` forks it: _fork's (read fd, pid)), `workers` at a
    time, taking them from the front of the list, and yield (item, what its child wrote, its wait status) as each
    ends; items the caller appends meanwhile are run too. `beat` is called about once a second while they run.
    Children still running when the generator is closed (an exception or Ctrl-C in the caller) are killed and
    reaped: close it (contextlib.closing)."""
    running: dict[int, tuple[T, int, bytearray]] = {}  # read fd -> (item, pid, data)
    try:
        while waiting or running:
            while waiting and len(running) < workers:
                item = waiting.pop(0)
                read_fd, pid = start(item)
                running[read_fd] = (item, pid, bytearray())
            ready, _w, _x = select.select(list(running), [], [], 1.0)
            for fd in ready:
                chunk = os.read(fd, 1 << 20)
                if chunk:
                    running[fd][2].extend(chunk)
                    continue
                item, pid, data = running.pop(fd)
                os.close(fd)
                _pid, status = os.waitpid(pid, 0)
                yield item, bytes(data), status
            if beat is not None:
                beat()
    finally:
        for fd, (_item, pid, _data) in running.items():
            _end(pid, fd)


_SHOWN: set[Warned] = set()  # the children's warnings shown here


def _trace_in_children(
    jobs: list[Job], workers: int, progress: TraceProgress, then: Then
) -> dict[Job, Trace | PredictError]:
    """Trace each job in a forked child, `workers` at a time, and those `then` adds; collect their answers. A job
    autograd refused to fork for gets no `then` here (trace_jobs traces it again here, and calls it then)."""
    results: dict[Job, Trace | PredictError] = {}
    labels: dict[Job, str] = {}

    def start(job: Job) -> tuple[int, int]:
        labels[job] = progress.tracing(job.what)
        with progress.lock, warnings.catch_warnings():  # no heartbeat line is half-written in the copy
            # Python 3.12+ warns about forking with threads (the heartbeat's); the child uses none of them.
            warnings.simplefilter("ignore", DeprecationWarning)
            return _fork(lambda: _child_answer(job))

    try:
        with closing(_forked(jobs, start, workers, progress.beat)) as ended:
            for job, data, status in ended:
                progress.done(labels.pop(job))
                # A trace is tens of thousands of tuples, kept to the end: unpickled without collections, then
                # frozen, so neither this process's collections nor those of the children forked next walk them.
                with paused(keep=True):
                    results[job] = _answered(job, data, status)
                if not _fork_broke(results[job]):
                    jobs += then(job, results[job])
    finally:
        for label in labels.values():  # children killed (an exception or Ctrl-C here)
            progress.done(label)
    return results


def _answered(job: Job, data: bytes, status: int) -> Trace | PredictError:
    """The Trace (or PredictError) a child wrote for `job`; what it counted, noted and warned is taken over here."""
    try:
        answer = read_trace_answer(data)
    except ValueError as exc:
        return PredictError(f"{job.what}: the tracing process's answer cannot be read ({exc})")
    if answer is None:
        how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit code {os.WEXITSTATUS(status)}"
        return PredictError(f"{job.what}: the tracing process ended without an answer ({how})")
    if answer.error is not None and _FORK_BROKEN in answer.error:
        return PredictError(answer.error)  # traced again here: what the child counted before it failed is not kept
    dispatch_cache.merge(answer.cache)  # the children forked from now on start with it
    job.session.recorder.answers.update(answer.counts.answers)
    job.session.behaviour.sdpa_choices.update(answer.counts.sdpa_choices)
    job.session.behaviour.notes += [n for n in answer.counts.notes if n not in job.session.behaviour.notes]
    for warned in answer.warned:
        if warned not in _SHOWN:  # once per process, as Python's default filter shows a warning once per place
            _SHOWN.add(warned)
            warnings.warn_explicit(warned.message, warned.category, warned.filename, warned.lineno)
    if answer.trace is None:
        return PredictError(answer.error or f"{job.what}: the tracing process sent neither a trace nor an error")
    return replace(answer.trace, events=_resolve(answer.trace.events))


# --- replays ----------------------------------------------------------------------------------------


def forked_map(fn: Callable[[T], R], items: Sequence[T], workers: int = 1) -> list[R]:
    """[fn(item) for item in items], each in a child forked from this process, `workers` at a time, where
    can_fork() (else here, one after another). For work that only reads what this process holds (the allocator
    replays of traced precisions): what a child changes is lost. An exception fn raised in a child is raised
    here; an item whose child ended without an answer is computed here."""
    if workers <= 1 or len(items) <= 1 or not can_fork():
        return [fn(item) for item in items]
    answers: dict[int, MapAnswer | None] = {}

    def start(index: int) -> tuple[int, int]:
        return _fork(lambda: _map_answer(fn, items[index]))

    with closing(_forked(list(range(len(items))), start, workers)) as ended:
        for index, data, _status in ended:
            answers[index] = _read_map_answer(data)
    out = []
    for index, item in enumerate(items):
        answer = answers[index]
        if answer is not None and answer.raised is not None:
            raise answer.raised
        out.append(answer.value if answer is not None else fn(item))
    return out


@dataclass(frozen=True)
class MapAnswer:
    """What a forked_map child sends back, pickled: fn(item)'s value, or the exception fn raised."""

    value: Any = None
    raised: Exception | None = None


def _map_answer(fn: Callable[[T], R], item: T) -> bytes:
    """In a forked child: the pickled MapAnswer; b"" when it does not pickle (the parent computes the item again)."""
    try:
        answer = MapAnswer(value=fn(item))
    except Exception as exc:  # noqa: BLE001 - raised again in the parent
        answer = MapAnswer(raised=exc)
    try:
        return pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - see the docstring
        return b""


def _read_map_answer(data: bytes) -> MapAnswer | None:
    """The MapAnswer a child wrote, or None where it wrote none that reads as one (the item is computed here)."""
    try:
        answer = pickle.loads(data) if data else None
    except (pickle.UnpicklingError, EOFError, ValueError, AttributeError, ImportError):
        return None
    return answer if isinstance(answer, MapAnswer) else None
