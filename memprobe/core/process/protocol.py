"""The trial-process protocol: typed requests and answers, and the one place each is put on the wire and read back.

No torch. The scan (runner.Worker) sends a request as one JSON line; the trial process (probe/child/worker.py) answers with one
JSON line. A request names its kind in "op" and the type of its answer in `answer`; an answer that IS a result record
is that record (a trial's Attempt, a timed run's Timed). A refused request (a setup that failed, an unknown kind) is
a Failure whatever was asked; an answer that never came (the process died or ran past its time) is Lost, made by the
parent, never sent. One more kind of request is one more Request subclass in REQUESTS, its answer type, and its
handler in probe/child/worker.py.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar, TypeVar, Union

from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.process.outcomes import CRASH, TIMEOUT
from memprobe.core.process.wire import MessageError, from_json, from_wire, to_json, to_wire
from memprobe.core.records.breakdown import Breakdown
from memprobe.core.records.records import Timed
from memprobe.core.workload.registry import Workload

# A line that is not a message of the kind expected (not JSON, an unknown request, a field missing or of another
# type): core/process/wire.py's error, under the name the trial protocol's readers catch.
ProtocolError = MessageError


# --- answers -----------------------------------------------------------------------------------------------------


@dataclass
class Emulation:
    """`--memory-cap` on a GPU: the card's memory emulated (`memory_cap_bytes`), what was held outside PyTorch's
    allocator at setup, and the allocator limit that leaves the trials (core/cards/memcap.py)."""

    memory_cap_bytes: int
    outside_allocator_bytes_at_setup: int
    allocator_limit_bytes_at_setup: int


@dataclass
class Ready:
    """A setup that built the workload: the environment the trials run in and what building took."""

    environment: dict[str, Any]
    capacity_bytes: int | None = None  # what the trials may use: free + reserved at setup, the cap, or the budget
    weights_bytes: int | None = None
    build_seconds: float | None = None
    cuda_init_seconds: float | None = None
    task: dict[str, Any] = field(default_factory=dict)
    unit: str = "samples"
    emulation: Emulation | None = None  # --memory-cap: the cap and what was held outside the allocator


@dataclass
class Failure:
    """A request the process could not serve: a setup that failed (`kind` no_cuda, oom, error, user_error, ...;
    `stage` cuda-context, build or setup) or a request it does not know."""

    kind: str
    message: str
    stage: str = "setup"


@dataclass
class Flops:
    """FLOPs per sample of one step, counted in the process (None, with the reason in `error`, when not counted)."""

    flops_per_sample: float | None = None
    error: str | None = None


@dataclass
class Pong:
    """The answer to a ping: whether the process's small multithreaded CPU op gave the right sum, and its pid."""

    ok: bool
    pid: int


@dataclass
class BreakdownAnswer:
    """The memory breakdown of a step at B, or the outcome and error of a step that failed under the tracker (B stands
    either way)."""

    breakdown: Breakdown | None = None
    outcome: str | None = None
    error: str | None = None


@dataclass
class Lost:
    """No answer: the process died (`timed_out` False) or ran past its time limit and was killed (True)."""

    timed_out: bool = False

    @property
    def outcome(self) -> str:
        return TIMEOUT if self.timed_out else CRASH


Answer = Union[Ready, Failure, Flops, Pong, Attempt, Timed, BreakdownAnswer]

# Each answer type's wire form and reader. An Attempt travels under "attempt"; the others are their own mapping.
_WRITE: dict[type, Callable[[Any], dict[str, Any]]] = {
    Ready: lambda a: {"ok": True, **to_wire(a)},
    Failure: lambda a: {"ok": False, **asdict(a)},
    Flops: lambda a: {k: v for k, v in asdict(a).items() if v is not None or k == "flops_per_sample"},
    Pong: asdict,
    BreakdownAnswer: lambda a: {k: v for k, v in to_wire(a).items() if v is not None},
    Attempt: lambda a: {"attempt": a.to_dict()},
    Timed: lambda a: a.to_dict(),
}
_READ: dict[type, Callable[[dict[str, Any]], Any]] = {
    Ready: lambda d: from_wire(Ready, d),
    Failure: lambda d: from_wire(Failure, d),
    Flops: lambda d: from_wire(Flops, d),
    Pong: lambda d: from_wire(Pong, d),
    BreakdownAnswer: lambda d: from_wire(BreakdownAnswer, d),
    Attempt: lambda d: from_wire(Attempt, d.get("attempt")),
    Timed: Timed.from_dict,
}


