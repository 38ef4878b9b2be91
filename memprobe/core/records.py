"""The typed sections of a precision's result: proof, fresh checks, timed runs, curve points; each read and written here.

No torch. Each record's from_dict is the one place its JSON is read, and to_dict the one place it is written. Keys a
record does not name (written by another memprobe version, or a measurement added later) are kept in `extra` as
read and written back, so rewriting a file loses nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from memprobe.core.memory_model import Attempt
from memprobe.core.outcomes import FIT

R = TypeVar("R", bound="OpenRecord")


@dataclass
class OpenRecord:
    """Base of a record whose JSON may hold keys it does not name: those stay in `extra`."""

    extra: dict[str, Any] = field(default_factory=dict, kw_only=True)

    @classmethod
    def _names(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.name != "extra"]

    @classmethod
    def from_dict(cls: type[R], data: dict[str, Any]) -> R:
        """The record from its JSON mapping (keys it does not name go to `extra`)."""
        names = cls._names()
        return cls(**{k: data[k] for k in names if k in data}, extra={k: v for k, v in data.items() if k not in names})

    def to_dict(self) -> dict[str, Any]:
        """The JSON mapping: the named fields that are set (None ones left out), then `extra`."""
        out = {name: getattr(self, name) for name in self._names() if getattr(self, name) is not None}
        return {**out, **self.extra}


@dataclass
class Timed(OpenRecord):
    """A timed run at one batch (the throughput at B, a requested batch, a trial process's measure answer): warm-up
    and timed steps, their times, peaks, samples/s and units/s; a failed one has its outcome, error and step."""

    batch: int | None = None
    outcome: str | None = None
    warmup_steps: int | None = None
    continued_from_trial: bool | None = None
    first_step_seconds: float | None = None
    warmup_step_seconds: float | None = None
    timed_steps_cut_from: int | None = None
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    step_time: dict[str, Any] | None = None  # median_s, p10_s, p90_s, steps, ... (measure.summarize_times)
    unit: str | None = None
    units_per_step: float | None = None
    samples_per_s: float | None = None
    units_per_s: float | None = None
    utilization: dict[str, Any] | None = None
    flops_per_sample: float | None = None
    achieved_tflops: float | None = None
    peak_tflops: float | None = None
    mfu: float | None = None
    mfu_note: str | None = None
    compile_seconds: float | None = None
    error: str | None = None
    failed_at_step: int | None = None

    @property
    def fits(self) -> bool:
        """Whether the run completed (a record without an outcome is from a file that only kept completed runs)."""
        return (self.outcome or FIT) == FIT


@dataclass
class CurvePoint(OpenRecord):
    """One point of the throughput curve: a timed run at `batch` (or one skipped by the curve's budget)."""

    batch: int
    outcome: str | None = None
    fresh: bool | None = None
    samples_per_s: float | None = None
    units_per_s: float | None = None
    step_median_s: float | None = None
    step_p10_s: float | None = None
    step_p90_s: float | None = None
    timed_steps: int | None = None
    first_step_s: float | None = None
    warmup_step_s: float | None = None
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    wall_seconds: float | None = None
    process_s: float | None = None
    estimated_s: float | None = None
    phase: str | None = None
    error: str | None = None

    @property
    def fits(self) -> bool:
        return self.outcome == FIT


@dataclass
class Check(Attempt):
    """A fresh-process check of the proof: an Attempt, with a failure's out-of-memory figures (`oom`)."""

    oom: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        if data.get("oom") is None:
            data.pop("oom", None)  # only a failure whose message had figures has them
        return data


@dataclass
class Pair(OpenRecord):
    """The edge a search or a proof found: `fits` fits and `fails` does not (None: not found)."""

    fits: int | None = None
    fails: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"fits": self.fits, "fails": self.fails, **self.extra}  # both, also when unknown


@dataclass
class Proof(OpenRecord):
    """The fresh-process proof of a precision's max batch: the search's pair, the fresh pair, every check."""

    fits: int | None = None
    fails: int | None = None
    fail_outcome: str | None = None
    agreed: bool | None = None
    verified: bool | None = None
    checks: list[Check] = field(default_factory=list)
    search: Pair | None = None
    in_process: Pair | None = None  # files from before fresh search trials name the search's pair so
    reused_from_search: list[int] = field(default_factory=list)
    fit_check: str | None = None  # what a fresh fit ran, in words
    seconds: float | None = None
    soak: dict[str, Any] | None = None  # scan --soak's record (probe/soak.py)
    non_monotone: dict[str, Any] | None = None  # where fresh checks contradicted one edge (probe/proof.py)

    @property
    def found(self) -> Pair:
        """The search's pair (before fresh checks), whichever name the file gives it."""
        return self.search or self.in_process or Pair()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Proof":
        proof = super().from_dict(data)
        proof.checks = [Check.from_dict(c) for c in data.get("checks") or []]
        proof.search = Pair.from_dict(proof.search) if isinstance(proof.search, dict) else None
        proof.in_process = Pair.from_dict(proof.in_process) if isinstance(proof.in_process, dict) else None
        return proof

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["checks"] = [c.to_dict() for c in self.checks]
        for key in ("search", "in_process"):
            if key in data:
                data[key] = getattr(self, key).to_dict()
        return data
