"""Tie a trial process's life to its parent's, so a killed scan leaves nothing holding the GPU.

Trial processes run in their own sessions (Ctrl-C in the terminal must reach the scan only), so
nothing ends them when the scan dies of SIGKILL, SIGTERM or SIGHUP. Two independent ways end them:

- the parent-death signal (Linux prctl PR_SET_PDEATHSIG = SIGKILL), set first thing in every process
  the scan starts: the fork server and exec'd trial processes die with the scan, and each process
  forked by the fork server dies with the fork server (the chain: scan -> fork server -> trial);
- a watcher: the fork server reads its control socket, which ends (EOF) when the scan dies, and each
  trial process runs a thread that exits the process when its request pipe hangs up or it has been
  re-parented (its parent died), checked every WATCH_INTERVAL_S.

The parent's pid is passed in MEMPROBE_PARENT_PID, so a parent that died before the signal was set is
seen too.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import threading

PARENT_ENV = "MEMPROBE_PARENT_PID"
PR_SET_PDEATHSIG = 1
WATCH_INTERVAL_S = 0.5
EXIT_ORPHANED = 4


def set_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send `sig` to this process when its parent (the thread that forked it) ends.
    Returns False where that is not available (not Linux). Never raises."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _orphaned(parent: int) -> bool:
    return os.getppid() != parent


def die_with_parent(parent: int | None) -> None:
    """Set the parent-death signal, and exit now if `parent` (the pid this process was started by) is
    already gone. With parent None (not started by memprobe) only the signal is set."""
    set_death_signal()
    if parent is not None and _orphaned(parent):
        os._exit(EXIT_ORPHANED)


def expected_parent() -> int | None:
    """The pid in MEMPROBE_PARENT_PID (set by runner for the processes it starts), or None."""
    try:
        return int(os.environ[PARENT_ENV])
    except (KeyError, ValueError):
        return None


def watch(parent: int, fd: int | None) -> threading.Thread:
    """Start a daemon thread that ends this process (os._exit) when `parent` is no longer its parent, or
    when pipe `fd` (the request pipe from the parent) hangs up. Reads nothing from `fd`."""
    poller = None
    if fd is not None:
        poller = select.poll()
        poller.register(fd, 0)  # no events asked: only POLLHUP / POLLERR / POLLNVAL are reported

    def run() -> None:
        while True:
            if poller is not None:
                events = poller.poll(WATCH_INTERVAL_S * 1000)
                if any(mask & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _fd, mask in events):
                    os._exit(EXIT_ORPHANED)
            else:
                threading.Event().wait(WATCH_INTERVAL_S)
            if _orphaned(parent):
                os._exit(EXIT_ORPHANED)

    thread = threading.Thread(target=run, name="memprobe-lifeline", daemon=True)
    thread.start()
    return thread