def encode_answer(answer: Answer) -> str:
    """One answer as its wire line (newline included)."""
    for kind in type(answer).__mro__:
        if kind in _WRITE:
            return json.dumps(_WRITE[kind](answer)) + "\n"
    raise TypeError(f"not a protocol answer: {type(answer).__name__}")


def decode_answer(request: "Request", line: str) -> Answer:
    """The answer to `request` from its wire line: a Failure when the process refused it, else `request.answer`.
    Raises ProtocolError for a line that is not JSON, not a mapping, or not that answer (every field checked)."""
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise ProtocolError(f"not an answer: {line[:200]!r}") from exc
    if not isinstance(data, dict):
        raise ProtocolError(f"not an answer: {line[:200]!r}")
    if data.get("ok") is False and "kind" in data:
        return _READ[Failure](data)
    return _READ[request.answer](data)


def crashed(answer: Answer) -> bool:
    """Whether the answer reports a CRASH: the CUDA context is unusable and the process must end after sending it."""
    return isinstance(answer, (Attempt, Timed)) and answer.outcome == CRASH


# --- requests ----------------------------------------------------------------------------------------------------


@dataclass
class Request:
    """Base of a request: `op` names its kind on the wire, `answer` the type of the answer it gets."""

    op: ClassVar[str] = ""
    answer: ClassVar[type] = Failure


@dataclass(frozen=True)
class TrialSettings:
    """How a trial process sets torch up beyond the precision: cuDNN's benchmark mode, the allocator cap that
    emulates a smaller card (--memory-cap), and torch.compile."""

    cudnn_benchmark: bool = False
    memory_cap_bytes: int | None = None
    compile: bool = False


@dataclass
class SetupRequest(Request):
    """Build `workload` in one precision on `device`, with the scan's settings."""

    op: ClassVar[str] = "setup"
    answer: ClassVar[type] = Ready
    workload: Workload
    precision: str = "fp32"
    mode: str = "train"
    device: str = "cuda"
    cpu_budget_bytes: int | None = None
    settings: TrialSettings = field(default_factory=TrialSettings)


@dataclass
class TrialRequest(Request):
    """One trial at `batch` of `steps` steps; `keep`: a fit leaves its state for a measure with `cont`;
    `decode_steps`: in generate mode, each generation stops after the prefill and this many decode forwards (None:
    whole generations; core/run_length.GENERATE_SEARCH_DECODE)."""

    op: ClassVar[str] = "trial"
    answer: ClassVar[type] = Attempt
    batch: int = 1
    steps: int = 3
    loss_scale: float | None = None
    keep: bool = False
    decode_steps: int | None = None


@dataclass
class MeasureRequest(Request):
    """Warm-up and timed steps at `batch` (fewer timed steps past `budget_s`); `cont`: go on from the kept trial."""

    op: ClassVar[str] = "measure"
    answer: ClassVar[type] = Timed
    batch: int = 1
    warmup: int = 1
    steps: int = 10
    budget_s: float | None = None
    loss_scale: float | None = None
    cont: bool = False
    sample_interval: float = 0.1


@dataclass
class FlopsRequest(Request):
    """Count the FLOPs of one step at `batch`."""

    op: ClassVar[str] = "flops"
    answer: ClassVar[type] = Flops
    batch: int = 1


@dataclass
class BreakdownRequest(Request):
    """A step at `batch` under PyTorch's MemTracker in a process that has run nothing else (probe/breakdown_run.py)."""

    op: ClassVar[str] = "breakdown"
    answer: ClassVar[type] = BreakdownAnswer
    batch: int = 1
    steps: int = 3
    per_sample_bytes: int | None = None
    loss_scale: float | None = None


