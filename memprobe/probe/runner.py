"""Parent-side handle on trial processes: spawn, talk the trial protocol (core/protocol.py), detect crashes, clean up.

No torch here. Each Worker is one trial process (memprobe.probe.child.worker). A crash (the process dies, or
reports a CRASH outcome) becomes an Attempt with outcome CRASH, and the scan carries on in a new
process. Fresh processes are cheap: `WorkerFactory` starts a fork server (Zygote) that imports torch
and the workload's module once, off the GPU, and forks each trial process from it, so a
fresh-process check costs CUDA start-up and the model build, not Python imports. Where fork is not
available (or MEMPROBE_FORKSERVER=0), trial processes are exec'd, with spares started ahead.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from memprobe.core.child_env import child_env
from memprobe.core.memory_model import Attempt
from memprobe.core.outcomes import CRASH, ERROR, OOM, TIMEOUT, classify_error
from memprobe.core.protocol import (
    Answer,
    ExitRequest,
    Failure,
    Flops,
    FlopsRequest,
    Lost,
    MeasureRequest,
    PingRequest,
    Pong,
    ProtocolError,
    Ready,
    Request,
    SetupRequest,
    TrialRequest,
    decode_answer,
    encode_request,
)
from memprobe.core.records import Timed
from memprobe.core.registry import Workload
from memprobe.workloads.families import family_module


class WorkerError(RuntimeError):
    """The trial process could not be set up. `kind` is no_cuda, oom, limit, crash or error; `stage` what
    was being done (cuda-context, build, or setup when unknown)."""

    def __init__(self, kind: str, message: str, stage: str = "setup") -> None:
        super().__init__(message)
        self.kind = kind
        self.stage = stage


@dataclass
class WorkerSpec:
    """Everything a trial process needs to build the workload in one precision."""

    workload: Workload
    precision: str
    mode: str = "train"
    device: str = "cuda"
    cpu_budget_bytes: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 1800.0
    # fp16: the loss scale the last fitting trial ended at. Every process built from this spec starts
    # its trials and timed runs there instead of re-learning it by skipping updates (on the H100,
    # NasNet-Large's first fp16 trial skipped 4 updates to settle at 4096; the later ones, starting
    # there, ran exactly 3 steps). Memory is the same at any scale.
    loss_scale: float | None = None

    def setup_request(self) -> SetupRequest:
        return SetupRequest(
            self.workload.to_dict(), self.precision, self.mode, self.device, self.cpu_budget_bytes, self.settings
        )


PING_TIMEOUT_S = 60.0  # a forked process answers in milliseconds; one that hangs is replaced by exec


class ZygoteError(RuntimeError):
    """The fork server is gone or did not answer; the caller falls back to exec'd processes."""


def _worker_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """A trial process's environment: the one recipe (core/child_env.py), with `env` (the variables the scan was
    given for its processes: ScanOptions.env) on top."""
    return child_env(watched=True, **{**(env or {}), "PYTHONUNBUFFERED": "1"})


class _ExecProcess:
    """A trial process started by exec: `python -m memprobe.probe.child.worker --preload MODULE`."""

    def __init__(self, preload: str, log, env: Mapping[str, str] | None = None) -> None:
        # A new session: Ctrl-C in the terminal reaches the parent only, which then ends this process.
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "memprobe.probe.child.worker", "--preload", preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
            env=_worker_env(env),
        )
        self.stdin, self.stdout = self.popen.stdin, self.popen.stdout

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait(self, timeout: float) -> None:
        self.popen.wait(timeout=timeout)

    def kill(self) -> None:
        if self.alive():
            self.popen.kill()
        self.popen.wait()


class _ForkedProcess:
    """A trial process forked by the Zygote: not our child, so liveness comes from /proc."""

    def __init__(self, pid: int, stdin, stdout) -> None:
        self.pid, self.stdin, self.stdout = pid, stdin, stdout

    def alive(self) -> bool:
        try:
            with open(f"/proc/{self.pid}/stat", encoding="ascii") as handle:
                return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False

    def wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.02)

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        # The next fresh check must not start before this process's GPU memory is released.
        self.wait(timeout=60)


