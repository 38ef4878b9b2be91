"""The toy model as a user's build function whose rank HANG_RANK (a rank number, or `all`) sleeps when its first
batch is made, as a rank stuck in a driver call would: tests/test_distributed.py's hung ranks, with no hook in
memprobe's own code. The ranks read it by path (`tests/hanging_rank.py:build`); the variable is the test's."""

from __future__ import annotations

import os
import time

from memprobe.core.workload.registry import load_registry
from memprobe.workloads.toy import ToyTask

HANG_RANK = "HANG_RANK"


def build(device, precision):
    toy = load_registry()["toy"]
    task = ToyTask(toy.params, toy.optimizer, device)
    if os.environ.get(HANG_RANK) in (os.environ.get("RANK"), "all"):
        task.make_batch = lambda n: time.sleep(3600)
    return task