@dataclass
class PingRequest(Request):
    """Are you there, with working threads?"""

    op: ClassVar[str] = "ping"
    answer: ClassVar[type] = Pong


@dataclass
class ExitRequest(Request):
    """End the process (no answer)."""

    op: ClassVar[str] = "exit"


REQUESTS: dict[str, type[Request]] = {
    cls.op: cls
    for cls in (SetupRequest, TrialRequest, MeasureRequest, FlopsRequest, BreakdownRequest, PingRequest, ExitRequest)
}


def encode_request(request: Request) -> str:
    """One request as its wire line (newline included)."""
    return json.dumps({"op": request.op, **to_wire(request)}) + "\n"


def decode_request(line: str) -> Request:
    """The request on a wire line. Raises ProtocolError for an unknown kind or a line that is not a request (a field
    missing that has no default, or of another type)."""
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise ProtocolError(f"not a request: {line[:200]!r}") from exc
    op = data.get("op") if isinstance(data, dict) else None
    kind = REQUESTS.get(op) if isinstance(op, str) else None
    if kind is None:
        raise ProtocolError(f"unknown op {op!r}")
    return from_wire(kind, data)


# --- the predicting children: the predicted start (probe/hint.py, predict/hint_worker.py) and nothing fits ---------
# One JSON line per message, as the trial protocol. The predicted start: the scan sends a HintSetup, then a
# HintRequest per precision it starts; the child answers each with a HintAnswer once that precision is traced.
# Nothing fits: one NeedRequest, one NeedAnswer.


@dataclass
class HintSetup:
    """The first line to the predicted-start child: the workload, the precisions to trace in order, the trial's
    steps, its mode ("train" or "infer") and the world ([N, "ddp"|"fsdp"], per GPU) or None."""

    workload: Workload
    precisions: list[str]
    steps: int = 3
    mode: str = "train"
    world: list[Any] | None = None


@dataclass
class HintRequest:
    """Every later line: the predicted max batch of `precision` at `capacity_bytes`, answered under `id`."""

    precision: str
    capacity_bytes: int
    id: int


@dataclass
class HintAnswer:
    """The child's answer to request `id`: `max_batch` (with `seconds` since the child started tracing and `how`
    the traces were checked) or `error`; `at` is time.time() when it answered."""

    id: int | None
    precision: str
    at: float
    max_batch: int | None = None
    seconds: float | None = None
    how: str | None = None
    error: str | None = None

    def record(self) -> dict[str, Any]:
        """What the scan keeps of the answer (settings.predicted_start): every field given, but the request id."""
        return {k: v for k, v in asdict(self).items() if v is not None and k != "id"}


@dataclass
class NeedRequest:
    """The one line to the nothing-fits child (probe/nothing_fits.py, predict/need.py): the memory a trial of
    `workload` at batch 1 in `precision` needs, in `mode` (a training step, or in "generate" the generations of a
    fit)."""

    workload: Workload
    precision: str
    mode: str = "train"


@dataclass
class NeedAnswer:
    """The nothing-fits child's one answer: `need_bytes` (peak reserved, no capacity limit) or `error`."""

    need_bytes: int | None = None
    error: str | None = None


ChildMessage = Union[HintSetup, HintRequest, HintAnswer, NeedRequest, NeedAnswer]
M = TypeVar("M", HintSetup, HintRequest, HintAnswer, NeedRequest, NeedAnswer)


def message_line(message: ChildMessage) -> str:
    """One message to or from a predicting child (the predicted start, nothing fits) as its line (newline
    included)."""
    return to_json(message) + "\n"


def read_message(line: str | bytes, kind: type[M]) -> M:
    """The message of type `kind` (one of ChildMessage) on a line. Raises ProtocolError for a line that is not one
    (not JSON, a field missing that has no default, or of another type)."""
    return from_json(kind, line)
