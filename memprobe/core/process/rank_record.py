"""The files between a multi-GPU scan and its ranks: the launch's request, each rank's record, typed, and a served
group's commands and votes.

No torch. Every rank reads the launch's request (`request.json`, or a launch started ahead: a StandbyRequest there,
the RankRequest later in `go.json`) with `read_rank_request`, which checks every field (core/process/wire.py). A
rank (probe/child/rank.py, served_rank.py) keeps a RankRecord (its setup, clock marks, trials, timed run, failure and
rebuilds, each a record of its own) and writes it whole, atomically, after every step of its protocol; the parent
(launch.py, group.py) reads it back with `read_rank_record`, which checks every field the same way and never raises:
a record not yet written, half of one, or one with a field of another type reads as None. Keys this version does not
know are kept in `extra` and written back, so an older parent reads a newer rank's record and the reverse.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, TypeVar, Union

from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.process.protocol import TrialSettings
from memprobe.core.process.wire import MessageError, from_json, from_wire, to_wire
from memprobe.core.records.records import Timed
from memprobe.core.workload.registry import Workload

T = TypeVar("T")


def command_path(run_dir: Path, index: int) -> Path:
    """Where a served group's parent writes command `index` (a trial at a batch, or stop)."""
    return run_dir / f"cmd{index}.json"


def vote_path(run_dir: Path, index: int, rank: int) -> Path:
    """Where rank `rank` of a served group writes its vote on command `index` (its outcome and collectives)."""
    return run_dir / f"vote{index}.r{rank}.json"


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write `data` atomically (temp file, rename): a reader never sees half of it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


@dataclass(frozen=True)
class TimedSteps:
    """The timed run that ends a launch: `warmup` steps, then `steps` timed ones, at its last batch."""

    warmup: int
    steps: int


@dataclass(frozen=True)
class LaunchRequest:
    """One launch: a fresh group of `world_size` ranks runs `batches` in order, then (with `measure`) times the
    last one. `strategy`: ddp, fsdp or none (1 rank)."""

    workload: Workload
    precision: str
    strategy: str
    world_size: int
    batches: list[int]
    steps: int = 3
    measure: TimedSteps | None = None
    device: str = "cuda"
    cpu_budget_bytes: int | None = None
    rank_cpu_budget_bytes: dict[str, int] = field(default_factory=dict)  # tests: a smaller budget on one rank
    settings: TrialSettings = field(default_factory=TrialSettings)
    pg_timeout_s: float = 120.0
    timeout_s: float = 900.0
    serve: bool = False  # a served group (child/served_rank.py): the ranks take trial after trial from command files

    def cpu_budget(self, rank: int) -> int | None:
        """The CPU memory budget of rank `rank` (its own where one is given, else the launch's)."""
        return self.rank_cpu_budget_bytes.get(str(rank), self.cpu_budget_bytes)


@dataclass(frozen=True)
class RankRequest:
    """What every rank of a launch runs: the launch, the folder the ranks write to, the pid of the scan that started
    it (a rank whose scan is gone exits) and whether the launch was started ahead (a standby's)."""

    launch: LaunchRequest
    run_dir: str
    parent_pid: int | None = None
    prestarted: bool = False


@dataclass(frozen=True)
class StandbyRequest:
    """A launch started ahead (probe/distributed/standby.py): its ranks import the workload `family`'s code, then
    wait in `run_dir` for their RankRequest (GO_FILE) while the scan at `parent_pid` lives."""

    family: str
    device: str
    run_dir: str
    parent_pid: int | None = None


@dataclass(frozen=True)
class _Kind:
    """The head of a launch's request: which kind it is."""

    kind: str


REQUEST_FILE = "request.json"
GO_FILE = "go.json"
_RANK_REQUESTS: dict[str, type[RankRequest] | type[StandbyRequest]] = {"launch": RankRequest, "standby": StandbyRequest}


def write_rank_request(path: Path, request: RankRequest | StandbyRequest) -> None:
    """Write a launch's request (which kind, under "kind", then its fields), atomically."""
    kind = next(k for k, v in _RANK_REQUESTS.items() if isinstance(request, v))
    write_json(path, {"kind": kind, **to_wire(request)})


