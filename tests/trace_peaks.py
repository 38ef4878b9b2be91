"""What a traced trial's allocator events say about live memory, for comparing a trace with the CPU's LiveBytes."""

from __future__ import annotations

from memprobe.predict.allocator import ALLOC, FREE, MARK
from memprobe.predict.trace import TRIAL_MARK


def live_peak(events: list[tuple]) -> int:
    """Peak of the exact live storage bytes from the trial mark on, without kernel workspaces (what LiveBytes sees)."""
    sizes: dict[int, int] = {}
    current = peak = 0
    for event in events:
        if event[0] == ALLOC and not str(event[3]).endswith("workspace"):
            sizes[event[1]] = event[2]
            current += event[2]
            peak = max(peak, current)
        elif event[0] == FREE:
            current -= sizes.pop(event[1], 0)
        elif event[0] == MARK and event[1] == TRIAL_MARK:
            peak = current
    return peak
