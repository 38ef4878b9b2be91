"""Progress lines of a prediction: what is traced (n of m) as it starts, and a line when none came for a while.

A prediction traces trials for tens of seconds; a user at a terminal should see what it is doing. Each trace
announces itself ("tracing bert-large fp16 at batch 2 (1 of 9) ..."); with `heartbeat`, a background thread
adds "... still tracing ..." whenever `every` seconds passed without a line. Lines go to the `write` callable
(the CLI: stderr), never into the prediction's own output.
"""

from __future__ import annotations

import threading
import time
from typing import Callable


class TraceProgress:
    """Counts the traces of a prediction and writes a line per trace; see the module docstring.

    Thread-safe: the heartbeat thread and the caller share one lock, which `quiet()` holds so a fork
    never copies a half-written line or a held stream lock.
    """

    def __init__(
        self,
        write: Callable[[str], None],
        every: float = 5.0,
        heartbeat: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._write = write
        self.every = every
        self.heartbeat = heartbeat
        self.clock = clock
        self.lock = threading.RLock()
        self.planned = 0
        self.started = 0
        self.running: list[str] = []  # what is being traced now, for the heartbeat line
        self.doing = ""  # the phase when nothing is traced (building, replaying)
        self.last = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def line(self, text: str) -> None:
        """Write one line now."""
        with self.lock:
            self._write(text)
            self.last = self.clock()

    def plan(self, count: int) -> None:
        """`count` more traces are to come (they make up the m of "n of m")."""
        with self.lock:
            self.planned += count

    def tracing(self, what: str) -> str:
        """A trace of `what` ("bert-large fp16 at batch 2") starts: writes its line; returns its label for done()."""
        with self.lock:
            self.started += 1
            self.planned = max(self.planned, self.started)
            self.running.append(what)
            self.line(f"tracing {what} ({self.started} of {self.planned}) ...")
            return what

    def done(self, what: str) -> None:
        """The trace of `what` ended."""
        with self.lock:
            if what in self.running:
                self.running.remove(what)

    def phase(self, text: str) -> None:
        """Something other than tracing starts (e.g. "replaying bf16 through the allocator model"): one line."""
        with self.lock:
            self.doing = text
            self.line(f"{text} ...")

    def beat(self) -> None:
        """With `heartbeat`, write a "still ..." line if `every` seconds passed since the last line (the
        heartbeat thread's tick; a loop waiting on children calls it too). Without, nothing."""
        if not self.heartbeat:
            return
        with self.lock:
            waited = self.clock() - self.last
            if waited < self.every:
                return
            now = ", ".join(self.running) if self.running else ""
            what = f"tracing {now}" if now else (self.doing or "working")
            self.line(f"... still {what} ({waited:.0f} s since the last line)")

    def __enter__(self) -> "TraceProgress":
        if self.heartbeat:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="memprobe-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(min(0.25, self.every / 5)):
            self.beat()


def silent() -> TraceProgress:
    """A TraceProgress that writes nothing (library calls that asked for no output)."""
    return TraceProgress(lambda text: None)
