"""The plan's records and arithmetic: from what fits on a card to the micro-batch and accumulation to run. No torch.

A plan row is one lever setting (precision; checkpointing and LoRA for LLMs; the optimizer of a model given by
name) on one card. Its max micro-batch B is measured (a result file for that card and setting) or predicted
(labelled). The micro-batch it recommends never goes past the knee: the cap is b* (the curve's best batch) or the
knee where a measured curve has one, whichever is smaller; B otherwise. The global batch N is reached exactly:
micro-batch x GPUs x accumulation steps = N, with the largest micro-batch under the cap that splits it so. Only
where no split does (N not a multiple of the GPUs) is it the fewest steps the cap allows, the micro-batch spread
evenly over them, and the effective global batch the nearest above N, said so in the row. Throughput and time per
global batch come only from a timed run at that exact micro-batch; anything else is "not measured".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

MEASURED, PREDICTED = "measured", "predicted"


class PlanError(ValueError):
    """A plan that cannot be made as asked (bad global batch, unknown card, a lever the workload lacks); one line."""


@dataclass(frozen=True)
class Levers:
    """One memory-lever setting: precision, activation checkpointing, LoRA rank, and the optimizer when chosen."""

    precision: str
    checkpointing: bool = False
    lora: int | None = None
    optimizer: str | None = None

    def label(self) -> str:
        """E.g. 'bf16 +ckpt +lora16' or 'fp16 adam'."""
        parts = [self.precision]
        if self.checkpointing:
            parts.append("+ckpt")
        if self.lora:
            parts.append(f"+lora{self.lora}")
        if self.optimizer:
            parts.append(self.optimizer)
        return " ".join(parts)


@dataclass
class Capacity:
    """What is known of one setting on the card: B, where it comes from, and the measured or predicted facts
    the plan uses. `timed`: batch -> samples/s of measured timed runs that fit; `peaks`: batch -> peak reserved
    bytes (measured trials, or the predictor's replay); `static_bytes`/`per_sample_bytes`: the fitted line
    peak(b) = static + per_sample x b (None where there is none)."""

    levers: Levers
    workload: str
    source: str  # MEASURED or PREDICTED
    max_batch: int
    capacity_bytes: int | None = None
    best_batch: int | None = None
    knee_batch: int | None = None
    timed: dict[int, float] = field(default_factory=dict)
    peaks: dict[int, int] = field(default_factory=dict)
    static_bytes: float | None = None
    per_sample_bytes: float | None = None
    unit: str = "samples"
    origin: str = ""  # the result file, or how it was predicted
    note: str = ""  # what the row must say of B: a predicted B at predict's search cap, or what batch 1 needs
    # Predicted rows: the largest batch predicted to fit with a margin of the memory left (predict's safe batch),
    # the one the plan recommends, and the margin in words.
    safe_batch: int | None = None
    safe_how: str = ""


@dataclass
class PlanRow:
    """One row of the plan (see the module docstring for each rule)."""

    setting: str
    workload: str
    source: str
    max_micro_batch: int
    cap: int
    cap_reason: str
    micro_batch: int
    accumulation_steps: int | None
    global_batch: int | None  # effective: accumulation_steps x micro_batch
    headroom_bytes: int | None
    headroom_how: str
    samples_per_s: float | None
    seconds_per_global_batch: float | None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Plan:
    """A plan for one workload on one card: rows sorted by time per global batch (unknown last) and notes."""

    model: str
    card: str
    global_batch: int | None
    rows: list[PlanRow]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "card": self.card,
            "global_batch": self.global_batch,
            "rows": [r.to_dict() for r in self.rows],
            "notes": list(self.notes),
        }


# The largest global batch planned. Published large-batch training reaches tens of thousands of images (LARS/LAMB,
# 32K-64K) and a few thousand sequences (4M tokens); past 2^24 samples per optimizer step it is a typo.
MAX_GLOBAL_BATCH = 1 << 24


def check_global_batch(global_batch: int | None, most: int | None = MAX_GLOBAL_BATCH) -> None:
    """Raises PlanError for a global batch below 1 or past `most` (a plan's: MAX_GLOBAL_BATCH; None: no bound, for
    the arithmetic alone)."""
    if global_batch is not None and (isinstance(global_batch, bool) or global_batch < 1):
        raise PlanError(f"--global-batch must be at least 1, got {global_batch}")
    if global_batch is not None and most is not None and global_batch > most:
        raise PlanError(
            f"--global-batch must be at most {most:,} (2^24 samples per optimizer step), got {global_batch:,}"
        )


def micro_cap(c: Capacity) -> tuple[int, str]:
    """The largest micro-batch the plan recommends, and why: min(b*, knee) where measured with a curve, else B; a
    predicted row's safe batch where predict gave one below B (the predicted edge can be a little high)."""
    if c.source == MEASURED and c.best_batch:
        if c.knee_batch and c.knee_batch < c.best_batch:
            return min(c.knee_batch, c.max_batch), f"knee {c.knee_batch} (b* {c.best_batch} is past it)"
        knee = f", knee {c.knee_batch}" if c.knee_batch else ", no knee"
        return min(c.best_batch, c.max_batch), f"b* {c.best_batch}{knee}"
    if c.source == MEASURED:
        return c.max_batch, "B (no throughput curve in the result)"
    if c.safe_batch is not None and c.safe_batch < c.max_batch:
        return max(1, c.safe_batch), f"safe batch (predicted, {c.safe_how}; B {c.max_batch} predicted, no curve)"
    return c.max_batch, "B (predicted; no curve)"


def accumulate(global_batch: int, cap: int, gpus: int = 1) -> tuple[int, int, int]:
    """(accumulation steps, micro-batch, effective global batch) reaching `global_batch` over `gpus` GPUs with
    micro-batches of at most `cap`: exactly where a split exists (micro-batch x gpus x steps = N, the largest such
    micro-batch), else the fewest steps, ceil(N / (cap x gpus)), with the micro-batch spread evenly and the
    effective global batch the nearest multiple above N. Raises PlanError for a global batch, cap or GPU count below
    1 (any larger global batch is exact: integers throughout)."""
    check_global_batch(global_batch, most=None)
    if cap < 1 or gpus < 1:
        raise PlanError(f"a micro-batch cap and a GPU count must be at least 1, got {cap} and {gpus}")
    if global_batch % gpus == 0:
        share = global_batch // gpus
        micro = next(m for m in range(min(cap, share), 0, -1) if share % m == 0)  # 1 always divides
        return share // micro, micro, global_batch
    return _fewest_steps(global_batch, cap, gpus)


def _fewest_steps(global_batch: int, cap: int, gpus: int) -> tuple[int, int, int]:
    """(steps, micro-batch, effective global batch): the fewest steps under the cap, the micro-batch spread evenly."""
    steps = -(-global_batch // (cap * gpus))  # integer ceilings: a float quotient is wrong past 2**53
    micro = -(-global_batch // (steps * gpus))
    return steps, micro, steps * micro * gpus


def split_note(global_batch: int, cap: int, gpus: int, steps: int, micro: int, effective: int) -> str:
    """What a row must say of its split of `global_batch`: that none is exact (and what runs instead), or that the
    exact one takes more than twice the steps of the nearest inexact one (and which global batch that is); ""."""
    per = f"{gpus} GPUs x {micro} x {steps} steps" if gpus > 1 else f"{micro} x {steps} steps"
    if effective != global_batch:
        return (
            f"no micro-batch up to the cap {cap} splits {global_batch} over {gpus} GPUs exactly (it is not a "
            f"multiple of {gpus}): the effective global batch is {effective} = {per}"
        )
    fewer, bigger, other = _fewest_steps(global_batch, cap, gpus)
    if steps > 2 * fewer:
        return (
            f"{global_batch} splits exactly only as {per}; --global-batch {other} would run {bigger} x {fewer} steps"
            + (f" on each of {gpus} GPUs" if gpus > 1 else "")
        )
    return ""


def headroom(c: Capacity, micro: int) -> tuple[int | None, str]:
    """Bytes the allocator has left at `micro` (capacity minus the peak reserved), and how the peak is known:
    a trial at that batch, else the fitted line (said so), else unknown.

    A predicted peak is replayed with no capacity limit, and a line is a fit: near the max batch either can pass the
    capacity although the batch fits, as the real allocator frees its cached blocks and retries when cudaMalloc
    fails. A batch up to the max batch then has no room to spare: 0, said so, never a negative headroom."""
    if not c.capacity_bytes:
        return None, "no allocator capacity"
    how = "measured peak" if c.source == MEASURED else "predicted peak"
    if micro in c.peaks:
        room = c.capacity_bytes - c.peaks[micro]
    elif c.static_bytes is not None and c.per_sample_bytes is not None:
        room = int(c.capacity_bytes - (c.static_bytes + c.per_sample_bytes * micro))
        how = "fitted line of measured peaks" if c.source == MEASURED else "fitted line of predicted peaks"
    else:
        return None, "no peak at this batch"
    if room < 0 and micro <= c.max_batch:
        return 0, f"{how} past the capacity: fits as the allocator frees cached blocks"
    return room, how


def plan_row(c: Capacity, global_batch: int | None, gpus: int = 1) -> PlanRow:
    """The plan for one setting on `gpus` GPUs (the micro-batch and max micro-batch per GPU). Without a global batch
    the micro-batch is the cap and there is no accumulation."""
    if c.max_batch < 1:
        return PlanRow(
            c.levers.label(),
            c.workload,
            c.source,
            c.max_batch,
            0,
            "batch 1 does not fit",
            0,
            None,
            None,
            None,
            "",
            None,
            None,
            "; ".join(["does not train at batch 1 on this card"] + ([c.note] if c.note else [])),
        )
    cap, reason = micro_cap(c)
    if global_batch is None:
        steps, micro, effective = 1, cap, cap * gpus
    else:
        steps, micro, effective = accumulate(global_batch, cap, gpus)
    room, how = headroom(c, micro)
    speed = c.timed.get(micro) if c.source == MEASURED else None
    seconds = steps * micro / speed if speed else None
    notes = [c.note] if c.note else []
    split = split_note(global_batch, cap, gpus, steps, micro, effective) if global_batch is not None else ""
    notes += [split] if split else []
    if speed is None:
        notes.append(
            "throughput not measured at this micro-batch"
            if c.source == MEASURED
            else "throughput not measured (predicted row)"
        )
    return PlanRow(
        c.levers.label(),
        c.workload,
        c.source,
        c.max_batch,
        cap,
        reason,
        micro,
        steps,
        effective,
        room,
        how,
        speed,
        seconds,
        "; ".join(notes),
    )


def sort_rows(rows: list[PlanRow]) -> list[PlanRow]:
    """Rows by time per global batch, fastest first; rows without one last (measured before predicted, then the
    larger micro-batch first)."""
    return sorted(
        rows,
        key=lambda r: (
            r.seconds_per_global_batch is None,
            r.seconds_per_global_batch or 0.0,
            r.source != MEASURED,
            -r.micro_batch,
            r.setting,
        ),
    )


def make_plan(
    model: str,
    card: str,
    capacities: list[Capacity],
    global_batch: int | None,
    notes: list[str] | None = None,
    gpus: int = 1,
) -> Plan:
    """The plan of `capacities` for `global_batch` on `gpus` GPUs, rows sorted (sort_rows). Raises PlanError for a
    bad global batch."""
    check_global_batch(global_batch)
    rows = sort_rows([plan_row(c, global_batch, gpus) for c in capacities])
    return Plan(model, card, global_batch, rows, list(notes or []))
