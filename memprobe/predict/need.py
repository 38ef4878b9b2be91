"""The memory one trial at a given n needs, from a fake-tensor trace: what a card would have to offer.

Also a child process for the scan (probe/nothing_fits.py starts `python -m memprobe.predict.need`, so probe never
imports predict): reads one NeedRequest line (core/process/protocol.py) on stdin and prints one NeedAnswer, the bytes or
the error ("Type: message"); CUDA is hidden from it, and it dies with its parent.
"""

from __future__ import annotations

import sys

from memprobe.core.process.lifeline import die_with_parent, expected_parent
from memprobe.core.process.outcomes import described
from memprobe.core.process.protocol import NeedAnswer, NeedRequest, message_line, read_message
from memprobe.core.workload.registry import Workload
from memprobe.predict.allocator import replay
from memprobe.predict.trace import TRIAL_MARK, TraceSession


def trial_need_bytes(workload: Workload, precision: str, n: int = 1, steps: int = 3, mode: str = "train") -> int:
    """Peak reserved bytes of a trial (1 warm-up + K steps, optimizer state included; in "generate" mode the
    generations of a fit) at n, as the CUDA caching allocator of an H100 would reserve them with no capacity limit.

    Raises PredictError when the workload cannot be built or stepped on fake tensors.
    """
    generate = mode == "generate"  # a generation is traced in its mode and precision; a training step as built
    with TraceSession(
        workload, steps, mode=mode if generate else "train", precision=precision if generate else None
    ) as session:
        trace = session.trace(precision, n)
    return replay(trace.events, capacity=None, measure_from=TRIAL_MARK).peak_reserved


def main() -> int:
    """The child's loop: one request on stdin, one answer on stdout; exit 0 either way (the answer says)."""
    die_with_parent(expected_parent())
    try:
        request = read_message(sys.stdin.readline(), NeedRequest)
        answer = NeedAnswer(need_bytes=trial_need_bytes(request.workload, request.precision, mode=request.mode))
    except Exception as exc:  # noqa: BLE001 - any failure is the answer, reported by the parent
        answer = NeedAnswer(error=described(exc)[:400])
    sys.stdout.write(message_line(answer))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