def read_rank_request(path: Path) -> Union[RankRequest, StandbyRequest]:
    """The request in `path`. Raises OSError where it cannot be read, MessageError where it is not a request of a
    known kind (its fields checked: one missing, or of another type)."""
    text = path.read_text()
    head = from_json(_Kind, text)
    kind = _RANK_REQUESTS.get(head.kind)
    if kind is None:
        raise MessageError(f"{path}: not a launch request: kind {head.kind!r}")
    return from_json(kind, text)


@dataclass
class Command:
    """A served group's command to its ranks: a trial at `batch` (a rank that fails waits `vote_wait_s` for its
    peers' votes), or stop (`why` says why where a rank made it up itself)."""

    op: str  # "trial" or "stop"
    batch: int | None = None
    vote_wait_s: float = 30.0
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The command as written to `cmd<K>.json`."""
        return {k: v for k, v in asdict(self).items() if v not in (None, "")}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Command:
        """Read a command, every field checked (unknown keys ignored). Raises MessageError where `op` is missing or
        a field is of another type."""
        return from_wire(cls, data)


@dataclass
class Vote:
    """A served rank's vote on a command: its trial's outcome, how many collectives it had issued on each process
    group (None where torch does not say), the batch, and whether the failure was raised by the communication
    library itself (`in_collective`)."""

    outcome: str
    collectives: list[int] | None = None
    batch: int | None = None
    in_collective: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Vote:
        """Read a vote, every field checked (unknown keys ignored). Raises MessageError where `outcome` is missing or
        a field is of another type."""
        return from_wire(cls, data)


def write_command(run_dir: Path, index: int, command: Command) -> None:
    """Write command `index` of a served group, atomically."""
    write_json(command_path(run_dir, index), command.to_dict())


def read_command(run_dir: Path, index: int) -> Command | None:
    """Command `index`, or None where it is not written yet (or does not read as one). Never raises."""
    return _read_as(command_path(run_dir, index), Command.from_dict)


def write_vote(run_dir: Path, index: int, rank: int, vote: Vote) -> None:
    """Write rank `rank`'s vote on command `index`, atomically."""
    write_json(vote_path(run_dir, index, rank), asdict(vote))


def read_vote(run_dir: Path, index: int, rank: int) -> Vote | None:
    """Rank `rank`'s vote on command `index`, or None where there is none yet (or it does not read as one)."""
    return _read_as(vote_path(run_dir, index, rank), Vote.from_dict)


def _read_as(path: Path, make: Callable[[dict[str, Any]], T]) -> T | None:
    """`make` of the JSON object in `path`, or None where the file is missing, half written, not an object, or
    `make` refuses it (KeyError, TypeError, ValueError). Never raises."""
    try:
        data = json.loads(path.read_text())
        return make(data) if isinstance(data, dict) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def rank_record_path(run_dir: Path, rank: int) -> Path:
    """Where rank `rank` of the launch in `run_dir` writes its record."""
    return run_dir / f"rank{rank}.json"


