"""How a scan runs: the options of `memprobe scan`, and the trial and timed-run lengths they imply.

No torch here. A timed run is requested from a trial process (runner.Worker.measure); the options say
how many warm-up and timed steps, and within what time budget, for the max batch B and for curve points.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memprobe.core.cards.catalog import PRECISIONS
from memprobe.core.records.fieldtypes import MODES
from memprobe.core.records.records import Timed
from memprobe.core.workload.option_bounds import REPEAT
from memprobe.core.workload.run_length import (  # noqa: F401 - INFER_* and MIN_TIMED_STEPS re-exported for probe
    GENERATE_SEARCH_DECODE,
    GENERATE_TIMED_STEPS,
    GENERATE_TRIAL_STEPS,
    GENERATE_WARMUP,
    INFER_TRIAL_STEPS,
    INFER_WARMUP,
    MIN_TIMED_STEPS,
    TIMED_STEPS,
    TRIAL_STEPS,
    WARMUP_STEPS,
)
from memprobe.probe.curve import DEFAULT_BUDGET_S, DEFAULT_POINTS, ladder
from memprobe.probe.edge_walk import EDGE_BUDGET_S
from memprobe.probe.runner import Worker

# Inference curves get less time than training ones (DEFAULT_BUDGET_S, 45 s): forwards at the huge batches
# inference reaches take seconds, and the six-workload inference suite should take minutes. Each point's
# cost is estimated before it starts (probe/curve_cost.py) and the coarse pass spans the ladder first (its
# largest, smallest and middle batches), so the budget bounds the curve without leaving small batches untimed.
INFER_CURVE_BUDGET_S = 20.0
# A generation curve point is one warm-up and one timed generation, seconds each at the larger batches.
GENERATE_CURVE_BUDGET_S = 60.0
# Curve points below B: enough warm-up for optimizer state, and a median over 6 steps (the step-time
# spread at B on the H100 was at most 2.7% over 10 steps), so a curve costs seconds per point.
CURVE_WARMUP = 2
CURVE_TIMED_STEPS = 6


@dataclass
class ScanOptions:
    """How to scan. `steps` is the whole trial: one warm-up step + K >= 2 more."""

    precisions: list[str]
    mode: str = "train"
    steps: int = TRIAL_STEPS
    warmup: int = WARMUP_STEPS
    timed_steps: int = TIMED_STEPS
    batches: list[int] = field(default_factory=list)
    max_batch: int = 65536
    max_trials: int = 40
    fresh_checks: int = 6
    # B is the largest batch that completes the trial and the steps after it in this many consecutive fresh runs
    # (probe/edge_walk.py): a batch that fitted once near the edge can fail in the next fresh process.
    repeat: int = REPEAT
    # Near a flaky edge the fresh walk tries no new batch past this many seconds of its own runs (None: no limit).
    edge_budget_s: float | None = EDGE_BUDGET_S
    measure: bool = True
    device: str = "cuda"
    cpu_budget_bytes: int | None = None
    cudnn_benchmark: bool = False
    compile: bool = False  # run the step's forward (and backward) through torch.compile
    timeout_s: float = 1800.0
    memory_cap_bytes: int | None = None  # emulate a card of this size (CUDA only)
    curve: bool = True  # time a ladder of batches up to B and find the best batch b*
    curve_batches: list[int] = field(default_factory=list)  # the ladder (empty: powers of two, see probe.curve)
    curve_points: int = DEFAULT_POINTS
    # No curve point starts whose estimated cost would end past this many seconds of curve (None: the mode's
    # default, DEFAULT_BUDGET_S in training, INFER_CURVE_BUDGET_S in inference).
    curve_budget_s: float | None = None
    # Timed steps stop early once they would run past this many seconds (at least MIN_TIMED_STEPS run):
    # at a batch whose step takes seconds, 10 timed steps cost more than they tell.
    timed_budget_s: float | None = 10.0
    soak: int = 0  # after the proof, train B this many steps in a fresh process, lowering B if it fails
    # Start the search at `memprobe predict`'s max batch, predicted on the CPU beside the scan (probe/hint.py).
    # None: on for CUDA without --compile (what predict traces), off otherwise.
    predicted_start: bool | None = None
    # After the proof, measure the memory breakdown at B in one more fresh process (probe/breakdown_run.py).
    # None: on for CUDA training scans (one process and a few steps, against the search's several), off on the
    # CPU, where the tracker's per-operator bookkeeping costs more than the toy trials it would describe.
    breakdown: bool | None = None
    # Variables every process the one-GPU scan starts gets on top of this process's environment, and that the scan
    # reads as its processes see them (which GPU, for its name and its other processes): find_max_batch gives the
    # GPU it was asked for and its caller's import path here instead of changing os.environ. Not a setting: not
    # recorded (the environment the trials saw is, under `environment`). Multi-GPU launches do not take it.
    env: dict[str, str] = field(default_factory=dict)
    # Generation: the search's trials stop each generation after the prefill and this many decode forwards (None:
    # whole); the timed generation and the fresh runs that prove a fit run all of it (core/workload/run_length.py).
    search_decode_steps: int | None = GENERATE_SEARCH_DECODE

    def __post_init__(self) -> None:
        if self.steps < 3:
            raise ValueError("a trial needs a warm-up step and at least 2 more (steps >= 3)")
        unknown = [p for p in self.precisions if p not in PRECISIONS]
        if unknown or not self.precisions:
            raise ValueError(f"unknown precision {', '.join(unknown) or '(none)'}; choose from {', '.join(PRECISIONS)}")
        if self.mode not in MODES:
            raise ValueError(f"unknown mode '{self.mode}'; choose {', '.join(MODES)}")
        if self.repeat < 1:
            raise ValueError("--repeat must be at least 1 (the fresh runs B must fit in)")
        if self.soak < 0:
            raise ValueError("--soak must be 0 (off) or a number of steps")
        if self.memory_cap_bytes is not None and self.device != "cuda":
            raise ValueError("--memory-cap emulates a smaller GPU: it needs --device cuda")
        ladder(1, self.curve_points, self.curve_batches)  # raises CurveError (a ValueError) when unusable
        if self.curve_budget_s is not None and not self.curve_budget_s > 0:
            raise ValueError(f"the curve budget must be a positive number of seconds, got {self.curve_budget_s:g}")

    @property
    def uses_predicted_start(self) -> bool:
        """Whether the search starts from a prediction (see predicted_start)."""
        if self.predicted_start is not None:
            return self.predicted_start
        return self.device == "cuda" and not self.compile

    @property
    def measures_breakdown(self) -> bool:
        """Whether the scan measures the memory breakdown at B (see breakdown); training only."""
        wanted = self.breakdown if self.breakdown is not None else self.device == "cuda"
        return wanted and self.mode == "train"

    @property
    def trial_steps(self) -> int:
        """Steps per trial: `steps` in training, INFER_TRIAL_STEPS forward passes in inference,
        GENERATE_TRIAL_STEPS generations in generation."""
        if self.mode == "generate":
            return min(self.steps, GENERATE_TRIAL_STEPS)
        return self.steps if self.mode == "train" else min(self.steps, INFER_TRIAL_STEPS)

    def trial_decode(self, fresh: bool) -> int | None:
        """The decode forwards a trial's generations stop after (None: whole generations, and outside generate
        mode). A search trial in the shared process is cut (search_decode_steps); a fresh run is cut only where a
        whole timed generation follows it in the same process (throughput on), so that every fresh fit, which the
        proof may take as a check, completed N new tokens at least once."""
        if self.mode != "generate" or (fresh and not self.measure):
            return None
        return self.search_decode_steps

    @property
    def warmup_steps(self) -> int:
        """Warm-up steps before timing: `warmup`, at most INFER_WARMUP in inference, at most one generation (where
        the timed run does not go on from a trial)."""
        if self.mode == "generate":
            return min(self.warmup, 1)
        return self.warmup if self.mode == "train" else min(self.warmup, INFER_WARMUP)

    @property
    def timed_count(self) -> int:
        """Timed steps of a timed run: `timed_steps`, at most GENERATE_TIMED_STEPS generations in generation."""
        return min(self.timed_steps, GENERATE_TIMED_STEPS) if self.mode == "generate" else self.timed_steps

    def timed_run(self, worker: Worker, batch: int, cont: bool = False) -> Timed:
        """Warm-up and timed steps at `batch` in `worker` (its answer, never raising for a failed step). `cont`:
        the steps go on from the trial the worker just ran at `batch` (kept), so the trial's steps were the
        warm-up and one more warm-up step is enough (it is also timed apart, as the first step)."""
        after_trial = GENERATE_WARMUP if self.mode == "generate" else 1
        return worker.measure(
            batch, after_trial if cont else self.warmup_steps, self.timed_count, budget_s=self.timed_budget_s, cont=cont
        )

    @property
    def curve_budget(self) -> float:
        """Seconds of curve within which every point must end by its estimate: curve_budget_s when given, else
        DEFAULT_BUDGET_S in training and INFER_CURVE_BUDGET_S in inference."""
        if self.curve_budget_s is not None:
            return self.curve_budget_s
        if self.mode == "generate":
            return GENERATE_CURVE_BUDGET_S
        return DEFAULT_BUDGET_S if self.mode == "train" else INFER_CURVE_BUDGET_S

    @property
    def curve_steps(self) -> tuple[int, int, float | None]:
        """A curve point's timed run below B: (warm-up steps, timed steps, timed-step budget in seconds): at most
        CURVE_WARMUP and CURVE_TIMED_STEPS, within half the timed-step budget (B's own point is the full run)."""
        return (
            min(self.warmup_steps, CURVE_WARMUP),
            min(self.timed_count, CURVE_TIMED_STEPS),
            self.timed_budget_s / 2 if self.timed_budget_s else None,
        )

    def curve_run(self, worker: Worker, batch: int) -> Timed:
        """A curve point's timed run at `batch` in `worker` (curve_steps), never raising for a failed step."""
        warmup, timed, budget = self.curve_steps
        return worker.measure(batch, warmup, timed, budget_s=budget)

    def to_dict(self) -> dict[str, Any]:
        kept = {k: v for k, v in self.__dict__.items() if k not in ("precisions", "env")}
        return kept | {"precisions": list(self.precisions)}
