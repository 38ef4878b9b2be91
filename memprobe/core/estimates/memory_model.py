"""The shared record of a trial (Attempt) and the linear memory model fitted to trials' peaks.

No torch: the search (probe/search.py), predict's replay (predict/summary.py) and the guide's
per-workload models (compare/card_predictions.py) all read and fit these.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Annotated, Iterable, Sequence, TypeVar

from memprobe.core.process.outcomes import FIT, oom_numbers
from memprobe.core.records.fieldtypes import (
    BYTES_MAX,
    Batch,
    Bytes,
    Count,
    Name,
    Outcome,
    PerSampleBytes,
    Range,
    RealBytes,
    Seconds,
)

A = TypeVar("A", bound="Attempt")


@dataclass
class Attempt:
    """One trial: a batch size, what happened, the peak memory it reached, and how long it took."""

    batch: Batch
    outcome: Outcome
    peak_allocated: Bytes | None = None
    peak_reserved: Bytes | None = None
    seconds: Seconds = 0.0
    message: str = ""
    fresh: bool = False  # True when it ran in a process that had run nothing else (a proof check)
    steps: Count | None = None  # steps the trial ran (more than asked when fp16 loss scaling skipped updates)
    wall_seconds: Seconds | None = None  # fresh trials: start to end of their own process (fork, build, trial, exit)
    # fp16 fits: the GradScaler's scale at the end (the next trial starts there)
    loss_scale: Annotated[float, Range(0, 1e308)] | None = None
    done_at_s: Seconds | None = None  # seconds from the precision's start to this trial's end: the search's timeline
    # fresh fits with throughput on: the timed steps run after the trial, same process
    timed_steps: Count | None = None
    # Fresh runs: whether the trial's own steps completed (True also when the timed run that went on from them
    # failed: outcome is then that run's). None where not recorded (files from before it was).
    trial_fit: bool | None = None

    @property
    def fits(self) -> bool:
        return self.outcome == FIT

    @property
    def shortfall(self) -> float | None:
        """Bytes the failed allocation lacked, from PyTorch's out-of-memory message (None if unsaid)."""
        return None if self.fits else oom_shortfall(self.message)

    @property
    def trial_fitted(self) -> bool:
        """Whether the trial's steps completed: a fit, or a fresh run whose timed run failed after them. Files from
        before `trial_fit` was recorded say so only in the message ("ran the 3-step trial, then failed ...")."""
        if self.fits or self.trial_fit is not None:
            return self.fits or bool(self.trial_fit)
        return bool(_TRIAL_THEN_FAILED.search(self.message or ""))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls: type[A], data: dict) -> A:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


_TRIAL_THEN_FAILED = re.compile(r"ran the \d+-step trial|then failed")


def oom_shortfall(message: str) -> float | None:
    """Bytes a failed CUDA allocation lacked (requested minus free on the device), read from
    PyTorch's out-of-memory message ("Tried to allocate 8.23 GiB. ... of which 3.42 GiB is free");
    None when the message does not say, or says nothing was lacking."""
    numbers = oom_numbers(message)
    if "requested_bytes" not in numbers or "free_bytes" not in numbers:
        return None
    lacked = numbers["requested_bytes"] - numbers["free_bytes"]
    return float(lacked) if lacked > 0 else None


