"""The bounds of every numeric option, declared once: the CLI's click types and the requests the API builds both read
them here, so `memprobe scan --steps 0` and `find_max_batch(..., steps=0)` are refused in the same words.

No click and no torch: cli/options.py makes a click type of a Bound (its range shown in --help as before), and
memprobe.request raises its RequestError with the message a Bound gives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from memprobe.core.estimates.plan import MAX_GLOBAL_BATCH


@dataclass(frozen=True)
class Bound:
    """A numeric option's bounds: `least` (a value must be at least it, or larger than it with `above`) and `most`
    (None: none), of `kind` int or float (a float must be finite); `optional`: None means not given (the API's
    default; the command's option left out). `subject` names one item of a list option ("batch sizes"); `why`
    follows the upper bound in the message; `what` is what the value should be ("a price in USD"), said when it is
    not a number at all."""

    option: str  # as the command line spells it
    least: int | float
    most: int | float | None = None
    above: bool = False
    kind: type = int
    subject: str = ""
    why: str = ""
    what: str = ""
    optional: bool = False

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` for this option, as one line without the option's name; None when nothing
        is. A bool is not a number here, nor is a float where a whole number is asked for."""
        if value is None and self.optional:
            return None
        what = self.what or ("a whole number" if self.kind is int else "a number")
        number = (int,) if self.kind is int else (int, float)
        if isinstance(value, bool) or not isinstance(value, number) or not math.isfinite(value):
            return f"expected {what}, got {value if isinstance(value, float) else repr(value)}"
        must = f"{self.subject} must" if self.subject else "must"
        if self.above and not value > self.least:
            return f"{must} be larger than {_shown(self.least)}, got {_shown(value)}"
        if value < self.least:
            return f"{must} be at least {_shown(self.least)}, got {_shown(value)}"
        if self.most is not None and value > self.most:
            why = f" ({self.why})" if self.why else ""
            return f"{must} be at most {_shown(self.most)}{why}, got {_shown(value)}"
        return None


def _shown(value: int | float) -> str:
    """A bound or value as a message shows it: 1,048,576 (grouped, as people read it); 0.5 for a float."""
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


# Why each bound is where it is.
MAX_BATCH = 1 << 20  # no model memprobe has met trains 1M samples per step on one GPU; past that a typo
MAX_SEQ_LEN = 1 << 20  # 1M tokens, 8x Llama 3.1's 128K context: past that a typo
MAX_SEQ_BATCH = 65536  # predict --search seq-len --batch: the scan's default batch cap
MAX_SCAN_STEPS = 100  # trial steps: the peak is reached by the 2nd step; long runs are --soak's job
MAX_PREDICT_STEPS = 10  # predict traces every step on the CPU, seconds each; the peak is reached by the 2nd
MAX_WARMUP = 1000
MAX_TIMED_STEPS = 10000
MAX_TRIALS = 1000
MAX_SOAK = 100000
MAX_REPEAT = 10  # fresh runs at B: each one is a process, a build and the trial with its timed steps (8-60 s)
REPEAT = 2  # the default K: one more fresh run at B than the proof's pair needs
MAX_GPUS = 1024  # per-GPU prediction for a data-parallel world (rank 0 of N)
MAX_PLAN_GPUS = 4096  # a plan's group of cards: measured rows come from scans of N GPUs, predicted ones per GPU
SECONDS = "a number of seconds"

# scan (memprobe.find_max_batch)
SCAN_STEPS = Bound("--steps", 3, MAX_SCAN_STEPS)  # 1 warm-up step + K >= 2, so optimizer state exists
WARMUP = Bound("--warmup", 0, MAX_WARMUP)
TIMED_STEPS = Bound("--timed-steps", 1, MAX_TIMED_STEPS)
MAX_BATCH_OPTION = Bound("--max-batch", 1, MAX_BATCH)
MAX_TRIALS_OPTION = Bound("--max-trials", 2, MAX_TRIALS)  # a search needs a fit and a failure at the least
SOAK = Bound("--soak", 0, MAX_SOAK)  # 0: off
REPEAT_OPTION = Bound("--repeat", 1, MAX_REPEAT)  # 1: one fresh fit proves B (the rule before schema 5)
SCAN_BATCH = Bound("--batch", 1, MAX_BATCH, subject="batch sizes")  # each item of the list
CURVE_BATCH = Bound("--curve", 1, MAX_BATCH, subject="batch sizes")  # each item of the list
CURVE_BUDGET = Bound("--curve-budget", 0, above=True, kind=float, what=SECONDS, optional=True)
SCAN_GPUS = Bound("--gpus", 1, subject="a world size")  # each number of the list ('all' aside)

# scan and predict (both APIs): the LLM variant and the models given by name
SEQ_LEN = Bound("--seq-len", 2, MAX_SEQ_LEN, optional=True)  # a next-token loss needs two tokens
FRONTIER_BUDGET = Bound("--frontier-budget", 0, above=True, kind=float, what=SECONDS, optional=True)
# --mode generate: the prompt, the new tokens and the prefill chunk (core/records/generation.py checks them together)
PROMPT_LEN = Bound("--prompt-len", 1, MAX_SEQ_LEN, optional=True)
NEW_TOKENS = Bound("--new-tokens", 1, MAX_SEQ_LEN, optional=True)  # a generation makes at least one token
PREFILL_CHUNK = Bound("--prefill-chunk", 1, MAX_SEQ_LEN, optional=True)

# predict (memprobe.predict_max_batch)
PREDICT_STEPS = Bound(
    "--steps", 1, MAX_PREDICT_STEPS, optional=True
)  # inference: forward passes; training needs 3 (request.py)
PREDICT_GPUS = Bound("--gpus", 1, MAX_GPUS)
SEQ_BATCH = Bound("--batch", 1, MAX_SEQ_BATCH)  # with --search seq-len: the batch the length is predicted at

# plan (memprobe.plan)
GLOBAL_BATCH = Bound("--global-batch", 1, MAX_GLOBAL_BATCH, why="2^24 samples per optimizer step", optional=True)
PLAN_GPUS = Bound("--gpus", 1, MAX_PLAN_GPUS)

# breakdown (API only: the command's --breakdown predicts at each max batch)
BREAKDOWN_BATCH = Bound("batch", 1, MAX_BATCH)

# guide (no API)
GUIDE_BUDGET = Bound("--budget", 0, kind=float, what="a price in USD")
