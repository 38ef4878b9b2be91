"""The knee of a throughput curve: the last batch before throughput falls by more than KNEE_FALL.

No torch. The definition (docs/definitions.md): where throughput falls by more than about 10% between neighbouring batch sizes,
the knee is the last batch before the fall, located by bisection. Two rules make that a measurement:

- Noise: a fall counts only when it is larger than the two points' step-time spread. The slow end of the smaller
  batch's throughput (batch / its p90 step time) must lie above the fast end of the larger batch's (batch / its
  p10 step time); a point without a spread counts at its median. A noisy flat curve thus has no knee.
- Resolution: bisection stops once the bracket [last before, first after] is at most KNEE_RESOLUTION of the
  batch wide (or one batch apart). A fall that bisection splits into smaller steps, none of them counting, was
  a gradual decline: no knee. A curve whose budget ends first reports the bracket it has (`resolved` False).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from memprobe.core.process.outcomes import FIT

KNEE_FALL = 0.10  # a fall of more than this share of the smaller batch's throughput
KNEE_RESOLUTION = 0.02  # bisect until the bracket is at most this share of the batch wide


@dataclass(frozen=True)
class Fall:
    """A counted fall between two neighbouring timed batches: `before` is the last batch before it, `after`
    the first after it, `drop` the throughput at `after` over that at `before`, minus 1 (e.g. -0.366)."""

    before: int
    after: int
    drop: float

    @property
    def resolved(self) -> bool:
        """Whether the bracket is narrow enough to call `before` the knee (KNEE_RESOLUTION)."""
        return resolved(self.before, self.after)


def resolved(before: int, after: int) -> bool:
    """Whether a bracket [before, after] is at most KNEE_RESOLUTION of `before` wide, or one batch apart."""
    return after - before <= max(1.0, KNEE_RESOLUTION * before)


def _timed(points: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted((p for p in points if p.get("outcome") == FIT and p.get("samples_per_s")), key=lambda p: p["batch"])


def speed_range(point: dict[str, Any]) -> tuple[float, float]:
    """(slowest, fastest) samples/s of a timed point: batch over its p90 and p10 step times (the median's
    samples/s for both when the point has no spread)."""
    median = float(point["samples_per_s"])
    p10, p90 = point.get("step_p10_s"), point.get("step_p90_s")
    if not p10 or not p90:
        return median, median
    return min(median, point["batch"] / p90), max(median, point["batch"] / p10)


def counts(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether throughput falls from `before` to `after` (a larger batch) by more than KNEE_FALL and by more than
    the two points' spread (see the module's noise rule)."""
    if after["samples_per_s"] >= before["samples_per_s"] * (1 - KNEE_FALL):
        return False
    return speed_range(before)[0] > speed_range(after)[1]


def falls(points: Iterable[dict[str, Any]]) -> list[Fall]:
    """Every counted fall between neighbouring fitting points (failed and skipped points are not neighbours),
    the largest fall first."""
    timed = _timed(points)
    found = [
        Fall(a["batch"], b["batch"], b["samples_per_s"] / a["samples_per_s"] - 1)
        for a, b in pairwise(timed)
        if counts(a, b)
    ]
    return sorted(found, key=lambda f: (f.drop, f.before))


def knee(points: Iterable[dict[str, Any]]) -> Fall | None:
    """The curve's knee: its largest counted fall (None when throughput never falls by a counted step)."""
    found = falls(points)
    return found[0] if found else None


def bisect_batch(fall: Fall, planned: Iterable[int], taken: Iterable[int]) -> int | None:
    """The next batch to time inside the bracket of `fall`: a planned (ladder) batch strictly inside it, the one
    nearest the middle, else the middle. None when the bracket is resolved or the batch was already tried
    (a failed or skipped point inside the bracket: bisecting there again would learn nothing)."""
    if fall.resolved:
        return None
    taken = set(taken)
    middle = (fall.before + fall.after) // 2
    inside = [b for b in planned if fall.before < b < fall.after and b not in taken]
    batch = min(inside, key=lambda b: (abs(b - middle), -b)) if inside else middle
    return None if batch in taken else batch


def knee_fields(fall: Fall | None) -> dict[str, Any]:
    """The knee as a precision result's fields: knee_batch, knee_after_batch and knee_drop (all None without one)."""
    if fall is None:
        return {"knee_batch": None, "knee_after_batch": None, "knee_drop": None}
    return {"knee_batch": fall.before, "knee_after_batch": fall.after, "knee_drop": round(fall.drop, 4)}
