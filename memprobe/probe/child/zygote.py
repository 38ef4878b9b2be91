"""The fork server's side: a process that has imported torch and the model code forks one trial process per request.

The parent (runner.Zygote) sends three descriptors (stdin, protocol, log) over a Unix socket; the server forks, the
child takes them as its own and serves trial requests (worker._serve), and the server answers with the child's pid.
A child dies with the server, and the server with the scan (core/process/lifeline.py).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import traceback
from typing import Any, Callable, TextIO

from memprobe.core.process import lifeline


def _reap(*_: Any) -> None:
    """SIGCHLD handler of the fork server: collect finished trial processes at once, so the parent
    sees them gone (and their GPU memory released) as soon as they exit."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _forked_child(control: socket.socket, fds: list[int], zygote_pid: int, serve: Callable[[TextIO], int]) -> None:
    """Become a trial process on the descriptors the parent sent: stdin, protocol, log. Never returns."""
    code = 1
    try:
        # Dies with the fork server (which dies with the scan): a killed scan leaves no trial running.
        lifeline.die_with_parent(zygote_pid)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        control.close()
        os.setsid()  # its own session, like an exec'd worker: the parent alone decides when it ends
        stdin_fd, protocol_fd, log_fd = fds
        os.dup2(stdin_fd, 0)
        lifeline.watch(zygote_pid, 0)  # ends the process when the scan's request pipe hangs up
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(stdin_fd)
        os.close(log_fd)
        sys.stdin = os.fdopen(0, "r")
        sys.stdout = sys.stderr = os.fdopen(2, "w", buffering=1)
        code = serve(os.fdopen(protocol_fd, "w", buffering=1))
    except BaseException:  # noqa: BLE001 - whatever happens, the child must not return into the server loop
        traceback.print_exc()
    finally:
        os._exit(code)


def serve_forks(fd: int, serve: Callable[[TextIO], int]) -> int:
    """Serve fork requests on the Unix socket `fd` until the parent closes it; each forked child runs `serve` on its
    protocol stream (worker._serve) and exits with its code."""
    control = socket.socket(fileno=fd)
    signal.signal(signal.SIGCHLD, _reap)
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(control, 64, 3)
        except OSError:
            return 0
        if not message:
            return 0  # the parent closed the socket: the scan is over
        if len(fds) != 3:
            for descriptor in fds:
                os.close(descriptor)
            control.sendall(b"error: expected 3 descriptors\n")
            continue
        zygote_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            _forked_child(control, fds, zygote_pid, serve)
        for descriptor in fds:
            os.close(descriptor)
        control.sendall(f"{pid}\n".encode())
