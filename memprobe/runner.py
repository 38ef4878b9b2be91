"""Parent-side handle on trial processes: spawn, talk JSON lines, detect crashes, clean up.

No torch here. Each Worker is one `python -m memprobe.worker` process. A crash (the process
dies, or reports a CRASH outcome) becomes an Attempt with outcome CRASH, and the scan carries on
in a new process. `WorkerFactory` keeps one spare process pre-imported (torch, transformers) but
CUDA-free, so a fresh-process check costs CUDA start-up and model build, not Python imports.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from .errors import CRASH, ERROR, TIMEOUT
from .registry import FAMILIES, Workload
from .search import Attempt


class WorkerError(RuntimeError):
    """The trial process could not be set up. `kind` is no_cuda, oom, limit, crash or error."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


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

    def setup_request(self) -> dict[str, Any]:
        return {
            "op": "setup",
            "workload": self.workload.to_dict(),
            "precision": self.precision,
            "mode": self.mode,
            "device": self.device,
            "cpu_budget_bytes": self.cpu_budget_bytes,
            "settings": self.settings,
        }


class Worker:
    """One trial process. Not set up until `setup()`; closed by `close()` (also on garbage collection)."""

    def __init__(self, preload: str) -> None:
        self.log = tempfile.NamedTemporaryFile(prefix="memprobe-worker-", suffix=".log", delete=False)
        # A new session: Ctrl-C in the terminal reaches the parent only, which then ends this process.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memprobe.worker", "--preload", preload],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
            text=True, start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.spec: WorkerSpec | None = None
        self.info: dict[str, Any] = {}

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 5) -> str:
        try:
            with open(self.log.name, encoding="utf-8", errors="replace") as handle:
                tail = [ln.strip() for ln in handle.read().splitlines() if ln.strip()][-lines:]
        except OSError:
            return ""
        return " | ".join(tail)

    def request(self, payload: dict[str, Any], timeout_s: float) -> dict[str, Any] | None:
        """Send one request and wait for its answer; None when the process died or timed out."""
        if not self.alive:
            return None
        try:
            self.proc.stdin.write(json.dumps(payload) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                return {"timeout": True}
            ready, _, _ = select.select([self.proc.stdout], [], [], min(remaining, 1.0))
            if ready:
                line = self.proc.stdout.readline()
                if not line:
                    return None
                return json.loads(line)
            if not self.alive:
                return None

    def setup(self, spec: WorkerSpec) -> dict[str, Any]:
        """Build the workload in the process. Raises WorkerError when that fails."""
        self.spec = spec
        answer = self.request(spec.setup_request(), spec.timeout_s)
        if answer is None or answer.get("timeout"):
            raise WorkerError(CRASH, f"trial process ended during setup: {self.log_tail() or 'no output'}")
        if not answer.get("ok"):
            raise WorkerError(answer.get("kind", ERROR), answer.get("message", "setup failed"))
        self.info = answer
        return answer

    def trial(self, batch: int, steps: int) -> Attempt:
        """Run one trial; a dead or hung process becomes a CRASH or TIMEOUT attempt."""
        started = time.perf_counter()
        answer = self.request({"op": "trial", "batch": batch, "steps": steps}, self.spec.timeout_s)
        if answer is None:
            return Attempt(batch, CRASH, seconds=time.perf_counter() - started,
                           message=f"trial process died: {self.log_tail() or 'no output'}")
        if answer.get("timeout"):
            return Attempt(batch, TIMEOUT, seconds=time.perf_counter() - started,
                           message=f"no answer within {self.spec.timeout_s:.0f} s")
        return Attempt.from_dict(answer["attempt"])

    def measure(self, batch: int, warmup: int, steps: int) -> dict[str, Any]:
        answer = self.request({"op": "measure", "batch": batch, "warmup": warmup, "steps": steps},
                              self.spec.timeout_s)
        if answer is None:
            return {"batch": batch, "outcome": CRASH, "error": f"trial process died: {self.log_tail()}"}
        if answer.get("timeout"):
            return {"batch": batch, "outcome": TIMEOUT, "error": f"no answer within {self.spec.timeout_s:.0f} s"}
        return answer

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        """End the process (politely, then by force) and remove its log."""
        if self.alive:
            try:
                self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
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


class WorkerFactory:
    """Hands out fresh, set-up workers, keeping `spares` pre-imported processes ready.

    A proof needs two fresh processes back to back; with two spares both skip the imports.
    Spares never touch the GPU before their own setup, so they cannot disturb a measurement.
    """

    def __init__(self, workload: Workload, spares: int = 2) -> None:
        self.preload = FAMILIES[workload.family].split(":")[0]
        self.spares = spares
        self._spare: list[Worker] = []

    def _drop_dead(self) -> None:
        for worker in [w for w in self._spare if not w.alive]:
            worker.close()  # removes its log and closes its pipes
        self._spare = [w for w in self._spare if w.alive]

    def _top_up(self) -> None:
        self._drop_dead()
        while len(self._spare) < self.spares:
            self._spare.append(Worker(self.preload))

    def fresh(self, spec: WorkerSpec) -> Worker:
        """A new process with the workload built. Raises WorkerError when setup fails."""
        self._drop_dead()
        worker = self._spare.pop(0) if self._spare else Worker(self.preload)
        self._top_up()  # start the next ones' imports while this one sets up
        try:
            worker.setup(spec)
        except BaseException:
            worker.close()
            raise
        return worker

    def close(self) -> None:
        for worker in self._spare:
            worker.close()
        self._spare = []
