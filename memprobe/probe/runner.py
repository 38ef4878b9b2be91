"""Parent-side handle on trial processes: spawn, talk the trial protocol (core/process/protocol.py), detect crashes, clean up.

No torch here. Each Worker is one trial process (memprobe.probe.child.worker), a core/child.Child: started,
asked, killed and closed there, as every process memprobe starts. A crash (the process dies, or
reports a CRASH outcome) becomes an Attempt with outcome CRASH, and the scan carries on in a new
process. Fresh processes are cheap: `WorkerFactory` starts a fork server (Zygote) that imports torch
and the workload's module once, off the GPU, and forks each trial process from it, so a
fresh-process check costs CUDA start-up and the model build, not Python imports. Where fork is not
available (or MEMPROBE_FORKSERVER=0), trial processes are exec'd, with spares started ahead.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Mapping

from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.process.child import Child, ForkServer, ForkServerError
from memprobe.core.process.deadline import TimeLimitError, how_to_extend, limit_s
from memprobe.core.process.outcomes import CRASH, ERROR, OOM, TIMEOUT, USER_ERROR, classify_error
from memprobe.core.process.protocol import (
    Answer,
    ExitRequest,
    Failure,
    Flops,
    FlopsRequest,
    Lost,
    MeasureRequest,
    PingRequest,
    Pong,
    Ready,
    Request,
    SetupRequest,
    TrialRequest,
    TrialSettings,
)
from memprobe.core.records.records import Timed
from memprobe.core.workload.registry import Workload
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
    settings: TrialSettings = field(default_factory=TrialSettings)
    timeout_s: float = 1800.0
    # fp16: the loss scale the last fitting trial ended at. Every process built from this spec starts
    # its trials and timed runs there instead of re-learning it by skipping updates (on the H100,
    # NasNet-Large's first fp16 trial skipped 4 updates to settle at 4096; the later ones, starting
    # there, ran exactly 3 steps). Memory is the same at any scale.
    loss_scale: float | None = None

    def setup_request(self) -> SetupRequest:
        return SetupRequest(self.workload, self.precision, self.mode, self.device, self.cpu_budget_bytes, self.settings)


# The families whose build runs the user's code (workloads/custom.py): a build of theirs that never returns is theirs
# to fix (user-error), as any other error of that code.
USER_FAMILIES = ("module", "timm", "hf")


def build_limit(spec: WorkerSpec) -> float:
    """How long a trial process may take to build the workload: the time limit predict gives a build
    (MEMPROBE_TIME_LIMIT, core/process/deadline.py), at most the trial's own. Raises WorkerError for a limit that is not a
    number of seconds."""
    try:
        limit = limit_s()
    except TimeLimitError as exc:
        raise WorkerError(ERROR, str(exc)) from None
    return spec.timeout_s if limit is None else min(limit, spec.timeout_s)


LOG_PREFIX = "memprobe-worker-"  # a trial process's log: its stderr, whose tail goes into crash messages
PING_TIMEOUT_S = 60.0  # a forked process answers in milliseconds; one that hangs is replaced by exec


def _worker_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a trial process gets on top of this process's environment (Child.start puts them over the one
    recipe, core/process/child_env.py): `env` (the scan's, ScanOptions.env) and unbuffered output."""
    return {**(env or {}), "PYTHONUNBUFFERED": "1"}


def _worker_argv(preload: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "memprobe.probe.child.worker", *extra, "--preload", preload]


class Zygote(ForkServer):
    """The fork server: one `python -m memprobe.probe.child.worker --zygote-fd FD` process per scan, which has
    imported torch and `preload` (the workload's module) and forks each trial process (probe/child/zygote.py).

    Raises ForkServerError from spawn() when the server is gone or does not answer.
    """

    def __init__(self, preload: str, answer_timeout_s: float = 600.0, env: Mapping[str, str] | None = None) -> None:
        super().__init__(
            lambda fd: _worker_argv(preload, "--zygote-fd", str(fd)),
            env=_worker_env(env),  # the processes it forks have it too
            watched=True,
            answer_timeout_s=answer_timeout_s,
            log_prefix="memprobe-zygote-",
        )