class Zygote:
    """The fork server: one `python -m memprobe.probe.child.worker --zygote-fd FD` process per scan.

    Raises ZygoteError from spawn() when the server is gone or does not answer.
    """

    def __init__(self, preload: str, answer_timeout_s: float = 600.0, env: Mapping[str, str] | None = None) -> None:
        self.log = tempfile.NamedTemporaryFile(prefix="memprobe-zygote-", suffix=".log", delete=False)
        self.answer_timeout_s = answer_timeout_s
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "memprobe.probe.child.worker",
                "--zygote-fd",
                str(theirs.fileno()),
                "--preload",
                preload,
            ],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
            pass_fds=[theirs.fileno()],
            start_new_session=True,
            env=_worker_env(env),  # the processes it forks have it too
        )
        theirs.close()
        self.control = ours

    def spawn(self, log) -> _ForkedProcess:
        """Fork a trial process that reads requests from a new pipe and answers on another."""
        child_stdin, our_stdin = os.pipe()
        our_stdout, child_stdout = os.pipe()
        try:
            # The first answer can wait for the server's imports; later ones come in milliseconds.
            self.control.settimeout(self.answer_timeout_s)
            socket.send_fds(self.control, [b"spawn"], [child_stdin, child_stdout, log.fileno()])
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = self.control.recv(64)
                if not chunk:
                    raise ZygoteError("the fork server ended")
                reply += chunk
            pid = int(reply)
        except (OSError, ValueError) as exc:
            for fd in (our_stdin, our_stdout):
                os.close(fd)
            raise ZygoteError(f"the fork server did not fork a trial process ({exc})") from exc
        finally:
            os.close(child_stdin)
            os.close(child_stdout)
        return _ForkedProcess(pid, os.fdopen(our_stdin, "w"), os.fdopen(our_stdout, "r"))

    def close(self) -> None:
        """Close the control socket (the server exits on EOF) and remove its log."""
        self.control.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


class Worker:
    """One trial process. Not set up until `setup()`; ended by `close()`.

    Forked from `zygote` when one is given (with the zygote's environment), else exec'd (which costs the Python
    imports) with `env` on top of this process's environment. Raises ZygoteError when the zygote cannot fork.
    """

    def __init__(self, preload: str, zygote: Zygote | None = None, env: Mapping[str, str] | None = None) -> None:
        self.log = tempfile.NamedTemporaryFile(prefix="memprobe-worker-", suffix=".log", delete=False)
        try:
            self.proc = zygote.spawn(self.log) if zygote is not None else _ExecProcess(preload, self.log, env)
        except BaseException:
            self.log.close()
            os.unlink(self.log.name)
            raise
        self.spec: WorkerSpec | None = None
        self.info: Ready | None = None  # setup's answer
        if zygote is not None:
            answer = self.request(PingRequest(), PING_TIMEOUT_S)
            if not (isinstance(answer, Pong) and answer.ok):
                self.close()
                raise ZygoteError(f"a forked trial process did not answer a ping within {PING_TIMEOUT_S:.0f} s")

    @property
    def alive(self) -> bool:
        return self.proc.alive()

    def log_tail(self, lines: int = 5) -> str:
        try:
            with open(self.log.name, encoding="utf-8", errors="replace") as handle:
                tail = [ln.strip() for ln in handle.read().splitlines() if ln.strip()][-lines:]
        except OSError:
            return ""
        return " | ".join(tail)

    def request(self, request: Request, timeout_s: float) -> Answer | Lost:
        """Send one request and wait for its answer (a Failure when the process refused it); Lost when the process
        died (or answered what is not an answer), or did not answer within `timeout_s` (then it is killed)."""
        if not self.alive:
            return Lost()
        try:
            self.proc.stdin.write(encode_request(request))
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return Lost()
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                return Lost(timed_out=True)
            ready, _, _ = select.select([self.proc.stdout], [], [], min(remaining, 1.0))
            if ready:
                line = self.proc.stdout.readline()
                if not line:
                    return Lost()
                try:
                    return decode_answer(request, line)
                except ProtocolError:
                    return Lost()
            if not self.alive:
                return Lost()

    def _lost(self, answer: Answer | Lost, expected: type) -> tuple[str, str] | None:
        """(CRASH, TIMEOUT or ERROR, message) when the process died, did not answer in time, or refused the
        request instead of giving the `expected` answer; None otherwise."""
        if isinstance(answer, Lost) and answer.timed_out:
            return TIMEOUT, f"no answer within {self.spec.timeout_s:.0f} s"
        if isinstance(answer, Lost):
            return CRASH, f"trial process died: {self.log_tail() or 'no output'}"
        if not isinstance(answer, expected):
            return ERROR, f"the trial process refused the request: {getattr(answer, 'message', answer)}"
        return None

    def setup(self, spec: WorkerSpec) -> Ready:
        """Build the workload in the process. Raises WorkerError when that fails."""
        self.spec = spec
        answer = self.request(spec.setup_request(), spec.timeout_s)
        if isinstance(answer, Failure):
            raise WorkerError(answer.kind, answer.message, answer.stage)
        lost = self._lost(answer, Ready)
        if lost is not None:
            # A process that died with "CUDA error: out of memory" (raised where setup could not catch it)
            # ran out of memory; a crash marker in the same text still wins (errors.classify_error).
            kind = OOM if lost[0] == CRASH and classify_error("", lost[1]) == OOM else lost[0]
            raise WorkerError(kind if kind == OOM else CRASH, f"during setup: {lost[1]}")
        self.info = answer
        return answer

    def trial(self, batch: int, steps: int, keep: bool = False) -> Attempt:
        """Run one trial; a dead or hung process becomes a CRASH or TIMEOUT attempt. `keep`: a fit leaves its
        training state in the process, for a timed run that goes on from it (measure(..., cont=True))."""
        started = time.perf_counter()
        answer = self.request(TrialRequest(batch, steps, self.spec.loss_scale, keep), self.spec.timeout_s)
        lost = self._lost(answer, Attempt)
        if lost is not None:
            outcome = OOM if lost[0] == CRASH and classify_error("", lost[1]) == OOM else lost[0]
            return Attempt(batch, outcome, seconds=time.perf_counter() - started, message=lost[1])
        attempt = answer
        if attempt.fits and attempt.loss_scale:
            self.spec.loss_scale = attempt.loss_scale
        return attempt

    def flops(self) -> Flops:
        """FLOPs per sample of one step, counted in the process (None, with the reason in `error`, on failure)."""
        # Batch 1: the count is per sample anyway, and Pix2PixHD at 2048x1024 needs ~21 GB an image.
        answer = self.request(FlopsRequest(batch=1), self.spec.timeout_s)
        lost = self._lost(answer, Flops)
        if lost is not None:
            return Flops(None, f"while counting FLOPs: {lost[1]}")
        return answer

    def measure(self, batch: int, warmup: int, steps: int, budget_s: float | None = None, cont: bool = False) -> Timed:
        """Warm-up and timed steps at `batch` (fewer timed steps when they would run past `budget_s`
        seconds); a dead or hung process becomes a CRASH or TIMEOUT outcome. `cont`: go on from the trial just
        run with keep=True at this batch, as one continuous training run."""
        answer = self.request(
            MeasureRequest(batch, warmup, steps, budget_s, self.spec.loss_scale, cont), self.spec.timeout_s
        )
        lost = self._lost(answer, Timed)
        if lost is not None:
            return Timed(batch=batch, outcome=lost[0], error=lost[1])
        return answer

    def kill(self) -> None:
        self.proc.kill()

    def close(self) -> None:
        """End the process (politely, then by force) and remove its log."""
        if self.alive:
            try:
                self.proc.stdin.write(encode_request(ExitRequest()))
                self.proc.stdin.flush()
                self.proc.wait(10)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


