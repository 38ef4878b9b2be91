"""The memory one trial at a given n needs, from a fake-tensor trace: what a card would have to offer."""

from __future__ import annotations

from memprobe.predict.allocator import replay
from memprobe.predict.trace import TRIAL_MARK, TraceSession
from memprobe.registry import Workload


def trial_need_bytes(workload: Workload, precision: str, n: int = 1, steps: int = 3) -> int:
    """Peak reserved bytes of a trial (1 warm-up + K steps, optimizer state included) at n, as the
    CUDA caching allocator of an H100 would reserve them with no capacity limit.

    Raises PredictError when the workload cannot be built or stepped on fake tensors.
    """
    with TraceSession(workload, steps) as session:
        trace = session.trace(precision, n)
    return replay(trace.events, capacity=None, measure_from=TRIAL_MARK).peak_reserved
