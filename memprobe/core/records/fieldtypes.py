"""The types result records declare their fields with: a Python type and its range, words or name rule, in one place.

No torch. A record field declared `max_batch: Batch | None` holds an integer from 0 to BATCH_MAX, or null; the marks
carried by `Annotated` (Range, Words, Name, Date, LabelKeys) say what the plain type cannot, and core/records/schema.py turns
the declaration into the check a result file's value must pass, so the records are the only declaration of a field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from memprobe.core.cards.catalog import PRECISIONS
from memprobe.core.process.outcomes import OUTCOMES
from memprobe.core.workload.registry import UNITS
from memprobe.core.workload.strategies import STRATEGIES


@dataclass(frozen=True)
class Range:
    """A number from `low` up to `high` (None: no bound that side); `above`: greater than `low`, not equal."""

    low: float | None = 0
    high: float | None = None
    above: bool = False


@dataclass(frozen=True)
class Words:
    """One of a few words."""

    words: tuple[Any, ...]


@dataclass(frozen=True)
class Label:
    """A name shown in a table cell: one printable line without '|' (field_rules.LABEL)."""


@dataclass(frozen=True)
class Date:
    """An ISO 8601 date and time."""


@dataclass(frozen=True)
class LabelKeys:
    """A mapping whose every key is a name shown in a table cell (a workload's params)."""


# Bounds past which a figure is a typo or an edited file, never a measurement: a batch (or a searched sequence
# length) as the scan and predict take it (core/option_bounds.MAX_BATCH and MAX_SEQ_LEN), bytes of one card (1 PiB),
# a rate (a trillion samples/s), seconds (a year), a count of steps or trials.
BATCH_MAX = 1 << 20
BYTES_MAX = 1 << 50
RATE_MAX = 1e12
SECONDS_MAX = 3.2e7
COUNT_MAX = 1 << 20

PRECISION_STATUSES = ("pending", "done", "error", "interrupted")
FILE_STATUSES = ("partial", "complete", "failed")
STOPS = ("", "edge", "nothing-fits", "cap", "trial-limit", "error", "user-error", "interrupted")
MODES = ("train", "infer", "generate")

Batch = Annotated[int, Range(0, BATCH_MAX)]
Batch1 = Annotated[int, Range(1, BATCH_MAX)]
Bytes = Annotated[int, Range(0, BYTES_MAX)]
Bytes1 = Annotated[int, Range(1, BYTES_MAX)]
SignedBytes = Annotated[int, Range(-BYTES_MAX, BYTES_MAX)]
RealBytes = Annotated[float, Range(-BYTES_MAX, BYTES_MAX)]  # a fitted line's intercept
# A fitted line's bytes per sample: a scan fits none that does not rise with the batch (memory_model.fit_memory_model),
# and a card's max batch is divided by it
PerSampleBytes = Annotated[float, Range(0, BYTES_MAX, above=True)]
Rate = Annotated[float, Range(0, RATE_MAX)]
Seconds = Annotated[float, Range(0, SECONDS_MAX)]
Count = Annotated[int, Range(0, COUNT_MAX)]
Ranks = Annotated[int, Range(1, COUNT_MAX)]  # a world size
Flops = Annotated[float, Range(0, 1e21)]  # FLOPs per sample: a trillion-parameter model at a million tokens is 6e18
Tflops = Annotated[float, Range(0, 1e9)]
Name = Annotated[str, Label()]
When = Annotated[str, Date()]
Outcome = Annotated[str, Words(OUTCOMES)]
CurveOutcome = Annotated[str, Words((*OUTCOMES, "skipped"))]
Unit = Annotated[str, Words(UNITS)]
Precision = Annotated[str, Words(PRECISIONS)]
Strategy = Annotated[str, Words(STRATEGIES)]
Mode = Annotated[str, Words(MODES)]
