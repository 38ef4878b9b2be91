"""One handle on every process memprobe starts: start it, ask it a line, read its lines, end it, read its log.

No torch. A Child is exec'd (`Child.start`: an argv, in a session of its own, its environment from the one recipe,
core/process/child_env.py, with the caller's variables on top) or forked by a fork server (`ForkServer.spawn`: a process
that did its imports once forks a child per request), and is used the same way either way. A child that talks
speaks one JSON line per message over its stdin and stdout (core/process/protocol.py: the trial protocol and the
predicting children's messages); one that does not (torchrun, a `--parallel` scan) writes all it says to its log.
The log takes its stderr: a temporary file removed at close, or a file the caller names; its last lines go into
error messages. In its own session, Ctrl-C in a terminal reaches memprobe alone, which then ends its children:
`kill` sends SIGKILL to the child's process group (what it started dies with it) and waits for it to be gone.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import is_dataclass
from pathlib import Path
from typing import IO, Any, Callable, Mapping, Sequence

from memprobe.core.process.child_env import child_env
from memprobe.core.process.protocol import (
    Lost,
    ProtocolError,
    Request,
    decode_answer,
    encode_request,
    message_line,
    read_message,
)

# A killed trial process holds its GPU memory until it is gone: the next fresh check must not start before.
KILL_WAIT_S = 60.0
CLOSE_WAIT_S = 10.0  # how long a child asked to exit gets before it is killed
POLL_S = 1.0  # the longest wait on a child's output between checks that it still runs


class ChildEnded(OSError):
    """The child ended (or closed its output) before the answer waited for came."""


class ForkServerError(RuntimeError):
    """The fork server is gone or did not fork a child; the caller starts its children by exec instead."""


def _line(message: Any) -> str:
    """A message's wire line: a trial Request, a predicting child's message (a dataclass), or a ready line."""
    if isinstance(message, Request):
        return encode_request(message)
    if is_dataclass(message) and not isinstance(message, type):
        return message_line(message)  # type: ignore[arg-type]
    text = str(message)
    return text if text.endswith("\n") else text + "\n"


def _unlink(path: Path | None) -> None:
    if path is not None:
        try:
            os.unlink(path)
        except OSError:
            pass


class Child:
    """One child process. Made by `Child.start` or `ForkServer.spawn`; ended by `kill` (at once) or `close` (asked
    to exit, then killed), or by leaving its `with` block (closed; killed at once when an exception leaves it)."""

    def __init__(
        self,
        pid: int,
        *,
        popen: subprocess.Popen | None = None,
        stdin: IO[bytes] | None = None,
        stdout: IO[bytes] | None = None,
        log: Path | None = None,
        temp_log: bool = False,
    ) -> None:
        """`popen`: the process when it is this process's child (else it was forked by a fork server, and whether it
        runs is read from /proc); `stdin`, `stdout`: its message pipes, when it talks; `log`: its stderr's file,
        removed at close when `temp_log`."""
        self.pid = pid
        self._popen = popen
        self._stdin, self._stdout = stdin, stdout
        self.log_path = log
        self._temp_log = temp_log
        self._buffer = b""
        self._eof = stdout is None  # a child that does not talk has said all it will
        self.closed = False

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        base: Mapping[str, str] | None = None,
        watched: bool = False,
        talk: bool = True,
        log: str | Path | None = None,
        log_prefix: str = "memprobe-child-",
        pass_fds: Sequence[int] = (),
    ) -> "Child":
        """Exec `argv` in a new session. Its environment: core.child_env's recipe over `base` (default this
        process's), with `env` on top; `watched`: it ends when this process dies (core/process/lifeline.py). `talk`: its stdin
        and stdout are message pipes (else stdin is empty and stdout goes to the log). `log`: the file its stderr
        goes to (created or truncated), default a temporary file named `log_prefix`..., removed at close.
        `pass_fds`: descriptors it inherits. Raises OSError when it cannot be started (no temporary file is left)."""
        environment = child_env(base, watched=watched, **dict(env or {}))
        temp = log is None
        handle: IO[bytes]
        if log is None:
            handle = tempfile.NamedTemporaryFile(prefix=log_prefix, suffix=".log", delete=False)  # noqa: SIM115
        else:
            handle = open(log, "wb")  # noqa: SIM115 - the child has its own copy once started; ours is closed below
        path = Path(handle.name)
        try:
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE if talk else subprocess.DEVNULL,
                stdout=subprocess.PIPE if talk else handle,
                stderr=handle,
                pass_fds=tuple(pass_fds),
                start_new_session=True,  # Ctrl-C in the terminal reaches memprobe only, which ends the child
                env=environment,
            )
        except BaseException:
            handle.close()
            if temp:
                _unlink(path)
            raise
        handle.close()
        return cls(popen.pid, popen=popen, stdin=popen.stdin, stdout=popen.stdout, log=path, temp_log=temp)

    @property
    def forked(self) -> bool:
        """Whether a fork server made this child (it is not this process's own child)."""
        return self._popen is None

    def alive(self) -> bool:
        """Whether the process runs (a zombie does not)."""
        if self._popen is not None:
            return self._popen.poll() is None
        try:
            with open(f"/proc/{self.pid}/stat", encoding="ascii") as handle:
                return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False

    @property
    def returncode(self) -> int | None:
        """The exit status once it ended (negative: the signal that ended it); None while it runs, and for a forked
        child (the fork server's, not ours to read)."""
        return self._popen.poll() if self._popen is not None else None

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait at most `timeout_s` (None: as long as it takes) for the process to end; whether it has."""
        if self._popen is not None:
            try:
                self._popen.wait(timeout_s)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self.alive():
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def send_signal(self, sig: int) -> None:
        """Send `sig` to the child's process group (it leads one: its own session), or to the child alone before it
        has made one (a forked child's first instants); nothing when both are gone."""
        try:
            os.killpg(self.pid, sig)
            return
        except (ProcessLookupError, PermissionError):
            pass
        if self.alive():  # a pid that is no longer this child's (reaped, then reused) is left alone
            try:
                os.kill(self.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def kill(self, wait_s: float = KILL_WAIT_S) -> bool:
        """SIGKILL the child's process group and wait at most `wait_s` for the child to be gone (its GPU memory
        released); whether it is."""
        self.send_signal(signal.SIGKILL)
        return self.wait(wait_s)

    def end(self, grace_s: float, first: int = signal.SIGTERM, kill_wait_s: float = KILL_WAIT_S) -> bool:
        """`first` (SIGTERM: torchrun then ends its ranks; SIGINT: a scan writes what it finished) to the child's
        group, `grace_s` to end, then kill(kill_wait_s); whether it ended."""
        self.send_signal(first)
        return self.wait(grace_s) or self.kill(kill_wait_s)

    def send(self, message: Any) -> None:
        """Write one message (a trial Request, a predicting child's message, or a line) to the child's stdin. Raises
        OSError (BrokenPipeError) when the child no longer reads it, or takes no input."""
        if self._stdin is None:
            raise ChildEnded("the child takes no input")
        self._stdin.write(_line(message).encode())
        self._stdin.flush()

    def _fill(self, timeout_s: float) -> None:
        """Take in what the child has written, waiting at most `timeout_s` for the first bytes; marks the end of its
        output."""
        if self._stdout is None or self._eof:
            return
        fd = self._stdout.fileno()
        while select.select([fd], [], [], timeout_s)[0]:
            timeout_s = 0.0
            chunk = os.read(fd, 65536)
            if not chunk:
                self._eof = True
                return
            self._buffer += chunk

    def _take(self) -> list[str]:
        *lines, self._buffer = self._buffer.split(b"\n")
        return [line.decode(errors="replace") for line in lines]

    @property
    def output_ended(self) -> bool:
        """Whether the child closed its output: no line is left to come."""
        return self._eof and b"\n" not in self._buffer

    def lines(self, timeout_s: float = 0.0) -> list[str]:
        """Every complete line the child has written and not yet been read, waiting at most `timeout_s` for the first
        bytes (0: not at all). [] when none came; output_ended then says whether any will."""
        self._fill(timeout_s)
        return self._take()

    def read_line(self, timeout_s: float) -> str | None:
        """The child's next line, waiting at most `timeout_s` for it; None when it did not come in time. Raises
        ChildEnded when the child ended or closed its output first."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            if self._eof:
                raise ChildEnded("the child ended its output")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            before = len(self._buffer)
            self._fill(min(remaining, POLL_S))
            if len(self._buffer) == before and not self._eof and not self.alive():
                self._fill(0.0)  # what it wrote just before it died
                if b"\n" not in self._buffer:
                    raise ChildEnded("the child died")
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode(errors="replace")

    def ask(self, message: Any, answer: type | None = None, *, timeout_s: float) -> Any:
        """Send `message` and wait at most `timeout_s` for its one-line answer: a trial Request's is its `answer`
        type (or a Failure, where the child refused it: protocol.decode_answer); another message's is `answer`
        (protocol.read_message). Lost() when the child is dead, dies, or answers a line that is not one;
        Lost(timed_out=True) when no answer came in time (the child is killed first). Never raises for the child."""
        if not self.alive():
            return Lost()
        try:
            self.send(message)
            line = self.read_line(timeout_s)
        except OSError:  # a broken pipe, or ChildEnded
            return Lost()
        if line is None:
            self.kill()
            return Lost(timed_out=True)
        try:
            if isinstance(message, Request):
                return decode_answer(message, line)
            if answer is None:
                raise TypeError(f"ask: the answer type of a {type(message).__name__} must be given")
            return read_message(line, answer)
        except ProtocolError:
            return Lost()

    def communicate(self, message: Any, timeout_s: float) -> list[str]:
        """Send `message`, close the child's stdin, and read every line it writes until it ends (a child that answers
        once and exits). Raises TimeoutError when it has not ended within `timeout_s` (it is killed first)."""
        deadline = time.monotonic() + timeout_s
        try:
            self.send(message)
        except OSError:
            pass  # it ended before reading: its exit status says why
        self._close_stdin()
        lines: list[str] = []
        while not self._eof:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise TimeoutError(f"no end within {timeout_s:g} s")
            self._fill(min(remaining, POLL_S))
            lines += self._take()
            if not self._eof and not self.alive():
                self._fill(0.0)
                break
        lines += self._take()
        if self._buffer.strip():
            lines.append(self._buffer.decode(errors="replace"))  # a last line without its newline
        self._buffer = b""
        if not self.wait(max(0.0, deadline - time.monotonic())):
            self.kill()
            raise TimeoutError(f"no end within {timeout_s:g} s")
        return lines

    def log_tail(self, lines: int = 5, *, skip_prefix: str = "", chars: int | None = None) -> str:
        """The last `lines` non-blank lines of the child's log, stripped and joined by " | " (lines starting with
        `skip_prefix` left out; at most the last `chars` characters); "" where there is no log."""
        if self.log_path is None:
            return ""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        keep = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if skip_prefix:
            keep = [ln for ln in keep if not ln.startswith(skip_prefix)]
        tail = " | ".join(keep[-lines:]) if lines > 0 else ""
        return tail[-chars:] if chars is not None else tail

    def _close_stdin(self) -> None:
        if self._stdin is not None:
            try:
                self._stdin.close()
            except OSError:
                pass
            self._stdin = None

    def close(self, goodbye: Any = None, wait_s: float = CLOSE_WAIT_S) -> None:
        """End the child politely: send `goodbye` (its exit message, if it has one), close its stdin, give it
        `wait_s` to exit; then kill its process group (what it left running), close the pipes and remove a temporary
        log. A second call does nothing."""
        if self.closed:
            return
        if self.alive():
            if goodbye is not None:
                try:
                    self.send(goodbye)
                except OSError:
                    pass
            self._close_stdin()
            self.wait(wait_s)
        self.kill()
        self._close_stdin()
        if self._stdout is not None:
            try:
                self._stdout.close()
            except OSError:
                pass
        if self._temp_log:
            _unlink(self.log_path)
        self.closed = True

    def __enter__(self) -> "Child":
        return self

    def __exit__(self, kind: type | None, *exc: Any) -> None:
        if kind is not None:
            self.kill()  # interrupted or failed: no polite wait
        self.close()


class ForkServer:
    """A process that forks children on request, each then a Child like an exec'd one, minus the exec and imports.

    The server is exec'd from `argv(fd)` (fd: its end of a Unix socket) with the environment its children get.
    Each request sends three descriptors (the child's stdin, its answer pipe, its log) and is answered with the
    child's pid and a newline (probe/child/zygote.py serves it). spawn() raises ForkServerError when the server is
    gone or does not answer within `answer_timeout_s`; close() ends it.
    """

    def __init__(
        self,
        argv: Callable[[int], Sequence[str]],
        *,
        env: Mapping[str, str] | None = None,
        watched: bool = False,
        answer_timeout_s: float = 600.0,
        log_prefix: str = "memprobe-forkserver-",
    ) -> None:
        """Raises OSError when the server cannot be started."""
        self.answer_timeout_s = answer_timeout_s
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            fd = theirs.fileno()
            self.child = Child.start(
                argv(fd), env=env, watched=watched, talk=False, log_prefix=log_prefix, pass_fds=[fd]
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.control = ours

    @property
    def pid(self) -> int:
        return self.child.pid

    def spawn(self, log_prefix: str = "memprobe-child-") -> Child:
        """A child forked by the server, talking over two new pipes, its output in a new temporary log. Raises
        ForkServerError."""
        log = tempfile.NamedTemporaryFile(prefix=log_prefix, suffix=".log", delete=False)  # noqa: SIM115
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
                    raise ForkServerError("the fork server ended")
                reply += chunk
            pid = int(reply)
        except (OSError, ValueError, ForkServerError) as exc:
            for fd in (our_stdin, our_stdout):
                os.close(fd)
            log.close()
            _unlink(Path(log.name))
            if isinstance(exc, ForkServerError):
                raise
            raise ForkServerError(f"the fork server did not fork a process ({exc})") from exc
        finally:
            os.close(child_stdin)
            os.close(child_stdout)
        log.close()
        return Child(
            pid, stdin=os.fdopen(our_stdin, "wb"), stdout=os.fdopen(our_stdout, "rb"), log=Path(log.name), temp_log=True
        )

    def close(self) -> None:
        """Close the control socket (the server exits on its end), give the server CLOSE_WAIT_S, then kill it;
        remove its log."""
        self.control.close()
        self.child.close()
