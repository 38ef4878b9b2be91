"""How many steps a scan runs at a batch it calls a fit: the trial, then the warm-up and timed steps after it.

A batch fits (docs/definitions.md) when its trial and the timed run that follows in the same fresh process both
complete: by default 3 trial steps, 3 warm-up steps and 10 timed ones in training, 16 steps of one run; in
generation 2 trial generations and 1 timed one. The
allocator's state can keep changing over those steps, so `memprobe predict` replays as many (predict/allocator.py
stops early once a step leaves the cache as it found it). No torch here: probe's options and predict share these.
"""

from __future__ import annotations

TRIAL_STEPS = 3  # one warm-up step and K = 2 more, so that optimizer state exists
WARMUP_STEPS = 3  # before timing, in the same process, going on from the trial
TIMED_STEPS = 10  # a time budget may cut them, to no fewer than MIN_TIMED_STEPS
MIN_TIMED_STEPS = 3
# Inference has no optimizer state to wait for: a trial is one warm-up forward and one more, and a timed run
# needs one warm-up forward. At the huge batches inference reaches (bert-large-squad fp16 ~9400 on an H200, a
# forward of several seconds), the training trial's 3 steps and 3 warm-up steps made each trial 16-18 s.
INFER_TRIAL_STEPS = 2
INFER_WARMUP = 1
# Generation (--mode generate): a step is one whole generation (the prompt's prefill, then one forward per new token).
# Its trial is two generations, so that the second starts from the allocator's cache as the first left it (the KV
# cache and the prefill's blocks freed and reused: the steady state every later generation repeats), and the timed
# run that goes on from it in the same process is one more generation, timed phase by phase (prefill, decode): a
# generation at the edge runs for seconds to tens of seconds, and its decode tokens/s is already a mean over N - 1
# forwards. No warm-up beyond the trial. A fit is these 3 generations in one fresh process.
GENERATE_TRIAL_STEPS = 2
GENERATE_WARMUP = 0
GENERATE_TIMED_STEPS = 1
# A search trial's generations stop after the prefill and this many decode forwards. With the static cache every
# decode forward runs the same ops on the same shapes (the cache is P + N long from the first token to the last),
# so the memory of one does not depend on its position: the first shows the peak of the decode, the next ones
# that the allocator's cache repeats it (predict/trace.py traces as many and checks the last two byte for byte).
# The timed generation, and every fresh run that proves a batch fits, runs all N - 1: B keeps its definition (the
# most sequences that complete exactly N new tokens) at the cost of one whole generation per fresh run instead of
# three. A model whose decode changes shape along the way (a sliding-window cache that starts rolling) runs its
# trials whole (workloads/generation.py GenerateTask.decode_shapes_repeat).
GENERATE_SEARCH_DECODE = 3


def steps_at_fit(mode: str, trial_steps: int = TRIAL_STEPS) -> int:
    """Every step a scan runs in the fresh process that proves a batch fits: its trial of `trial_steps` (at most
    INFER_TRIAL_STEPS in inference), the warm-up and the timed steps. Raises ValueError for an unknown mode."""
    if mode == "train":
        return trial_steps + WARMUP_STEPS + TIMED_STEPS
    if mode == "infer":
        return min(trial_steps, INFER_TRIAL_STEPS) + INFER_WARMUP + TIMED_STEPS
    if mode == "generate":
        return min(trial_steps, GENERATE_TRIAL_STEPS) + GENERATE_WARMUP + GENERATE_TIMED_STEPS
    raise ValueError(f"unknown mode '{mode}'")


def timed_steps_within(steps: int, budget_s: float | None, step_s: float | None) -> int:
    """How many of `steps` timed steps a timed run keeps within `budget_s` seconds when a step takes about
    `step_s`: all of them without a budget or an estimate, else as many as fit, at least MIN_TIMED_STEPS."""
    if not budget_s or not step_s or step_s * steps <= budget_s:
        return steps
    return min(steps, max(MIN_TIMED_STEPS, int(budget_s / step_s)))  # never more than asked (a generation: 1)