def forkserver_available() -> bool:
    """Fork server on by default where the OS has fork and descriptor passing; MEMPROBE_FORKSERVER=0 turns it off."""
    return (
        os.environ.get("MEMPROBE_FORKSERVER", "1") != "0"
        and hasattr(os, "fork")
        and hasattr(socket, "send_fds")
        and os.path.isdir("/proc")
    )


class WorkerFactory:
    """Hands out fresh, set-up trial processes for one workload.

    With the fork server (default), each is forked pre-imported from one Zygote started here, so
    its imports overlap whatever the parent does next. Without it, `spares` exec'd processes are
    kept importing ahead. Either way nothing touches the GPU before its own setup, so a waiting
    process cannot disturb a measurement.
    """

    def __init__(
        self, workload: Workload, spares: int = 2, forkserver: bool | None = None, env: Mapping[str, str] | None = None
    ) -> None:
        """`env`: variables every trial process gets on top of this process's environment (ScanOptions.env)."""
        self.preload = family_module(workload.family)
        self.env = dict(env or {})
        self.spares = spares
        self._spare: list[Worker] = []
        use_forkserver = forkserver_available() if forkserver is None else forkserver
        self._zygote: Zygote | None = Zygote(self.preload, env=self.env) if use_forkserver else None

    @property
    def forks(self) -> bool:
        """True while fresh processes come from the fork server (cheap: no imports)."""
        return self._zygote is not None

    def _drop_dead(self) -> None:
        for worker in [w for w in self._spare if not w.alive]:
            worker.close()  # removes its log and closes its pipes
        self._spare = [w for w in self._spare if w.alive]

    def _new_worker(self) -> Worker:
        if self._zygote is not None:
            try:
                return Worker(self.preload, self._zygote)
            except ZygoteError:
                # Keep scanning with exec'd processes: slower to start, same measurements.
                self._zygote.close()
                self._zygote = None
        return Worker(self.preload, env=self.env)

    def fresh(self, spec: WorkerSpec) -> Worker:
        """A new process with the workload built. Raises WorkerError when setup fails."""
        self._drop_dead()
        worker = self._spare.pop(0) if self._spare else self._new_worker()
        try:
            worker.setup(spec)
        except BaseException:
            worker.close()
            raise
        if self._zygote is None:
            # Spares start after this setup, not during it: on the H100, three processes importing
            # torch and transformers at once took ~24 s for the first one.
            while len(self._spare) < self.spares:
                self._spare.append(Worker(self.preload, env=self.env))
        return worker

    def close(self) -> None:
        for worker in self._spare:
            worker.close()
        self._spare = []
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None
