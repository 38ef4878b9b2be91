"""The process that predicts a scan's max batch on the CPU while the scan's first trials run (probe/hint.py).

Speaks core/process/protocol.py's predicted-start wire, a JSON line per message: reads a HintSetup on stdin (the workload,
the precisions, the steps, the mode, the world per GPU), then HintRequests. Traces the precisions in the order given
(fake tensors, no GPU) and answers each request on stdout, once its precision is traced, with a HintAnswer (the max
batch, or an error). CUDA is hidden from it by its parent; it dies with its parent (lifeline.py).
"""

from __future__ import annotations

import os
import select
import sys
import time
from typing import Any

from memprobe.core.process.lifeline import die_with_parent, expected_parent
from memprobe.core.process.outcomes import described
from memprobe.core.process.protocol import HintAnswer, HintRequest, HintSetup, message_line, read_message


class _Requests:
    """Request lines from stdin, read without blocking when asked (select + os.read, no Python buffering)."""

    def __init__(self) -> None:
        self.fd = sys.stdin.fileno()
        self.buffer = b""
        self.closed = False

    def read(self, block: bool) -> list[bytes]:
        while not self.closed:
            ready, _w, _x = select.select([self.fd], [], [], None if block else 0)
            if not ready:
                break
            chunk = os.read(self.fd, 65536)
            if not chunk:
                self.closed = True
                break
            self.buffer += chunk
            if b"\n" in self.buffer:
                break
        *lines, self.buffer = self.buffer.split(b"\n")
        return [line for line in lines if line.strip()]

    def requests(self, block: bool) -> list[HintRequest]:
        """The HintRequests read (see read). Raises ProtocolError for a line that is not one."""
        return [read_message(line, HintRequest) for line in self.read(block)]


def _answer(request: HintRequest, **answer: Any) -> None:
    """Answer `request`: its id echoed, and when (time.time(), so the scan can say when its prediction came)."""
    sys.stdout.write(message_line(HintAnswer(request.id, request.precision, time.time(), **answer)))
    sys.stdout.flush()


def serve() -> int:
    """Trace, then answer requests until stdin closes. Returns the exit code."""
    die_with_parent(expected_parent())
    # Beside a scan: the trial process's CPU time (kernel launches) must not wait for this one.
    os.nice(19)
    requests = _Requests()
    first = requests.read(block=True)
    if not first:
        return 0
    setup = read_message(first[0], HintSetup)
    pending = [read_message(line, HintRequest) for line in first[1:]]
    import torch

    torch.set_num_threads(1)
    from memprobe.predict.batch_model import PrecisionTraces
    from memprobe.predict.sessions import trace_sessions

    workload = setup.workload
    traced: dict[str, Any] = {}
    failed: dict[str, str] = {}
    started = time.perf_counter()

    def answer_ready() -> None:
        for request in list(pending):
            precision = request.precision
            if precision in traced:
                traces = traced[precision]
                try:
                    batch, _fail = traces.max_batch(int(request.capacity_bytes))
                    _answer(request, max_batch=batch, seconds=round(time.perf_counter() - started, 2), how=traces.how)
                except Exception as exc:  # noqa: BLE001 - a batch that cannot be traced: no hint
                    _answer(request, error=_text(exc))
            elif precision in failed:
                _answer(request, error=failed[precision])
            else:
                continue
            pending.remove(request)

    def serve_requests(session_for: Any) -> None:
        for precision in setup.precisions if session_for is not None else ():
            try:
                traced[precision] = PrecisionTraces(session_for(precision), precision)
            except Exception as exc:  # noqa: BLE001 - a precision that cannot be traced gets no hint
                failed[precision] = _text(exc)
            pending.extend(requests.requests(block=False))
            answer_ready()
        while True:
            for request in pending:
                if request.precision not in traced:
                    failed.setdefault(request.precision, "not among the precisions traced")
            answer_ready()
            if requests.closed:
                return
            pending.extend(requests.requests(block=True))

    world = None
    try:
        if setup.world:
            from memprobe.predict.data_parallel import World

            world = World(*setup.world)
        sessions = trace_sessions(workload, int(setup.steps), world=world, mode=setup.mode)
        session_for = sessions.__enter__()
    except Exception as exc:  # noqa: BLE001 - no world to trace in (bad strategy, no fake process group)
        failed.update({p: _text(exc) for p in setup.precisions})
        serve_requests(None)
        return 0
    try:
        serve_requests(session_for)  # the sessions stay open: a workload traced at every batch needs its own
    finally:
        sessions.__exit__(None, None, None)
    return 0


def _text(exc: BaseException) -> str:
    return described(exc).splitlines()[0][:300]


if __name__ == "__main__":
    sys.exit(serve())
