"""A time limit on a call that may never return (a model's build, a traced trial). No torch.

`predict` runs the model's own code in its process: a build() that waits for input, a lock or a download would
hang it for ever. Inside time_limit(seconds), the call is interrupted by TimeLimitExceeded when the time is up: by
SIGALRM, or, where the model's code replaced that signal's handler or stopped its timer, by a watchdog thread that
raises it in the call (which nothing in the call can replace). It is a BaseException, so the model's own `except
Exception` does not swallow it. Only the main thread can take a signal: elsewhere (an API caller's thread) no limit
is set. The limit is LIMIT_S unless the environment sets MEMPROBE_TIME_LIMIT (seconds; 0 for none).
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

# On 2 shared cores llama-8b-4k, memprobe's largest, builds on fake tensors in 8 s and traces a trial in 8-16 s: a
# model twenty times as slow to build or trace is still inside.
LIMIT_S = 300.0
ENV = "MEMPROBE_TIME_LIMIT"
AGAIN_S = 1.0


class TimeLimitExceeded(BaseException):
    """The call ran past its time limit (`seconds`)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"did not finish within {seconds:g} s")
        self.seconds = seconds


class TimeLimitError(ValueError):
    """MEMPROBE_TIME_LIMIT is not a number of seconds."""


def limit_s() -> float | None:
    """The time limit in seconds (MEMPROBE_TIME_LIMIT, else LIMIT_S); None for no limit (0). Raises TimeLimitError
    for a value that is not a finite number >= 0."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return LIMIT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise TimeLimitError(f"{ENV}={text!r}: give the seconds a build or a trace may take (e.g. 1200; 0: no limit)")
    return value or None


def how_to_extend(seconds: float) -> str:
    """What to tell a user whose model needs longer than `seconds`."""
    return f"set {ENV}=SECONDS to allow longer than {seconds:g} s ({ENV}=0: no limit)"


class _Watch:
    """The time limit's two mechanisms over one call in the main thread, `ident`. SIGALRM (every AGAIN_S once due)
    interrupts a wait in a system call. Where the call's own code has put another SIGALRM handler in place or
    stopped the timer, a watchdog thread raises TimeLimitExceeded in it instead, as an asynchronous exception
    (PyThreadState_SetAsyncExc, which no Python code can replace): it lands at the call's next bytecode."""

    def __init__(self, seconds: float) -> None:
        class Expired(TimeLimitExceeded):  # raised by class (asynchronously): its seconds in the class
            def __init__(self) -> None:
                super().__init__(seconds)

        self.seconds, self.expired, self.ident = seconds, Expired, threading.get_ident()
        self.done, self.lock = threading.Event(), threading.Lock()

        def alarm(_signum: int, _frame: Any) -> None:
            raise Expired()

        self.alarm = alarm  # the one handler object, so that getsignal() can be compared with it

    def defeated(self) -> bool:
        """Whether SIGALRM can no longer end the call: its handler replaced or its timer stopped."""
        return signal.getsignal(signal.SIGALRM) is not self.alarm or signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)

    def watch(self) -> None:
        if self.done.wait(self.seconds + AGAIN_S / 2):
            return
        while True:
            with self.lock:
                if self.done.is_set():
                    return
                if self.defeated():
                    _async_raise(self.ident, self.expired)
            if self.done.wait(AGAIN_S):
                return

    def end(self) -> None:
        """The call is over: no exception is raised in it from now on, and one set but not yet raised is dropped."""
        with self.lock:
            self.done.set()
            _async_raise(self.ident, None)


def _async_raise(ident: int, exc: type[BaseException] | None) -> None:
    """Raise `exc` in thread `ident` at its next bytecode (None: drop one set and not yet raised)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(exc) if exc else None)


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise TimeLimitExceeded in the code inside once `seconds` have passed (None: no limit), also where that code
    puts a SIGALRM handler of its own in place or stops the timer (_Watch). The timer and the SIGALRM handler in place
    before are put back on exit."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    watch = _Watch(seconds)
    started = time.monotonic()
    before = signal.signal(signal.SIGALRM, watch.alarm)
    # Again every second until the call ends: one raised where Python cannot raise (a finalizer, a weak-reference
    # callback: "Exception ignored") is lost, and the next one lands.
    pending, _interval = signal.setitimer(signal.ITIMER_REAL, seconds, AGAIN_S)
    threading.Thread(target=watch.watch, name="memprobe-time-limit", daemon=True).start()
    try:
        yield
    finally:
        while True:  # the clean-up runs whole, even if the limit's exception lands in it as the call ends
            try:
                watch.end()
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, before)
                break
            except TimeLimitExceeded:
                continue
        if pending:  # an outer timer goes on with what was left of it
            signal.setitimer(signal.ITIMER_REAL, max(pending - (time.monotonic() - started), 0.001))
