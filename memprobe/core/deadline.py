"""A time limit on a call that may never return (a model's build, a traced trial), by SIGALRM. No torch.

`predict` runs the model's own code in its process: a build() that waits for input, a lock or a download would
hang it for ever. Inside time_limit(seconds), the call is interrupted by TimeLimitExceeded when the time is up.
It is a BaseException, so the model's own `except Exception` does not swallow it. Only the main thread can take a
signal: elsewhere (an API caller's thread) no limit is set. The limit is LIMIT_S unless the environment sets
MEMPROBE_TIME_LIMIT (seconds; 0 for none).
"""

from __future__ import annotations

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


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise TimeLimitExceeded in the code inside once `seconds` have passed (None: no limit). The timer and the
    SIGALRM handler in place before are put back on exit."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expired(_signum: int, _frame: Any) -> None:
        raise TimeLimitExceeded(seconds)

    started = time.monotonic()
    before = signal.signal(signal.SIGALRM, expired)
    # Again every second until the call ends: one raised where Python cannot raise (a finalizer, a weak-reference
    # callback: "Exception ignored") is lost, and the next one lands.
    pending, _interval = signal.setitimer(signal.ITIMER_REAL, seconds, AGAIN_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
        if pending:  # an outer timer goes on with what was left of it
            signal.setitimer(signal.ITIMER_REAL, max(pending - (time.monotonic() - started), 0.001))
