"""Where the memory goes at the peak of a step: the breakdown record, its sum rule, and what buys more batch.

No torch here. The measured breakdown (training/breakdown.py, on the device) and the predicted one (the
fake-tensor trace) fill the same record, so reports compare them category by category. The categories
add up to the peak reserved bytes: allocator slack is reserved minus allocated, and whatever tracked
tensors do not account for inside the allocated peak is `unattributed`, a category of its own, never
hidden. Memory outside PyTorch (CUDA context, driver) is recorded beside the sum, not in it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

from memprobe.core.records.fieldtypes import Batch1, Bytes, Name, Seconds, SignedBytes
from memprobe.core.workload.variants import LLM_FAMILIES

# The categories in the order they are stacked and listed; together they make the peak reserved bytes.
CATEGORIES = (
    "parameters",
    "parameter_copies",
    "buffers",
    "gradients",
    "optimizer_state",
    "activations",
    "temporaries",
    "inputs",
    "allocator_slack",
    "unattributed",
)
LABELS = {
    "parameters": "parameters (master weights)",
    "parameter_copies": "low-precision weight copies",
    "buffers": "buffers",
    "gradients": "gradients",
    "optimizer_state": "optimizer state",
    "activations": "activations saved for backward",
    "temporaries": "temporaries and workspaces",
    "inputs": "input batch",
    "allocator_slack": "allocator slack (reserved - allocated)",
    "unattributed": "unattributed",
}
# The sum rule: the categories must add up to the peak reserved bytes within this share.
SUM_TOLERANCE = 0.01
TOP_MODULES = 10


class BreakdownError(ValueError):
    """A breakdown record that cannot be read (a missing or wrongly typed field)."""


class TopModule(TypedDict):
    """A module and the activation bytes it holds at the peak."""

    module: Name
    bytes: Bytes


@dataclass
class Breakdown:
    """The memory at the peak of one step at `batch`, by category, in bytes.

    `basis` is "measured" (a step on the device under PyTorch's MemTracker) or "predicted" (the same
    tracker over the fake-tensor trace, labelled emulated). `top_modules` lists the modules holding the
    most activation memory ({"module", "bytes"}, largest first). `per_sample_bytes` is what one more
    sample costs (the scan's fitted slope, or the trace's); `outside_pytorch` is CUDA context and driver
    memory (device used minus reserved; None on the CPU). `instrument` names what measured it, and
    `seconds` what that cost.
    """

    batch: Batch1
    basis: Name
    categories: dict[Name, SignedBytes]
    peak_reserved: Bytes
    peak_allocated: Bytes
    per_sample_bytes: SignedBytes | None = None
    outside_pytorch: SignedBytes | None = None
    top_modules: list[TopModule] = field(default_factory=list)
    instrument: str = ""
    seconds: Seconds | None = None
    device: str = ""
    note: str = ""

    @property
    def total(self) -> int:
        """The categories added up (equal to peak_reserved when the record is whole)."""
        return sum(self.categories.get(name, 0) for name in CATEGORIES)

    @property
    def sum_error(self) -> float:
        """|sum of categories - peak reserved| over peak reserved (0.0 for an empty peak)."""
        return abs(self.total - self.peak_reserved) / self.peak_reserved if self.peak_reserved else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Breakdown":
        """Read a record written by to_dict. Raises BreakdownError for a missing or wrongly typed field."""
        try:
            categories = {str(k): int(v) for k, v in dict(data["categories"]).items()}
            known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
            return cls(
                **{
                    **known,
                    "categories": categories,
                    "batch": int(data["batch"]),
                    "peak_reserved": int(data["peak_reserved"]),
                    "peak_allocated": int(data["peak_allocated"]),
                    "top_modules": [
                        TopModule(module=m["module"], bytes=m["bytes"]) for m in data.get("top_modules") or []
                    ],
                }
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BreakdownError(f"malformed breakdown ({type(exc).__name__}: {exc})") from exc


def assemble(
    batch: int, basis: str, tracked: dict[str, int], peak_allocated: int, peak_reserved: int, **details: Any
) -> Breakdown:
    """The record from the tracked tensor bytes at the peak (by category) and the allocator's peaks.

    Allocator slack is peak reserved minus peak allocated; `unattributed` is the allocated peak minus
    what the tracker saw (library workspaces allocated outside PyTorch's dispatch, rounding), kept with
    its sign. So the categories add up to the peak reserved exactly. Raises ValueError for an unknown
    category name.
    """
    unknown = set(tracked) - set(CATEGORIES)
    if unknown:
        raise ValueError(f"unknown breakdown categories: {', '.join(sorted(unknown))}")
    categories = {name: int(tracked.get(name, 0)) for name in CATEGORIES}
    categories["allocator_slack"] = int(peak_reserved) - int(peak_allocated)
    categories["unattributed"] = int(peak_allocated) - sum(int(v) for v in tracked.values())
    return Breakdown(
        batch=batch,
        basis=basis,
        categories=categories,
        peak_reserved=int(peak_reserved),
        peak_allocated=int(peak_allocated),
        **details,
    )


def check_sum(breakdown: Breakdown) -> str:
    """'' when the categories add up to the peak reserved within SUM_TOLERANCE, else a one-line problem."""
    if breakdown.sum_error <= SUM_TOLERANCE:
        return ""
    return (
        f"categories add up to {breakdown.total} bytes, {breakdown.sum_error:.1%} away from the peak reserved "
        f"{breakdown.peak_reserved}"
    )


def top_modules(activation_bytes: dict[str, int], count: int = TOP_MODULES) -> list[TopModule]:
    """The `count` modules holding the most activation memory, largest first, as {"module", "bytes"}."""
    ranked = sorted(((b, m) for m, b in activation_bytes.items() if b > 0), key=lambda item: (-item[0], item[1]))
    return [TopModule(module=m, bytes=int(b)) for b, m in ranked[:count]]


@dataclass(frozen=True)
class Lever:
    """One category's bytes turned into batch: an estimate, with the memprobe option that acts on it."""

    category: str
    bytes: int
    batch: int
    per_sample_bytes: int
    option: str

    def text(self) -> str:
        gib = 1024**3
        where = f" ({self.option})" if self.option else ""
        return (
            f"{LABELS[self.category]} {self.bytes / gib:.2f} GiB = +{self.batch} batch at "
            f"{self.per_sample_bytes / gib:.3f} GiB per sample{where} [estimate]"
        )


def _option(category: str, precision: str, family: str) -> str:
    """The memprobe option that shrinks a category, where one exists ('' where none does)."""
    llm = family in LLM_FAMILIES
    if category == "activations":
        options = ["--checkpointing"] if llm else []
        if precision in ("fp32", "tf32"):
            options.append("--precision bf16 or fp16 (half-size activations)")
        return "; ".join(options)
    if category in ("gradients", "optimizer_state"):
        return "--lora (trains adapters only)" if llm else ""
    if category == "parameter_copies":
        return "--precision fp32 drops them, at the speed of fp32" if precision in ("fp16", "bf16") else ""
    return ""


def what_buys_more_batch(breakdown: Breakdown, precision: str = "", family: str = "") -> list[Lever]:
    """Each category's bytes as extra batch at the per-sample cost, largest first (an estimate: freeing a
    category's bytes entirely is the bound, not a promise). Empty without a positive per-sample cost."""
    per_sample = breakdown.per_sample_bytes
    if not per_sample or per_sample <= 0:
        return []
    levers = [
        Lever(name, value, int(value // per_sample), int(per_sample), _option(name, precision, family))
        for name in CATEGORIES
        if name != "unattributed"
        for value in [breakdown.categories.get(name, 0)]
        if value > 0
    ]
    return sorted(levers, key=lambda lever: -lever.bytes)


PREDICTED_SCHEMA = "memprobe.breakdown"


def write_predicted(path: Any, records: list[dict[str, Any]]) -> Any:
    """Write predicted breakdowns ({"workload", "precision", "memory", "breakdown": Breakdown}) atomically as JSON."""
    import json

    from memprobe.core.files.outputs import atomic_write

    rows = [{**r, "breakdown": r["breakdown"].to_dict()} for r in records]
    return atomic_write(path, lambda handle: json.dump({"schema": PREDICTED_SCHEMA, "records": rows}, handle, indent=1))


def read_predicted(path: Any) -> list[dict[str, Any]]:
    """Read a file write_predicted wrote. Raises BreakdownError (one line, naming the file) when it cannot."""
    import json

    from memprobe.core.files.inputs import read_text

    try:
        data = json.loads(read_text(path))
    except OSError as exc:
        raise BreakdownError(f"{path}: cannot read a predicted breakdown file ({exc.strerror or exc})") from exc
    except ValueError as exc:
        raise BreakdownError(f"{path}: cannot read a predicted breakdown file ({exc})") from exc
    if not isinstance(data, dict) or data.get("schema") != PREDICTED_SCHEMA:
        raise BreakdownError(f"{path}: not a predicted breakdown file (no '{PREDICTED_SCHEMA}' schema field)")
    try:
        return [{**r, "breakdown": Breakdown.from_dict(r["breakdown"])} for r in data.get("records", [])]
    except (KeyError, TypeError) as exc:
        raise BreakdownError(f"{path}: malformed predicted breakdown record ({exc})") from exc
