"""Ctrl-C and the stop signals: every one ends the command, and a KeyboardInterrupt no signal sent is code's error.

While a command runs (stop_on_signals), SIGINT, SIGTERM and SIGHUP each record themselves and raise
KeyboardInterrupt, so a command's clean-up runs once whatever stopped it. Two ways such an interrupt could be lost:
- raised inside a finalizer or a weak-reference callback (a traced tensor's death runs Python code), Python prints
  "Exception ignored" and goes on. The unraisable hook here sees that and sends the signal again, one at a time,
  until it lands in ordinary code; one that arrives while that hook runs is sent again the same way, not raised
  there (an exception in the hook is printed as a traceback and dropped);
- swallowed by code that catches everything and carries on. A command still running BACKSTOP_S seconds after a
  signal (a scan: SCAN_CLEAN_UP_S, allow_clean_up) ends at once with 128 + the signal (its trial and trace
  processes die with it: core/process/lifeline.py).
A KeyboardInterrupt raised while no signal came (a user's build that raises it) is that code's error, not a
Ctrl-C: user_raised() tells them apart. No torch here.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

from memprobe.core.process.deadline import TimeLimitExceeded

BACKSTOP_S = 10.0  # a scan's own clean-up after Ctrl-C (ending trial processes, writing the partial file) takes ~1 s
# A scan's clean-up after a signal waits up to 60 s for each killed trial process to free the GPU (core/process/child.py:
# KILL_WAIT_S), then writes the finished precisions: the backstop gives it that and more.
SCAN_CLEAN_UP_S = 90.0
MAX_REDELIVERIES = 100  # an interrupt lost this often in finalizers is left to the backstop
_NAMES: dict[int, str] = {int(signal.SIGINT): "Ctrl-C", int(signal.SIGTERM): "SIGTERM", int(signal.SIGHUP): "SIGHUP"}

_state: dict[str, Any] = {
    "watching": False,
    "received": [],
    "redelivered": 0,
    "resending": False,  # a signal sent again (_resend) has not arrived yet
    "backstop_s": BACKSTOP_S,
}


def signal_name(signum: int) -> str:
    """'Ctrl-C' for SIGINT, 'SIGTERM', 'SIGHUP', else 'signal N'."""
    return _NAMES.get(signum, f"signal {signum}")


def user_raised() -> bool:
    """Whether the KeyboardInterrupt being handled was raised by code rather than sent: no signal came while
    stop_on_signals watches, or SIGINT is ignored or left to the system (a trial or trace process: a real one would
    have ended it). Where another handler is in place (the API under Python's own), it cannot be told: False."""
    handler = signal.getsignal(signal.SIGINT)
    if handler in (signal.SIG_IGN, signal.SIG_DFL):
        return True
    return bool(_state["watching"]) and not _state["received"]


def allow_clean_up(seconds: float) -> None:
    """Give the command that runs now `seconds` after a signal before the backstop ends it, for a clean-up that can
    take longer than BACKSTOP_S (a scan waits up to a minute for a killed trial process to free the GPU before it
    writes the finished precisions)."""
    _state["backstop_s"] = max(seconds, BACKSTOP_S)


def _backstop(received: list[int], started: float) -> None:
    """End the process BACKSTOP_S seconds (or what allow_clean_up gave) after the first of `received` came, if the
    command that watches with that list has not ended by then (the interrupt was swallowed): one line, and 128 +
    the signal."""
    import time

    while _state["received"] is received and time.monotonic() < started + _state.get("backstop_s", BACKSTOP_S):
        time.sleep(0.1)
    if _state["received"] is received:
        signum = received[0]
        try:
            waited = _state.get("backstop_s", BACKSTOP_S)
            sys.stderr.write(f"\ninterrupted ({signal_name(signum)}): stopped ({waited:.0f} s after the signal)\n")
            sys.stderr.flush()
        finally:
            os._exit(128 + signum)


def _redeliver_lost(unraisable: Any, previous: Any) -> None:
    """sys.unraisablehook: a KeyboardInterrupt lost in a finalizer or callback after a signal is sent again (from
    a thread, so that it lands outside the finalizer), and a time limit's exception lost there is dropped silently
    (core/deadline raises it again until it lands); everything else goes to the hook that was there before."""
    lost = isinstance(unraisable.exc_value, KeyboardInterrupt) or unraisable.exc_type is KeyboardInterrupt
    received = _state["received"]
    if lost and received:
        _resend(received)
        return
    if isinstance(unraisable.exc_value, TimeLimitExceeded):  # the time limit raises again within a second: no trace
        return
    previous(unraisable)


def _resend(received: list[int]) -> None:
    """Send the last signal of `received` again soon (from a thread), unless a resent one is on its way already:
    one at a time, so none is left to arrive after the command has ended and put back the handlers before it."""
    if _state["resending"] or _state["redelivered"] >= MAX_REDELIVERIES:
        return
    _state["redelivered"] += 1
    _state["resending"] = True
    threading.Timer(0.01, _send_again, (received,)).start()


def _send_again(received: list[int]) -> None:
    """The last signal of `received` once more, to this process, while the command that got it still runs."""
    if _state["received"] is received:
        os.kill(os.getpid(), received[-1])


def _in_the_hook(frame: Any) -> bool:
    """Whether `frame` (where a signal handler was called) runs inside _redeliver_lost: an exception raised there is
    the hook's own, which Python prints as a traceback ("Exception ignored in sys.unraisablehook") and drops."""
    while frame is not None:
        if frame.f_code in _HOOK_CODES:
            return True
        frame = frame.f_back
    return False


_HOOK_CODES = {_redeliver_lost.__code__, _resend.__code__}


@contextmanager
def stop_on_signals() -> Iterator[list[int]]:
    """SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt inside (a scan ends its trial processes, keeps the
    finished precisions, marks its file partial); the yielded list gets each signal, for exit status 128 + the
    first. SIGHUP ignored when the command started (nohup) stays ignored. Outside the main thread (no handlers
    can be set there) nothing is changed."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    import time

    def stop(signum: int, frame: Any) -> None:
        if not received:
            threading.Thread(target=_backstop, args=(received, time.monotonic()), daemon=True).start()
        received.append(signum)
        _state["resending"] = False  # a signal sent again has arrived, if one was on its way
        if _in_the_hook(frame):  # raised there, it would be printed and lost: sent again, to land after the hook
            _resend(received)
            return
        raise KeyboardInterrupt

    # SIGHUP ignored when the command started stays ignored: `nohup memprobe scan ...` goes on when the terminal
    # closes. SIGINT is taken even where a script's `&` left it ignored: a Ctrl-C sent to memprobe ends it.
    sigs = [signal.SIGINT, signal.SIGTERM] + (
        [signal.SIGHUP] if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN else []
    )
    before = {sig: signal.signal(sig, stop) for sig in sigs}
    hook = sys.unraisablehook
    sys.unraisablehook = functools.partial(_redeliver_lost, previous=hook)  # no Python frame but the hook's own
    saved = dict(_state)
    _state.update(watching=True, received=received, redelivered=0, resending=False, backstop_s=BACKSTOP_S)
    try:
        yield received
    finally:
        _state.update(saved)
        sys.unraisablehook = hook
        for sig, handler in before.items():
            signal.signal(sig, handler)
