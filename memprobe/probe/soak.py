"""`scan --soak N`: train the proven max batch for N more steps in a fresh process, lowering it if that fails.

The complaint users of other batch finders raise most is that the batch found OOMs later in training
(fragmentation keeps growing after the few steps a finder runs). A soak run is a trial of N steps at B
in a process that has run nothing else; if it fails, B - 1 is soaked the same way, and so on, so the
batch reported is one that trained N steps in a fresh process, and the one above it did not.
No torch here: the steps run in trial processes.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.records.records import Proof

# Soak runs before giving up lowering the batch: each failed one lowers B by one. A proven edge that
# needs more than this is not an edge a soak should move; the result says the soak did not settle.
MAX_SOAK_RUNS = 6


def soak(batch: int, steps: int, run: Callable[[int, int], Attempt], max_runs: int = MAX_SOAK_RUNS) -> dict[str, Any]:
    """Soak `batch` for `steps` steps with `run(batch, steps)` (a fresh-process trial), lowering the batch by
    one after each failure. Returns the record kept under proof.soak: steps, the batch before and after,
    whether it was lowered, settled (a batch passed), seconds and every run. Never raises for a failed run."""
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    current = batch
    passed: int | None = None
    while current >= 1 and len(runs) < max_runs:
        attempt = run(current, steps)
        runs.append(attempt.to_dict())
        if attempt.fits:
            passed = current
            break
        current -= 1
    after = passed if passed is not None else (0 if current < 1 else None)
    return {
        "steps": steps,
        "max_batch_before": batch,
        "max_batch": after,
        "lowered": after is not None and after < batch,
        "settled": passed is not None or current < 1,
        "seconds": round(time.perf_counter() - started, 2),
        "runs": runs,
    }


def apply_soak(proof: Proof, record: dict[str, Any]) -> int | None:
    """Store the soak record in the proof and move the proven pair to what the soak showed: the new max
    batch (or None when the soak did not settle within its runs, which leaves the pair as it was)."""
    proof.soak = record
    if not record["lowered"] or record["max_batch"] is None:
        return None
    failed = record["runs"][-2] if record["max_batch"] > 0 else record["runs"][-1]
    proof.fits = record["max_batch"]
    proof.fails = failed["batch"]
    proof.fail_outcome = failed["outcome"]
    proof.agreed = False
    proof.runs_at_b = proof.fits_at_b = None  # the fresh runs were the proof's B's; the soak's runs are in proof.soak
    return record["max_batch"]


def soak_max_batch(
    proof: Proof, batch: int, steps: int, run: Callable[[int, int], Attempt], note: Callable[[str], None]
) -> int:
    """--soak for one precision: soak the proven `batch`, record it in `proof`, say what happened through
    `note`, and return the max batch to report (lower than `batch` when the soak failed there)."""
    note(f"soak: training batch {batch} for {steps} steps in a fresh process")
    record = soak(batch, steps, run)
    lowered = apply_soak(proof, record)
    if lowered is not None:
        note(f"soak lowered the max batch from {batch} to {lowered}")
        return lowered
    if not record["settled"]:
        note(
            f"soak: no batch from {batch} down passed {steps} steps within {len(record['runs'])} runs; "
            "the max batch is left as proven, see proof.soak"
        )
    return batch
