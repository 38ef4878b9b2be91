"""The typed sections of a result: proof, fresh checks, timed runs, curve points; and Section, the base of settings.

No torch. Each record's from_dict is the one place its JSON is read, and to_dict the one place it is written; its
field types (core/records/fieldtypes.py) are the one declaration of what a result file may hold there (core/records/schema.py
checks a file against them). Keys a record does not name (written by another memprobe version, or a measurement
added later) are kept in `extra` as read and written back, so rewriting a file loses nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Annotated, Any, Mapping, TypedDict, TypeVar

from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.process.outcomes import FIT
from memprobe.core.records.fieldtypes import (
    SECONDS_MAX,
    Batch,
    Batch1,
    Bytes,
    Count,
    CurveOutcome,
    Flops,
    Name,
    Outcome,
    Range,
    Rate,
    Seconds,
    Tflops,
    Unit,
    Words,
)
from memprobe.core.records.schema import hints_of, plain, read_value

R = TypeVar("R", bound="OpenRecord")
# How the proof's fresh walk ended (probe/edge_walk.py): at a proven pair, at the batch cap, out of checks, out of
# time near a flaky edge, or stopped (Ctrl-C, a signal: probe/pipeline.py keeps the checks so far).
ENDINGS = ("edge", "cap", "check-limit", "budget", "interrupted")
S = TypeVar("S", bound="Section")


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


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


# The default of a Section's field: the key is not in the JSON (the attribute reads None). Typed Any so that a
# field of any type can default to it.
ABSENT: Any = _Absent()


@dataclass(kw_only=True)
class Section(OpenRecord):
    """A JSON mapping read and written key for key: settings, environment, the workload and their parts.

    A named key is an attribute (None when the JSON lacks it or holds null), nested records are read as their
    records (by their field types), other keys stay in `extra`. The record remembers which keys the JSON held, and
    in what order, so that to_dict writes back the same keys and values: a null stays a null, an absent key stays
    absent. Built in code, it holds the fields given (None included) and every field set later, in that order.
    """

    def __post_init__(self) -> None:
        keys = []
        for name in self._names():
            if getattr(self, name) is ABSENT:
                object.__setattr__(self, name, None)
            else:
                keys.append(name)
        object.__setattr__(self, "_keys", keys + [k for k in self.extra if k not in keys])

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        keys = self.__dict__.get("_keys")
        if keys is not None and name != "extra" and name in hints_of(type(self)) and name not in keys:
            keys.append(name)

    @classmethod
    def from_dict(cls: type[S], data: Mapping[str, Any]) -> S:
        """The record from its JSON mapping: named keys as fields (nested records read), the others in `extra`."""
        names, hints = cls._names(), hints_of(cls)
        record = cls(
            **{k: read_value(hints[k], data[k]) for k in names if k in data},
            extra={k: v for k, v in data.items() if k not in names},
        )
        object.__setattr__(record, "_keys", list(data))
        return record

    def to_dict(self) -> dict[str, Any]:
        """The JSON mapping: the keys read or set, in that order (None as null), then any other key of `extra`."""
        names, out = self._names(), {}
        for key in [*self.__dict__["_keys"], *self.extra]:
            if key in names:
                out[key] = plain(getattr(self, key))
            elif key in self.extra and key not in out:
                out[key] = plain(self.extra[key])
        return out

    def merge(self, data: Mapping[str, Any]) -> None:
        """Set every key of `data` (a mapping in the JSON's form): named ones as fields, the others in `extra`."""
        names, hints = self._names(), hints_of(type(self))
        for key, value in data.items():
            if key in names:
                setattr(self, key, read_value(hints[key], value))
            else:
                self.extra[key] = value
                if key not in self.__dict__["_keys"]:
                    self.__dict__["_keys"].append(key)

    def copy(self: S) -> S:
        """A record of its own with the same keys and values (nested mappings shared)."""
        return type(self).from_dict(self.to_dict())


class _StepMedian(TypedDict):
    median_s: Seconds


class StepTime(_StepMedian, total=False):
    """The step times of a timed run (probe/measure.summarize_times)."""

    steps: Count
    mean_s: Seconds
    min_s: Seconds
    max_s: Seconds
    p10_s: Seconds
    p90_s: Seconds
    stdev_s: Seconds


class Metric(TypedDict, total=False):
    """One utilization figure's mean and max over a timed run's samples."""

    mean: Annotated[float, Range(0, 1e15)]
    max: Annotated[float, Range(0, 1e15)]


class Utilization(TypedDict, total=False):
    """Utilization during the timed steps: sample count and interval, and per figure its mean and max (null: never
    sampled, e.g. without NVML)."""

    samples: Annotated[float, Range(0, SECONDS_MAX)]
    interval_s: Seconds
    host_cpu_pct: Metric | None
    host_rss_bytes: Metric | None
    gpu_util_pct: Metric | None
    mem_util_pct: Metric | None
    mem_used_bytes: Metric | None
    power_w: Metric | None
    sm_clock_mhz: Metric | None
    temperature_c: Metric | None


@dataclass
class Timed(OpenRecord):
    """A timed run at one batch (the throughput at B, a requested batch, a trial process's measure answer): warm-up
    and timed steps, their times, peaks, samples/s and units/s; a failed one has its outcome, error and step."""

    batch: Batch1 | None = None
    outcome: Outcome | None = None
    warmup_steps: Count | None = None
    continued_from_trial: bool | None = None
    first_step_seconds: Seconds | None = None
    warmup_step_seconds: Seconds | None = None
    timed_steps_cut_from: Count | None = None
    peak_allocated: Bytes | None = None
    peak_reserved: Bytes | None = None
    step_time: StepTime | None = None
    unit: Unit | None = None
    units_per_step: Annotated[float, Range(0, 1 << 40)] | None = None
    samples_per_s: Rate | None = None
    units_per_s: Rate | None = None
    utilization: Utilization | None = None
    flops_per_sample: Flops | None = None
    achieved_tflops: Tflops | None = None
    peak_tflops: Tflops | None = None
    mfu: Annotated[float, Range(0, 2)] | None = None  # over 1 only where FLOPs were over-counted; past 2 a typo
    mfu_note: str | None = None
    compile_seconds: Seconds | None = None
    error: str | None = None
    failed_at_step: Count | None = None
    # --mode generate (schema 4): each generation timed phase by phase (probe/child/measure.PhaseClock), the medians
    # over the timed generations; the tokens each phase made per second (prefill: sequences x P prompt tokens; decode:
    # sequences x (N - 1), the first new token coming from the prefill), and the KV cache's bytes at this batch.
    prefill_seconds: Seconds | None = None
    decode_seconds: Seconds | None = None
    prefill_tokens_per_s: Rate | None = None
    decode_tokens_per_s: Rate | None = None
    kv_cache_bytes: Bytes | None = None

    @property
    def fits(self) -> bool:
        """Whether the run completed (a record without an outcome is from a file that only kept completed runs)."""
        return (self.outcome or FIT) == FIT


@dataclass
class CurvePoint(OpenRecord):
    """One point of the throughput curve: a timed run at `batch` (or one skipped by the curve's budget)."""

    batch: Batch1
    outcome: CurveOutcome | None = None
    fresh: bool | None = None
    samples_per_s: Rate | None = None
    units_per_s: Rate | None = None
    step_median_s: Seconds | None = None
    step_p10_s: Seconds | None = None
    step_p90_s: Seconds | None = None
    timed_steps: Count | None = None
    first_step_s: Seconds | None = None
    warmup_step_s: Seconds | None = None
    peak_allocated: Bytes | None = None
    peak_reserved: Bytes | None = None
    wall_seconds: Seconds | None = None
    process_s: Seconds | None = None
    estimated_s: Seconds | None = None
    phase: Name | None = None
    error: str | None = None
    prefill_tokens_per_s: Rate | None = None  # --mode generate: the timed run's phases (Timed)
    decode_tokens_per_s: Rate | None = None

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

    fits: Batch | None = None
    fails: Batch | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"fits": self.fits, "fails": self.fails, **self.extra}  # both, also when unknown


