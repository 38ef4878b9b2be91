"""Result files: what a scan found, with the environment it ran in, as versioned JSON.

No torch here, so reports can be built on any machine. Files are written atomically (temp file in
the same folder, fsync, rename) so a crash or Ctrl-C never leaves half a file behind.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Callable, Mapping

from memprobe.core.estimates.memory_model import Attempt, MemoryModel
from memprobe.core.files.inputs import read_text
from memprobe.core.process.outcomes import FIT
from memprobe.core.records.breakdown import Breakdown, BreakdownError
from memprobe.core.records.environment import Environment, WorkloadRecord
from memprobe.core.records.field_rules import parse_date, shown
from memprobe.core.records.fieldtypes import FILE_STATUSES as FILE_STATUSES  # the statuses, re-exported
from memprobe.core.records.fieldtypes import PRECISION_STATUSES as PRECISION_STATUSES
from memprobe.core.records.fieldtypes import (
    STOPS,
    Batch,
    Batch1,
    Bytes1,
    Name,
    Precision,
    Range,
    Rate,
    Seconds,
    When,
    Words,
)
from memprobe.core.records.frontier import Frontier
from memprobe.core.records.generation import GenerationRecord
from memprobe.core.records.records import Check, CurvePoint, Proof, Timed
from memprobe.core.records.result_check import problem
from memprobe.core.records.settings import PrecisionSettings, ScanSettings

SCHEMA = "memprobe.scan"
# 2: throughput curve per precision (curve, best_batch, best_samples_per_s, best_units_per_s,
# curve_seconds). Version-1 files still load, with no curve. Fields added since without a new version (an older
# reader ignores them): the knee (knee_batch, knee_after_batch, knee_drop), skipped curve points
# (outcome "skipped", with the reason), and the curve's cost estimate in settings.curve_cost.
# 3: every section read and written by a typed record (core/records/records.py); search trials and fresh checks record
# `trial_fit` (whether the trial's steps completed, also when the timed run after them failed), which older files
# say only in the check's message. Versions 1 and 2 still load.
# 4: `--mode generate` scans (settings.mode "generate"): each precision's `generation` record (core/records/generation.py),
# and the timed runs' and curve points' prefill and decode figures. Versions 1 to 3 still load.
# 5: the repeat rule: B fitted in K fresh runs (proof.repeat, runs_at_b, fits_at_b), the flaky band (proof.band) and
# how the fresh walk ended (proof.ended_by). Versions 1-4 still load: K = 1 (Proof.repeats), no band.
SCHEMA_VERSION = 5


class ResultFileError(ValueError):
    """A result file cannot be read: missing, not JSON, not a memprobe result, a newer or invalid schema version, or
    a field of the wrong type or range (result_check)."""


@dataclass
class PrecisionResult:
    """Everything measured for one workload in one precision.

    max_batch is the answer (0: batch 1 does not train); proof holds the fresh-process pair
    (fits, fails, agreed, verified, checks); attempts lists every search trial in order (each says whether it ran fresh).
    throughput is the timed run at B; curve the timed runs at a ladder of batches, and best_* its best point.
    """

    precision: Precision
    status: Annotated[str, Words(PRECISION_STATUSES)] = "pending"
    max_batch: Batch | None = None
    stop: Annotated[str, Words(STOPS)] = ""
    proof: Proof | None = None  # None until the proof ran (an empty mapping in the file)
    attempts: list[Attempt] = field(default_factory=list)
    memory_model: dict[Name, MemoryModel] = field(default_factory=dict)  # by basis: peak_allocated, peak_reserved
    capacity_bytes: Bytes1 | None = None
    settings: PrecisionSettings = field(default_factory=PrecisionSettings)  # the task, flags, FLOPs, curve cost, ...
    search_seconds: Seconds | None = None
    throughput: Timed | None = None
    extra_batches: list[Timed] = field(default_factory=list)
    error: str = ""
    # Throughput curve (schema 2): timed runs at a ladder of batches up to B, ascending, B included;
    # b* (best_batch) is the batch with the highest samples/s. Empty / None in version-1 files.
    curve: list[CurvePoint] = field(default_factory=list)
    best_batch: Batch1 | None = None
    best_samples_per_s: Rate | None = None
    best_units_per_s: Rate | None = None
    curve_seconds: Seconds | None = None
    # The knee (additive to schema 2; None where no fall counted, or in older files): the last batch before
    # throughput falls by more than 10% (beyond the points' spread), the first batch after it, and the fall
    # (after's samples/s over before's, minus 1). See core/estimates/knee.py.
    knee_batch: Batch1 | None = None
    knee_after_batch: Batch1 | None = None
    knee_drop: Annotated[float, Range(-1, 0)] | None = None
    # The memory at the peak of a step at B by category (core/records/breakdown.py), measured in its own fresh process
    # after the proof; None where not measured. A new optional field: older readers ignore it.
    breakdown: Breakdown | None = None
    # --mode generate (schema 4): B's KV cache, its peak by category, the KV capacity and the tokens/s
    # (core/records/generation.py); None in other modes.
    generation: GenerationRecord | None = None

    def __post_init__(self) -> None:
        # Sections given as mappings (a result file's form, or a caller that builds one) become their records.
        if isinstance(self.proof, dict):
            self.proof = Proof.from_dict(self.proof) if self.proof else None
        self.attempts = [Attempt.from_dict(a) if isinstance(a, dict) else a for a in self.attempts]
        self.memory_model = {
            basis: MemoryModel.from_dict(m) if isinstance(m, dict) else m for basis, m in self.memory_model.items()
        }
        if isinstance(self.throughput, dict):
            self.throughput = Timed.from_dict(self.throughput) if self.throughput else None
        self.extra_batches = [Timed.from_dict(t) if isinstance(t, dict) else t for t in self.extra_batches]
        self.curve = [CurvePoint.from_dict(c) if isinstance(c, dict) else c for c in self.curve]
        if isinstance(self.breakdown, dict):
            self.breakdown = Breakdown.from_dict(self.breakdown) if self.breakdown else None
        if isinstance(self.settings, dict):
            self.settings = PrecisionSettings.from_dict(self.settings)
        if isinstance(self.generation, dict):
            self.generation = GenerationRecord.from_dict(self.generation) if self.generation else None

    @property
    def at_max_samples_per_s(self) -> float | None:
        """Samples/s at the max batch B (None when not measured)."""
        t = self.throughput
        return t.samples_per_s if t is not None and t.fits else None

    @property
    def curve_timed(self) -> list[int]:
        """The batches of the curve that were timed and fit, ascending."""
        return sorted(p.batch for p in self.curve if p.outcome == FIT)

    @property
    def curve_skipped(self) -> list[int]:
        """The batches of the curve its time budget left untimed (b* is then the best of the points timed)."""
        return sorted(p.batch for p in self.curve if p.outcome == "skipped")

    @property
    def checks(self) -> list[Check]:
        """The proof's fresh-process checks ([] before the proof ran)."""
        return self.proof.checks if self.proof is not None else []

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PrecisionResult":
        """The precision's record from its mapping in a result file (each section read by its record's from_dict)."""
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def to_dict(self) -> dict[str, Any]:
        """The precision's mapping in a result file (the one place each section is written)."""
        data = {f: getattr(self, f) for f in self.__dataclass_fields__}
        data.update(
            proof=self.proof.to_dict() if self.proof is not None else {},
            attempts=[a.to_dict() for a in self.attempts],
            memory_model={basis: m.to_dict() for basis, m in self.memory_model.items()},
            settings=self.settings.to_dict(),
            throughput=self.throughput.to_dict() if self.throughput is not None else None,
            extra_batches=[t.to_dict() for t in self.extra_batches],
            curve=[c.to_dict() for c in self.curve],
            breakdown=self.breakdown.to_dict() if self.breakdown is not None else None,
        )
        if self.generation is not None:
            data["generation"] = self.generation.to_dict()
        else:
            data.pop("generation")
        return data


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(init=False)
class ScanResult:
    """One scan of one workload on one GPU: the file memprobe writes and reads back.

    Its field types are the schema: core/records/result_check.py checks a file against them before it is read."""

    workload: WorkloadRecord
    environment: Environment
    settings: ScanSettings = field(default_factory=ScanSettings)
    precisions: dict[Precision, PrecisionResult] = field(default_factory=dict)
    # partial until every precision finished; then complete, or failed (see final_status)
    status: Annotated[str, Words(FILE_STATUSES)] = "partial"
    created: When = field(default_factory=_now)
    schema: str = SCHEMA
    schema_version: int = SCHEMA_VERSION
    # Optional (schema 3): precision -> the batch x sequence-length frontier (core/records/frontier.py); absent from files
    # of ordinary scans.
    frontier: dict[Precision, Frontier] | None = None

    def __init__(
        self,
        workload: WorkloadRecord | Mapping[str, Any],
        environment: Environment | Mapping[str, Any],
        settings: ScanSettings | Mapping[str, Any] | None = None,
        precisions: dict[str, PrecisionResult] | None = None,
        status: str = "partial",
        created: str | None = None,
        schema: str = SCHEMA,
        schema_version: int = SCHEMA_VERSION,
        frontier: Mapping[str, Frontier | Mapping[str, Any]] | None = None,
    ) -> None:
        """The result; sections given as mappings (a result file's form) become their records."""
        self.workload = workload if isinstance(workload, WorkloadRecord) else WorkloadRecord.from_dict(workload)
        self.environment = environment if isinstance(environment, Environment) else Environment.from_dict(environment)
        self.settings = settings if isinstance(settings, ScanSettings) else ScanSettings.from_dict(settings or {})
        self.precisions = precisions if precisions is not None else {}
        self.status, self.created = status, created if created is not None else _now()
        self.schema, self.schema_version = schema, schema_version
        self.frontier = (
            None
            if frontier is None
            else {p: f if isinstance(f, Frontier) else Frontier.from_dict(f) for p, f in frontier.items()}
        )

    def _first(self) -> PrecisionResult | None:
        return next(iter(self.precisions.values()), None)

    @property
    def max_batch(self) -> int | None:
        """The max batch of the first precision scanned (`.precisions[p].max_batch` for each one)."""
        first = self._first()
        return first.max_batch if first else None

    @property
    def throughput(self) -> float | None:
        """Samples per second at that max batch (None when not measured or not fitting)."""
        first = self._first()
        timed = first.throughput if first else None
        return timed.samples_per_s if timed is not None and timed.outcome == FIT else None

    @property
    def created_at(self) -> datetime:
        """When the scan was made, as a date (`created` parsed; a file that records none sorts first): the one way
        results are compared by age, never `created` as text."""
        try:
            return parse_date(self.created)
        except (TypeError, ValueError):
            return datetime.min.replace(tzinfo=timezone.utc)

    def gpu_name(self, unknown: str = "?") -> str:
        """The name of the GPU the scan ran on (an emulated card's label under --memory-cap), or `unknown` when
        the file records none: the one place a result's GPU name is read."""
        gpu = self.environment.gpu
        return str(gpu.name if gpu is not None and gpu.name else unknown)

    @property
    def mode(self) -> str:
        """ "train" or "infer" (files written before inference scans trained): the one place a result's mode is
        read."""
        return str(self.settings.mode or "train")

    def to_json(self) -> str:
        """The result as the JSON text of a result file."""
        return json.dumps(self.to_dict(), indent=1)

    def to_dict(self) -> dict[str, Any]:
        """The result as a result file's mapping; the schema fields first, so a reader sees what the file is."""
        # The version this memprobe writes: a file read from an older one is written back in today's shape.
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "workload": self.workload.to_dict(),
            "environment": self.environment.to_dict(),
            "settings": self.settings.to_dict(),
            "precisions": {name: p.to_dict() for name, p in self.precisions.items()},
            "status": self.status,
            "created": self.created,
            **({"frontier": {p: f.to_dict() for p, f in self.frontier.items()}} if self.frontier is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ScanResult":
        """The result from a result file's mapping (read_result checks it first)."""
        precisions = {name: PrecisionResult.from_dict(p) for name, p in data.get("precisions", {}).items()}
        return cls(
            workload=data["workload"],
            environment=data["environment"],
            settings=data.get("settings", {}),
            precisions=precisions,
            status=data.get("status", "partial"),
            created=data.get("created", ""),
            schema=data["schema"],
            schema_version=data["schema_version"],
            frontier=data.get("frontier"),
        )


# File statuses: `partial` while running or after an interrupt (the finished precisions are kept),
# `complete` when every precision finished and at least one found a max batch, `failed` when every
# precision ended in an error (no max batch was found at all). Files from before `failed` existed may
# say `complete` for such a scan; `effective_status` reads them honestly.
def final_status(precisions: dict[str, PrecisionResult]) -> str:
    """The status of a scan whose precisions all finished: failed when every one ended in error (or none
    ran), else complete."""
    if not precisions or all(p.status == "error" for p in precisions.values()):
        return "failed"
    return "complete"


def effective_status(result: "ScanResult") -> str:
    """The file's status, with an old `complete` whose precisions all ended in error read as failed."""
    if (
        result.status == "complete"
        and result.precisions
        and all(p.status == "error" for p in result.precisions.values())
    ):
        return "failed"
    return result.status


def slug(text: str) -> str:
    """Lower-case text reduced to letters, digits and single dashes, for file names."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def result_filename(gpu_name: str, workload: str, mode: str, when: datetime | None = None) -> str:
    """A file name that tells GPU, model, mode and time, e.g. nvidia-h100-80gb-hbm3_bert-large_train_20261121-171500.json."""
    when = when or datetime.now(timezone.utc)
    return f"{slug(gpu_name)}_{slug(workload)}_{mode}_{when.strftime('%Y%m%d-%H%M%S')}.json"


def write_result(result: ScanResult, path: str | Path) -> Path:
    """Write the result atomically: a temp file in the target folder, fsync, then rename over."""
    from memprobe.core.files.outputs import atomic_write

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    def fill(handle) -> None:
        json.dump(result.to_dict(), handle, indent=1, sort_keys=False)
        handle.write("\n")

    return atomic_write(path, fill)


def read_result(path: str | Path) -> ScanResult:
    """Read a result file. Raises ResultFileError (one line, naming the file) when it cannot."""
    path = Path(path)
    try:
        data = json.loads(read_text(path))
    except OSError as exc:
        raise ResultFileError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultFileError(f"{path}: not a JSON file ({exc})") from exc
    except RecursionError:  # json's parser recurses per nesting level; no result file nests more than a few
        raise ResultFileError(f"{path}: not a memprobe result file (its JSON nests too deeply to read)") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ResultFileError(f"{path}: not a memprobe result file (no '{SCHEMA}' schema field)")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ResultFileError(f"{path}: {shown(version)} is not a valid schema version (an integer from 1)")
    if version > SCHEMA_VERSION:
        raise ResultFileError(
            f"{path}: schema version {version} is newer than this memprobe reads ({SCHEMA_VERSION}); upgrade memprobe"
        )
    for key in ("workload", "environment", "precisions"):
        if not isinstance(data.get(key), dict):
            raise ResultFileError(f"{path}: malformed result file ('{key}' must be a mapping)")
    wrong = problem(data, ScanResult)
    if wrong:
        raise ResultFileError(f"{path}: malformed result file ({wrong})")
    try:
        result = ScanResult.from_dict(data)
        result.status = effective_status(result)
        return result
    except (KeyError, TypeError, BreakdownError) as exc:
        raise ResultFileError(f"{path}: incomplete result file ({type(exc).__name__}: {exc})") from exc


def find_result_files(paths: list[str | Path]) -> list[Path]:
    """Expand files and folders (searched recursively for *.json) into a sorted list of files."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found.extend(sorted(q for q in p.rglob("*.json") if not q.name.startswith(".")))
        else:
            found.append(p)
    return found


def load_results(
    paths: list[str | Path], on_skip: Callable[[ResultFileError], None] | None = None, strict_files: bool = True
) -> list[tuple[Path, ScanResult]]:
    """(path, result) for every result file in `paths` (files, and folders searched recursively), in one order
    whatever the order of `paths` (result_order), each file once however often it is named.

    A .json under a folder that is not a result file (e.g. a benchmark's output) is skipped and passed
    to `on_skip`, in the order of the files' paths. A file named explicitly must be a result file: ResultFileError
    (the first such file by path), unless `strict_files` is False, when it is skipped the same way.
    """
    loaded: list[tuple[Path, ScanResult]] = []
    failed: list[tuple[str, bool, ResultFileError]] = []
    seen: set[Path] = set()
    for arg in map(Path, paths):
        for path in find_result_files([arg]):
            try:
                real = path.resolve()
            except (OSError, RuntimeError):  # a symbolic link loop (RuntimeError before Python 3.13): read() says so
                real = Path(os.path.abspath(path))
            if real in seen:
                continue
            seen.add(real)
            try:
                loaded.append((path, read_result(path)))
            except ResultFileError as exc:
                failed.append((str(path), strict_files and not arg.is_dir(), exc))
    failed.sort(key=lambda f: f[0])
    for _path, strict, error in failed:
        if strict:
            raise error
    for _path, _strict, error in failed:
        if on_skip is not None:
            on_skip(error)
    return sorted(loaded, key=result_order)


def result_order(item: tuple[Path, ScanResult]) -> tuple[str, str, str, datetime, str, str]:
    """The order results are read in, so that no command's answer depends on the order its inputs were given in:
    by GPU, workload, mode, then oldest first (where a command keeps the newest, a tie goes to the later path)."""
    path, result = item
    name, mode = str(result.workload.name or ""), result.mode
    return result.gpu_name(), name, mode, result.created_at, path.name, str(path)