@dataclass
class MemoryModel:
    """Linear model of peak memory: peak(b) = static_bytes + per_sample_bytes * b."""

    static_bytes: RealBytes
    per_sample_bytes: PerSampleBytes
    basis: Name  # which measured peak it was fitted to: "peak_reserved" or "peak_allocated"
    points: Count  # number of distinct batch sizes it was fitted on
    max_residual_bytes: Annotated[float, Range(0, BYTES_MAX)] = 0.0

    def predict(self, batch: float) -> float:
        return self.static_bytes + self.per_sample_bytes * batch

    def max_batch_for(self, capacity_bytes: float) -> int:
        """The largest batch whose predicted peak stays within capacity (0 if none)."""
        if not self.per_sample_bytes > 0:  # also refuses NaN
            raise ValueError(f"memory model has no positive per-sample cost ({self.per_sample_bytes})")
        return max(0, math.floor((capacity_bytes - self.static_bytes) / self.per_sample_bytes))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "MemoryModel":
        """The model from a result file's memory_model entry."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def fit_memory_model(
    attempts: Iterable[Attempt], basis: str = "peak_reserved", largest: int | None = None
) -> MemoryModel | None:
    """Least-squares fit of peak memory against batch over the successful attempts.

    `largest` keeps only that many of the largest distinct batch sizes (the curve near the edge is
    what matters for prediction). Returns None with fewer than two distinct batches or a non-positive
    slope. Repeated batch sizes are averaged.
    """
    by_batch: dict[int, list[float]] = {}
    for a in attempts:
        value = getattr(a, basis)
        if a.fits and value is not None:
            by_batch.setdefault(a.batch, []).append(float(value))
    batches = sorted(by_batch)
    if largest is not None:
        batches = batches[-largest:]
    if len(batches) < 2:
        return None
    xs = [float(b) for b in batches]
    ys = [sum(by_batch[b]) / len(by_batch[b]) for b in batches]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    if slope <= 0:
        return None
    static = my - slope * mx
    residual = max(abs(y - (static + slope * x)) for x, y in zip(xs, ys))
    return MemoryModel(static, slope, basis, n, residual)


EDGE_BASELINE = 0.9  # the edge model's second point is at most this share of the largest fit's batch


def edge_pair(attempts: Sequence[Attempt], basis: str) -> list[Attempt]:
    """The fits at the two batches the edge model extrapolates from (see edge_model), counting only
    fits that measured `basis`; [] with fewer than two such batches."""
    fits = sorted({a.batch for a in attempts if a.fits and getattr(a, basis) is not None})
    if len(fits) < 2:
        return []
    top = fits[-1]
    partner = max((b for b in fits[:-1] if b <= EDGE_BASELINE * top), default=fits[-2])
    return [a for a in attempts if a.batch in (partner, top) and a.fits]


def edge_model(attempts: Iterable[Attempt]) -> MemoryModel | None:
    """The memory model that extrapolates to the edge, in reserved bytes where the trials measured them.

    Two fits define it: the largest, and the largest at most EDGE_BASELINE of its batch (else the
    next smaller fit): batch 1 carries fixed costs (workspaces, rounding) that bend a line through
    it, while adjacent batches near the edge differ by workspace noise (on the H100, NasNet-Large
    fp32 peaked lower at batch 77 than at 76). Where both fits have both peaks, it is the line
    through their allocated peaks scaled by the largest fit's reserved/allocated ratio: allocated
    bytes grow linearly with the batch, while the cache's overhead on top of them is near zero at
    small batches and levels off at a few percent, so a line through two reserved peaks comes out
    too steep (BERT-Large fp16 on the H100: 1.4% overhead at batch 2, 5.7% at 16, 5.5% at 108; the
    reserved line from 2 and 16 put the edge at 105, the scaled one at the true 108). Over the 41
    first jumps of the committed H100 scans, real and capped (benchmarks/first_guess.py), it was off
    by 6.5% on average against 8.7% for the reserved line, and exact 8 times against 2. Otherwise
    (no allocated peaks, or no positive slope) it is the line through the two reserved peaks, then
    least squares over every fit. None with fewer than two fits or no positive slope.
    """
    attempts = list(attempts)
    basis = "peak_reserved" if any(a.peak_reserved for a in attempts if a.fits) else "peak_allocated"
    pair = edge_pair(attempts, basis)
    if not pair:
        return None
    if basis == "peak_reserved" and all(bool(a.peak_allocated and a.peak_reserved) for a in pair):
        allocated = fit_memory_model(pair, basis="peak_allocated")
        if allocated is not None:
            top = max(a.batch for a in pair)
            tops = [a for a in pair if a.batch == top]
            # every fit of the pair has both peaks (checked above); the condition says so to the type checker
            ratio = sum(a.peak_reserved / a.peak_allocated for a in tops if a.peak_reserved and a.peak_allocated) / len(
                tops
            )
            return MemoryModel(
                ratio * allocated.static_bytes,
                ratio * allocated.per_sample_bytes,
                "peak_allocated x reserved/allocated of the largest fit",
                allocated.points,
                ratio * allocated.max_residual_bytes,
            )
    return fit_memory_model(pair, basis=basis) or fit_memory_model(attempts, basis=basis)
