"""The search's predicted start: `memprobe predict` run on the CPU beside a scan, its max batch tried first.

A scan's search spends most of its time on trials far from the edge (NasNet-Large on the H100: 9 trials of
10-28 s each, most of it per-batch-size set-up). The prediction (fake tensors, no GPU) lands on the edge or
within a few samples for the committed workloads, so trying it first, then one more, leaves the search two or
three trials. It is only a start: the search and the fresh-process proof are unchanged, a wrong or missing
prediction costs at most the trials it was meant to save. No torch here: the prediction runs in a child
process (predict/hint_worker.py) started when the scan starts, with CUDA hidden from it.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from typing import Any, Callable

from memprobe.probe.lifeline import PARENT_ENV
from memprobe.registry import Workload

WAIT_S = 90.0  # how long the search waits for a prediction after its first trial before going on without


class PredictedStart:
    """A hint_worker child predicting `workload`'s max batch per precision; one per scan. Use as a context
    manager (the child is killed on exit). Never raises for the child's failures: `ask` answers
    {"error": why} instead."""

    def __init__(self, workload: Workload, precisions: list[str], steps: int = 3, wait_s: float = WAIT_S,
                 world: tuple[int, str] | None = None, mode: str = "train") -> None:
        """`world` = (N, strategy) predicts per GPU for N data-parallel GPUs (predict --gpus N); `mode` "infer"
        predicts forward passes; `steps` as the scan's trial runs them."""
        self.workload, self.precisions, self.steps, self.wait_s = workload, precisions, steps, wait_s
        self.world, self.mode = world, mode
        self.proc: subprocess.Popen | None = None
        self._buffer = b""

    def __enter__(self) -> "PredictedStart":
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1", PARENT_ENV: str(os.getpid())}
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "memprobe.predict.hint_worker"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         start_new_session=True, env=env)
            self._send({"workload": self.workload.to_dict(), "precisions": self.precisions, "steps": self.steps,
                        "mode": self.mode, "world": list(self.world) if self.world else None})
        except OSError:
            self.proc = None
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:
                    pipe.close()
            self.proc = None

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def _read_line(self, deadline: float) -> dict[str, Any] | None:
        """The child's next answer, None when none came by `deadline`. Raises OSError when the child is gone."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise OSError("the prediction process ended without answering")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def ask(self, precision: str, capacity_bytes: float | None) -> dict[str, Any]:
        """The predicted max batch of `precision` at `capacity_bytes` (the scan's allocator capacity), waiting
        up to wait_s: {"max_batch": n, "seconds": s, ...}, or {"error": why} (no capacity, child gone, slow)."""
        if not capacity_bytes:
            return {"error": "no allocator capacity to predict at"}
        if self.proc is None or self.proc.poll() is not None:
            return {"error": "the prediction process is not running"}
        started = time.monotonic()
        try:
            self._send({"precision": precision, "capacity_bytes": int(capacity_bytes)})
            while True:
                answer = self._read_line(started + self.wait_s)
                if answer is None:
                    self.__exit__()  # a late answer would be read as the next precision's
                    return {"error": f"no prediction within {self.wait_s:g} s"}
                if answer.get("precision") == precision:
                    answer["waited_seconds"] = round(time.monotonic() - started, 2)
                    return answer
        except (OSError, ValueError) as exc:  # ValueError: a line that is not JSON
            self.__exit__()
            return {"error": f"no prediction: {exc}"}

    def hint_for(self, precision: str, capacity_bytes: float | None, settings: dict[str, Any],
                 note: Callable[[str], None]) -> Callable[[], int | None]:
        """The search's `hint`: asks for the prediction when called, records the answer in
        settings["predicted_start"] and says what happened through `note`."""

        def hint() -> int | None:
            answer = settings["predicted_start"] = self.ask(precision, capacity_bytes)
            if answer.get("max_batch"):
                note(f"predicted max batch {answer['max_batch']} (memprobe predict on the CPU, "
                     f"{answer.get('waited_seconds', 0):g} s waited): tried first")
            else:
                note(f"no predicted start: {answer.get('error', 'nothing fits by the prediction')}")
            return answer.get("max_batch")

        return hint
