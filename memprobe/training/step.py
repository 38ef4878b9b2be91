"""Run training (or inference) steps at one batch size and report what happened.

One trial = one warm-up step + K more (K >= 2: optimizer state exists from the first step on, and
the allocator has seen the steady state). Peak memory comes from the CUDA caching allocator's
statistics (or the CPU fake allocator). Errors are classified (errors.classify_error) and memory is
released *after* leaving the except block: the exception's traceback keeps tensors alive.
"""

from __future__ import annotations

import gc
import time
import traceback
from typing import Any, Callable

import torch

from memprobe.core.process.outcomes import CRASH, ERROR, FIT, USER_ERROR, classify_error, message_of, with_memory_state
from memprobe.training.cpu_memory import LiveBytes
from memprobe.workloads.base import Amp, TrainTask


class Memory:
    """Peak-memory bookkeeping for a device: CUDA allocator stats, or the CPU fake allocator."""

    def __init__(self, device: torch.device, cpu_tracker: LiveBytes | None = None) -> None:
        self.device = device
        self.cpu = cpu_tracker

    def reset(self) -> None:
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
        elif self.cpu is not None:
            self.cpu.reset_peak()

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def peaks(self) -> tuple[int | None, int | None]:
        """(peak allocated, peak reserved) bytes since the last reset."""
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device), torch.cuda.max_memory_reserved(self.device)
        if self.cpu is not None:
            return self.cpu.peak, self.cpu.peak
        return None, None


def run_step(task: TrainTask, amp: Amp, batch: Any, mode: str) -> None:
    """Run one training step, one forward pass (infer mode) or one whole generation (generate mode:
    workloads/generation.py) on a prepared batch. Raises RuntimeError for generate mode on a task that does not
    generate."""
    if mode == "train":
        task.train_step(batch, amp)
    elif mode == "generate":
        generate = getattr(task, "generate_step", None)
        if generate is None:
            raise RuntimeError(f"{type(task).__name__} does not generate: --mode generate runs causal-LM workloads")
        generate(batch, amp)
    else:
        task.infer_step(batch, amp)


# How many steps beyond the requested ones a trial may run while the GradScaler skips updates.
MAX_SKIPPED_STEPS = 32


class NoOptimizerStepError(RuntimeError):
    """fp16 loss scaling skipped every optimizer update: the trial never saw optimizer state."""


def run_until_state(step: Callable[[], Any], amp: Amp, steps: int, mode: str) -> int:
    """Call `step` at least `steps` times, and in training until steps - 1 calls began with optimizer state.

    A step that the GradScaler skips creates no optimizer state, so without this an fp16 trial could
    "fit" without ever holding Adam's moments. Returns the number of steps run; raises
    NoOptimizerStepError when no update was applied within MAX_SKIPPED_STEPS extra steps.
    """
    if mode != "train":
        for _ in range(steps):
            step()
        return steps
    amp.track = True
    done = with_state = 0
    while done < steps or with_state < steps - 1:
        if done >= steps + MAX_SKIPPED_STEPS:
            raise NoOptimizerStepError(f"loss scaling skipped {amp.skipped} of {done} optimizer updates")
        had_state = amp.applied > 0
        step()
        done += 1
        with_state += had_state
    amp.track = False
    return done


def _traceback_tail(chars: int = 8000) -> str:
    """The traceback being handled, its last `chars` characters (the raising frames are at the bottom)."""
    text = traceback.format_exc()
    return text if len(text) <= chars else "...\n" + text[-chars:]


def _steps(
    task: TrainTask,
    precision: str,
    mode: str,
    batch_size: int,
    steps: int,
    memory: Memory,
    before: Callable[[], Any] | None,
    loss_scale: float | None,
    keep: dict | None,
) -> tuple[int, float | None]:
    """A trial's steps (run_trial): (steps run, the loss scale they ended at). With `keep`, the batch and the
    mixed-precision state are put in it. Raises what a step raises."""
    if before is not None:
        before()
    if mode == "train":
        task.start()
    amp = Amp.for_task(task, precision, loss_scale)
    inputs = task.make_batch(batch_size)
    ran = run_until_state(lambda: run_step(task, amp, inputs, mode), amp, steps, mode)
    memory.synchronize()
    if keep is not None:
        keep.update(amp=amp, inputs=inputs, batch=batch_size)
    return ran, amp.loss_scale


def run_trial(
    task: TrainTask,
    precision: str,
    mode: str,
    batch_size: int,
    steps: int,
    memory: Memory,
    before: Callable[[], Any] | None = None,
    capacity_bytes: int | None = None,
    loss_scale: float | None = None,
    keep: dict | None = None,
) -> dict:
    """Run one trial and return an Attempt as a dict (batch, outcome, peaks, seconds, message, steps,
    and for fp16 the loss scale the trial ended at, to start the next one from).

    `before` runs after the memory reset and before the steps (the --memory-cap re-cap). With `keep` (a dict),
    a trial that fits leaves its training state in place (optimizer state, gradients, cached blocks) and puts
    its batch and mixed-precision state in keep["amp"], keep["inputs"], so that timed steps can go on from it
    as one continuous run (worker.Session.measure with "continue"). Never raises for errors inside the step;
    a CRASH outcome means the caller's process must end.
    """
    memory.reset()
    started = time.perf_counter()
    outcome, message = FIT, ""
    ran = settled = None
    user_traceback = ""
    try:
        # The batch and the mixed-precision state live in _steps' frame (and `keep`) alone: freed on return.
        ran, settled = _steps(task, precision, mode, batch_size, steps, memory, before, loss_scale, keep)
    except Exception as exc:  # noqa: BLE001 - every failure is classified, none is a fit
        failure = (type(exc).__name__, message_of(exc))
        outcome = classify_error(*failure)
        message = f"{type(exc).__name__}: {failure[1].splitlines()[0] if failure[1] else ''}"[:500]
        user_traceback = _traceback_tail() if getattr(task, "user_code", False) else ""
        # Keep nothing from the exception: its traceback holds the step's tensors.
        del exc
    seconds = time.perf_counter() - started
    kept = keep is not None and outcome == FIT
    # Cleanup outside the except block, so the traceback's frames are gone before memory is freed.
    peak_allocated, peak_reserved = memory.peaks()
    if outcome != FIT:
        outcome, note = with_memory_state(outcome, *failure, peak_reserved, capacity_bytes)
        message += note
        if outcome == ERROR and user_traceback:
            # The user's own model code raised: they need the traceback, kept in the message.
            outcome, message = USER_ERROR, f"{message}\n{user_traceback}"
    if outcome != CRASH and not kept:
        task.stop()
        memory.reset()
    return {
        "batch": batch_size,
        "outcome": outcome,
        "peak_allocated": peak_allocated,
        "peak_reserved": peak_reserved,
        "seconds": round(seconds, 4),
        "message": message,
        "steps": ran,
        "loss_scale": settled,
    }
