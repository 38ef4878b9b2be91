"""Predict the memory breakdown at a batch from the fake-tensor trace, for any card (labelled predicted).

The scan's trial is traced as trace.TraceSession does, its last step under the same MemTracker the scan
measures with (training/breakdown.StepTracker, run inside the session's FakeTensorMode), so the categories
are the measured ones'. The totals come from replaying the trial's allocations through the caching-allocator
model (allocator.replay); what the tracker does not see (emulated library workspaces) is `unattributed`.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

from memprobe.core.records.breakdown import Breakdown, assemble, top_modules
from memprobe.core.workload.registry import Workload
from memprobe.predict.allocator import replay
from memprobe.predict.fakecuda import H100, Target, cuda_optimizers
from memprobe.predict.trace import TRIAL_MARK, PredictError, TraceSession, _canonical, _EmulatedAmp
from memprobe.training.breakdown import INSTRUMENT, StepTracker
from memprobe.training.step import run_step, run_until_state


def _tracked_steps(session: TraceSession, task: Any, precision: str, batch: int) -> tuple[dict[str, int], dict]:
    """The trial's steps, the last under the tracker: (categories at the tracker's peak, activation bytes by
    module). Raises what a step raises."""
    task.start()
    cuda_optimizers(task)
    amp = _EmulatedAmp(precision, session.behaviour)
    inputs = task.make_batch(batch)
    run_until_state(lambda: run_step(task, amp, inputs, "train"), amp, max(session.steps - 1, 2), "train")
    tracker = StepTracker()
    tracker.track_external(task.model, *task.optimizers, inputs)
    with tracker, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Module is None")
        run_step(task, amp, inputs, "train")
    device = next(iter(task.model.parameters())).device
    return tracker.categories_at_peak(device, task.optimizers), tracker.activations_by_module(device)


def _tracked_trial(session: TraceSession, precision: str, batch: int) -> tuple[dict[str, int], dict[str, int], list]:
    """Run the trial's steps on fake tensors, the last under the tracker: (categories at the tracker's peak,
    activation bytes by module, the trial's allocation events). Raises PredictError when a step fails."""
    rec, task = session.recorder, session.task
    start = rec.mark(TRIAL_MARK)
    try:
        # The batch, the mixed-precision state and the tracker live in _tracked_steps' frame alone.
        tracked, modules = _tracked_steps(session, task, precision, batch)
        failure = None
    except Exception as exc:  # noqa: BLE001 - reported below, outside the except block
        failure = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    end = session.end_trial()
    if failure is not None:
        raise PredictError(
            f"{session.workload.name} {precision} batch {batch}: the tracked step failed on fake tensors: {failure}"
        )
    return tracked, modules, _canonical(session.build_events, rec.events[start + 1 : end])


def predict_breakdown(
    workload: Workload,
    precision: str,
    batch: int,
    steps: int = 3,
    target: Target = H100,
    per_sample_bytes: int | None = None,
    capacity: int | None = None,
) -> Breakdown:
    """The predicted breakdown of a training step at `batch` (basis "predicted"). Without `per_sample_bytes`,
    it is the replayed peak's slope between `batch` and a smaller batch (one more trace).

    `capacity` (bytes the card's allocator may reserve) replays the step as it runs on that card: near the edge
    the real allocator frees its cached blocks when cudaMalloc fails and retries, so the slack at a batch near
    the max batch is far smaller than with no limit (measured at B: resnet50 bf16 on an H200, 0.18 GiB; unlimited
    replay, 26 GiB). Without it, or when the step does not fit `capacity` in the emulation (then a note says so),
    the replay has no limit. Raises PredictError."""
    started = time.perf_counter()
    note = "predicted (emulated), not measured"
    with TraceSession(workload, steps, target) as session:
        tracked, modules, events = _tracked_trial(session, precision, batch)
        peaks = replay(events, capacity=capacity, measure_from=TRIAL_MARK)
        if capacity is not None and not peaks.fits:  # only a limited replay can run out
            peaks = replay(events, measure_from=TRIAL_MARK)
            room = f"{capacity / 2**30:.2f} GiB" if capacity >= 2**30 else f"{capacity / 2**20:.0f} MiB"
            note += f"; at batch {batch} the emulation does not fit {room}: peaks with no limit"
        if per_sample_bytes is None:
            other = batch // 2 if batch > 1 else 2
            other_peak = replay(session.trace(precision, other).events, measure_from=TRIAL_MARK).peak_reserved
            per_sample_bytes = max(0, round((peaks.peak_reserved - other_peak) / (batch - other)))
    return assemble(
        batch,
        "predicted",
        tracked,
        peaks.peak_allocated,
        peaks.peak_reserved,
        per_sample_bytes=per_sample_bytes,
        top_modules=top_modules(modules),
        instrument=INSTRUMENT + " over fake tensors, peaks from the caching-allocator model",
        device=f"emulated {target.name}",
        seconds=round(time.perf_counter() - started, 3),
        note=note,
    )