@dataclass
class RankFailure:
    """The first failure a rank recorded: where (`stage`: setup, trial, measure), at which batch (None: setup),
    the outcome and message, and when (`at`, seconds since the epoch). `command` is the served group's command it
    failed in; the peaks and seconds are the failed trial's where it ran far enough to have them."""

    stage: str
    batch: int | None
    outcome: str
    message: str = ""
    at: float = 0.0
    command: int | None = None
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    seconds: float | None = None
    failed_at_step: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The failure as it goes on the wire: its fields (None ones left out) and the unknown keys it came with."""
        out = {k: v for k, v in asdict(self).items() if k != "extra" and (v is not None or k == "batch")}
        return {**self.extra, **out}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankFailure:
        """Read a failure; unknown keys go to `extra`. Raises KeyError/TypeError where stage or outcome is missing."""
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(
            stage=data["stage"],
            batch=data.get("batch"),
            outcome=data["outcome"],
            **{k: data[k] for k in known - {"stage", "batch", "outcome"} if k in data},
            extra={k: v for k, v in data.items() if k not in known},
        )


@dataclass
class RankSetup:
    """What building the model gave on one rank (child/rank.py `build`): the trial process's environment (with the
    NCCL version on CUDA), the memory the trials may use, the weights before and after wrapping, the task, its unit,
    what building and CUDA's context took, and what the wrapper did (`wrap`, training/wrap.py's description)."""

    environment: dict[str, Any] = field(default_factory=dict)
    capacity_bytes: int | None = None
    weights_bytes: int | None = None
    task: dict[str, Any] = field(default_factory=dict)
    unit: str = "samples"
    build_seconds: float | None = None
    cuda_init_seconds: float | None = None
    wrap: dict[str, Any] = field(default_factory=dict)
    weights_after_wrap_bytes: int | None = None


@dataclass
class RankMarks:
    """A rank's clock marks (seconds since the epoch): its Python up (`started`), its imports done, the process group
    joined; `prestarted`: the launch was started ahead (a standby's), so `started` is when its request came."""

    started: float | None = None
    imported: float | None = None
    joined: float | None = None
    prestarted: bool = False


@dataclass
class RankTrial(Attempt):
    """One trial a rank ran: its Attempt, and in a served group the command it answered (`command`) and when it
    ended (`at`, seconds since the epoch; a failed one's: when the failure was recorded)."""

    command: int | None = None
    at: float | None = None

    @classmethod
    def of(cls, attempt: Attempt, command: int | None = None, at: float | None = None) -> RankTrial:
        """`attempt` as a rank records it."""
        return cls(**asdict(attempt), command=command, at=at)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankTrial:
        """Read a trial, every field checked. Raises MessageError where one is missing or of another type."""
        return from_wire(cls, data)


@dataclass
class Rebuild:
    """A served group's rank built its model again after command `after_command` failed out of memory on every rank:
    how long that took and the memory the trials may use after it."""

    after_command: int
    seconds: float
    capacity_bytes: int | None = None


@dataclass
class RankRecord:
    """One rank's record: who it is, the trials it ran, its timed run (`measure`), its first failure, and whether it
    finished (`done`). `setup` and `timeline` say what building the model and starting took. A served group's rank
    also keeps `answered` (the last command it finished), `committed` (the last whose commit completed), `rebuilds`
    and why it `ended` early."""

    rank: int
    world_size: int = 0
    pid: int = 0
    batches: list[RankTrial] = field(default_factory=list)
    measure: Timed | None = None
    failure: RankFailure | None = None
    done: bool = False
    setup: RankSetup | None = None
    timeline: RankMarks | None = None
    answered: int = -1
    committed: int = -1
    rebuilds: list[Rebuild] = field(default_factory=list)
    ended: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The record as written to `rank<R>.json`: its fields (records within as they write themselves), then the
        keys it came with that this version does not know."""
        out = to_wire(self)
        extra = out.pop("extra")
        return {**extra, **out}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankRecord:
        """Read a record, every field checked (core/process/wire.py; a null reads as the field's default); unknown
        keys go to `extra`. Raises MessageError on a record that is not one (no rank, a field of another type, a
        failure without stage or outcome)."""
        known = {f.name for f in fields(cls)} - {"extra"}
        record = from_wire(cls, {k: v for k, v in data.items() if k in known and v is not None})
        record.extra = {k: v for k, v in data.items() if k not in known}
        return record

    def entry(self, command: int) -> RankTrial | None:
        """This rank's trial for a served group's command `command`, or None."""
        return next((b for b in self.batches if b.command == command), None)

    def save(self, run_dir: Path) -> None:
        """Write the record atomically: the parent never reads half of it."""
        write_json(rank_record_path(run_dir, self.rank), self.to_dict())


def read_rank_record(run_dir: Path, rank: int) -> RankRecord | None:
    """Rank `rank`'s record in `run_dir`, or None where there is none yet or it does not read as one. Never raises."""
    return _read_as(rank_record_path(run_dir, rank), lambda data: RankRecord.from_dict({"rank": rank, **data}))


def read_rank_records(run_dir: Path, world_size: int) -> list[RankRecord | None]:
    """Every rank's record in `run_dir` (None for a rank with none)."""
    return [read_rank_record(run_dir, r) for r in range(world_size)]