class Worker:
    """One trial process (a Child, core/process/child.py). Not set up until `setup()`; ended by `close()`.

    Forked from `zygote` when one is given (with the zygote's environment), else exec'd (which costs the Python
    imports) with `env` on top of this process's environment. Raises ForkServerError when the zygote cannot fork, OSError
    when python cannot be exec'd.
    """

    def __init__(self, preload: str, zygote: Zygote | None = None, env: Mapping[str, str] | None = None) -> None:
        if zygote is not None:
            self.child = zygote.spawn(LOG_PREFIX)
        else:
            self.child = Child.start(_worker_argv(preload), env=_worker_env(env), watched=True, log_prefix=LOG_PREFIX)
        self._spec: WorkerSpec | None = None
        self.info: Ready | None = None  # setup's answer
        if zygote is not None:
            answer = self.request(PingRequest(), PING_TIMEOUT_S)
            if not (isinstance(answer, Pong) and answer.ok):
                self.close()
                raise ForkServerError(f"a forked trial process did not answer a ping within {PING_TIMEOUT_S:.0f} s")

    @property
    def spec(self) -> WorkerSpec:
        """What setup() built the process for. Raises RuntimeError before setup()."""
        if self._spec is None:
            raise RuntimeError("the trial process is not set up")
        return self._spec

    @property
    def alive(self) -> bool:
        return self.child.alive()

    def log_tail(self, lines: int = 5) -> str:
        return self.child.log_tail(lines)

    def request(self, request: Request, timeout_s: float) -> Answer | Lost:
        """Send one request and wait for its answer (a Failure when the process refused it); Lost when the process
        died (or answered what is not an answer), or did not answer within `timeout_s` (then it is killed)."""
        return self.child.ask(request, timeout_s=timeout_s)

    def _lost(self, answer: Answer | Lost) -> tuple[str, str]:
        """(CRASH, TIMEOUT or ERROR, message) for an answer that is not the one expected: the process died, did not
        answer in time, or refused the request."""
        if isinstance(answer, Lost) and answer.timed_out:
            return TIMEOUT, f"no answer within {self.spec.timeout_s:.0f} s"
        if isinstance(answer, Lost):
            return CRASH, f"trial process died: {self.log_tail() or 'no output'}"
        return ERROR, f"the trial process refused the request: {getattr(answer, 'message', answer)}"

    def setup(self, spec: WorkerSpec) -> Ready:
        """Build the workload in the process, within the build's time limit (MEMPROBE_TIME_LIMIT, as predict's).
        Raises WorkerError when that fails or takes longer."""
        self._spec = spec
        limit = build_limit(spec)
        answer = self.request(spec.setup_request(), limit)
        if isinstance(answer, Lost) and answer.timed_out and limit < spec.timeout_s:
            raise WorkerError(
                USER_ERROR if spec.workload.family in USER_FAMILIES else TIMEOUT,
                f"building {spec.workload.name} in the trial process did not finish within {limit:g} s (a build that "
                f"waits for input, a lock or the network never returns); {how_to_extend(limit)}",
                "build",
            )
        if isinstance(answer, Failure):
            raise WorkerError(answer.kind, answer.message, answer.stage)
        if not isinstance(answer, Ready):
            lost = self._lost(answer)
            # A process that died with "CUDA error: out of memory" (raised where setup could not catch it)
            # ran out of memory; a crash marker in the same text still wins (errors.classify_error).
            kind = OOM if lost[0] == CRASH and classify_error("", lost[1]) == OOM else lost[0]
            raise WorkerError(kind if kind == OOM else CRASH, f"during setup: {lost[1]}")
        self.info = answer
        return answer

    def trial(self, batch: int, steps: int, keep: bool = False, decode_steps: int | None = None) -> Attempt:
        """Run one trial; a dead or hung process becomes a CRASH or TIMEOUT attempt. `keep`: a fit leaves its
        training state in the process, for a timed run that goes on from it (measure(..., cont=True)).
        `decode_steps`: generations cut after the prefill and that many decode forwards (None: whole)."""
        started = time.perf_counter()
        request = TrialRequest(batch, steps, self.spec.loss_scale, keep, decode_steps)
        answer = self.request(request, self.spec.timeout_s)
        if not isinstance(answer, Attempt):
            lost = self._lost(answer)
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
        if not isinstance(answer, Flops):
            return Flops(None, f"while counting FLOPs: {self._lost(answer)[1]}")
        return answer

    def measure(self, batch: int, warmup: int, steps: int, budget_s: float | None = None, cont: bool = False) -> Timed:
        """Warm-up and timed steps at `batch` (fewer timed steps when they would run past `budget_s`
        seconds); a dead or hung process becomes a CRASH or TIMEOUT outcome. `cont`: go on from the trial just
        run with keep=True at this batch, as one continuous training run."""
        answer = self.request(
            MeasureRequest(batch, warmup, steps, budget_s, self.spec.loss_scale, cont), self.spec.timeout_s
        )
        if not isinstance(answer, Timed):
            outcome, error = self._lost(answer)
            return Timed(batch=batch, outcome=outcome, error=error)
        return answer

    def kill(self) -> None:
        self.child.kill()

    def close(self) -> None:
        """End the process (asked to exit, then by force) and remove its log."""
        self.child.close(ExitRequest())


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
            except ForkServerError:
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
