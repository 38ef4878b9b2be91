"""Benchmark (no GPU): the search after a predicted start that fails, before and after it jumped by what the failure measured.

The cases are issue 35's: a prediction above the measured max batch B on an H200, the failing start then walked
down by 1, 2, 4, 8, each step a fresh process (efficientnet_b4 inference: five fresh out-of-memory trials, about
40 s; T5-large: six). Each case is replayed against a stand-in for the card: a trial at batch n fits iff n <= B,
peaks on a line (static + per sample x n) that meets the allocator capacity between B and B + 1, and a failure
answers with PyTorch's out-of-memory message, whose figures say what the failing allocation lacked. Where in the
step that allocation comes is unknown: `at` is the share of the overshoot (peak(n) - capacity) it lacked, 1.0 when
the step fails at its peak allocation, 0.3 when it fails early and more would have been asked for after it. The
steady-state cases (swin: the 3-step trial fits, the timed steps after it fail) lack a few MiB.

"before" is probe/search.py as of commit BEFORE (read with `git show`), "after" the working tree's. Seconds are
estimates: every trial after batch 2 costs one fresh process at the case's seconds per trial (efficientnet_b4
inference: the issue's 40 s for five fresh trials), batches 1 and 2 nothing (they run while the prediction is made).

    python benchmarks/search_after_wrong_start.py > reports/benchmarks/search_after_wrong_start.md
"""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from memprobe.core.estimates.memory_model import Attempt  # noqa: E402

BEFORE = "3946a34"  # main when the walk down by 1, 2, 4, 8 was the search's answer to a failed start
GIB = 2**30
CAPACITY = 139.2 * GIB  # the H200 SXM's allocator capacity (memprobe/data/overhead.yaml)
TOTAL = 139.8 * GIB  # what PyTorch's message calls the total capacity (the CUDA context is the difference)


@dataclass(frozen=True)
class Case:
    """One of the issue's wrong starts: the measured max batch, the predicted start, the static memory (weights,
    gradients, optimizer state: an estimate from the parameter count), seconds a fresh trial takes."""

    name: str
    edge: int
    predicted: int
    static_gib: float
    trial_s: float
    steady_state: bool = False  # the trial fits above B; the timed steps after it fail, lacking a few MiB


CASES = (
    Case("efficientnet_b4 inference bf16", 6074, 6233, 0.5, 8.0),
    Case("T5-large bf16 (seq2seq 512)", 36, 72, 13.5, 10.0),
    Case("T5-large fp32 (seq2seq 512)", 32, 54, 12.0, 10.0),
    Case("BART-large bf16 (predicted on the GPU machine's torch)", 142, 395, 6.5, 8.0),
    Case("swin_base_patch4_window7_224 bf16", 977, 995, 1.5, 8.0, steady_state=True),
)


def stand_in(case: Case, at: float | None):
    """try_batch for the card of `case`; a failure lacks `at` of its overshoot (None: a share drawn for each failing
    batch between 0.2 and 1, the same on every run; steady state: 4 MiB)."""
    per_sample = (CAPACITY - case.static_gib * GIB) / (case.edge + 0.5)

    def trial(batch: int) -> Attempt:
        peak = case.static_gib * GIB + per_sample * batch
        if batch <= case.edge:
            return Attempt(batch, "fit", peak_allocated=int(peak * 0.97), peak_reserved=int(peak))
        share = at if at is not None else random.Random(batch).uniform(0.2, 1.0)
        lacked = 4 * 2**20 if case.steady_state else max(2**20, share * (peak - CAPACITY))
        requested = max(lacked + 2**20, 0.02 * peak)  # the failing block: 2% of the step's memory, or what it lacked
        free = requested - lacked
        in_use = TOTAL - free
        return Attempt(
            batch,
            "oom",
            message=(
                f"OutOfMemoryError: CUDA out of memory. Tried to allocate {requested / GIB:.2f} GiB. GPU 0 has a "
                f"total capacity of {TOTAL / GIB:.2f} GiB of which {free / GIB:.2f} GiB is free. Including "
                f"non-PyTorch memory, this process has {in_use / GIB:.2f} GiB memory in use."
            ),
        )

    return trial


def old_search() -> ModuleType:
    """probe/search.py as of BEFORE, imported from `git show` into a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{BEFORE}:memprobe/probe/search.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "search_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("search_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["search_before"] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def replay(search: ModuleType, case: Case, at: float | None) -> tuple[int, list[int]]:
    """Trials of the search against the case's stand-in, the prediction there from the first poll (it comes while
    batch 1 runs); raises SystemExit when it does not find the case's edge."""
    tried: list[int] = []
    trial = stand_in(case, at)
    found = search.find_max_batch(lambda b: tried.append(b) or trial(b), CAPACITY, hint=lambda: case.predicted)
    if (found.max_batch, found.first_failure) != (case.edge, case.edge + 1):
        raise SystemExit(f"{case.name}: found {found.max_batch}, the edge is {case.edge}: the stand-in is wrong")
    return found.trials, tried


def main() -> int:
    from memprobe.probe import search as after

    before = old_search()
    print(
        "| case | B | predicted | failing allocation lacked | before: trials (s) | after: trials (s) | after: batches |"
    )
    print("|---|---|---|---|---|---|---|")
    totals = [0.0, 0.0]
    for case in CASES:
        for at in (1.0,) if case.steady_state else (1.0, 0.3, None):
            lacked = (
                "4 MiB (timed steps)"
                if case.steady_state
                else f"{at:.0%} of the overshoot"
                if at is not None
                else "20-100% of the overshoot, varying"
            )
            row = []
            for i, module in enumerate((before, after)):
                trials, tried = replay(module, case, at)
                seconds = max(0, trials - 2) * case.trial_s
                totals[i] += seconds
                row.append((trials, seconds, tried))
            print(
                f"| {case.name} | {case.edge} | {case.predicted} | {lacked} | {row[0][0]} ({row[0][1]:.0f}) | "
                f"{row[1][0]} ({row[1][1]:.0f}) | {', '.join(map(str, row[1][2]))} |"
            )
    print(
        f"\nEstimated search seconds over these cases: {totals[0]:.0f} before, {totals[1]:.0f} after (a replay "
        f"against stand-ins, not a GPU measurement; before = search.py at {BEFORE})."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