@dataclass
class BandRun(OpenRecord):
    """One batch of the flaky band: how many of its fresh runs fitted and how many failed."""

    batch: Batch1
    fits: Count = 0
    fails: Count = 0


@dataclass
class Band(OpenRecord):
    """The flaky band: from the lowest batch that failed in a fresh run (`low`) to the highest that fitted in one
    above it (`high`), with the fresh fits and failures of every batch run in it (probe/proof.band_record)."""

    low: Batch1
    high: Batch1
    runs: list[BandRun] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Band":
        band = super().from_dict(data)
        band.runs = [BandRun.from_dict(r) if isinstance(r, dict) else r for r in band.runs]
        return band

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "runs": [r.to_dict() for r in self.runs]}


@dataclass
class Proof(OpenRecord):
    """The fresh-process proof of a precision's max batch: the search's pair, the fresh pair, every check; since
    schema 5 the repeat rule (B fitted in `fits_at_b` of `runs_at_b` fresh runs, at least `repeat` = K) and the
    flaky band."""

    fits: Batch | None = None
    fails: Batch | None = None
    fail_outcome: Outcome | None = None
    agreed: bool | None = None
    verified: bool | None = None
    checks: list[Check] = field(default_factory=list)
    search: Pair | None = None
    in_process: Pair | None = None  # files from before fresh search trials name the search's pair so
    reused_from_search: list[Batch] = field(default_factory=list)
    fit_check: str | None = None  # what a fresh fit ran, in words
    seconds: Seconds | None = None
    soak: dict[str, Any] | None = None  # scan --soak's record (probe/soak.py)
    non_monotone: dict[str, Any] | None = None  # where fresh checks contradicted one edge (probe/proof.py)
    repeat: Count | None = None  # K, the fresh runs B must fit in (None: a file from before the rule, K = 1)
    runs_at_b: Count | None = None  # fresh runs at B (None: before the rule)
    fits_at_b: Count | None = None
    band: Band | None = None  # the flaky band (None: none seen, or a file from before the rule)
    ended_by: Annotated[str, Words(ENDINGS)] | None = None  # how the fresh walk ended (probe/edge_walk.py)

    @property
    def repeats(self) -> int:
        """K: the fresh runs B had to fit in (1 for files from before the repeat rule)."""
        return self.repeat or 1

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
        proof.band = Band.from_dict(proof.band) if isinstance(proof.band, dict) else None
        return proof

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["checks"] = [c.to_dict() for c in self.checks]
        for key in ("search", "in_process", "band"):
            if key in data:
                data[key] = getattr(self, key).to_dict()
        return data
