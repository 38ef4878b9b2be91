"""The search's predicted start: `memprobe predict` run on the CPU beside a scan, its max batch polled by the search.

A scan's search spends most of its time on trials far from the edge (NasNet-Large on the H100: 9 trials of
10-28 s each, most of it per-batch-size set-up). The prediction (fake tensors, no GPU) lands on the edge or
within a few samples for the committed workloads, so trying it, then one more, can leave the search two or
three trials. It is only a start, and never waited for: the search polls for it before each trial and goes on
with its own memory model until it comes (a prediction takes seconds to a minute; llama-1b's waited-for one
made a search 27.5 s where the memory model alone took 17.9 s). The search and the fresh-process proof are
unchanged; a prediction that comes too late is recorded and left unused. No torch here: the prediction runs
in a child process (predict/hint_worker.py) started when the scan starts, with CUDA hidden from it; it
predicts the precisions in turn for the whole scan and is killed when the scan ends.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from typing import Any, Callable, Mapping

from memprobe.core.process.child import Child
from memprobe.core.process.protocol import HintAnswer, HintRequest, HintSetup, read_message
from memprobe.core.records.settings import PrecisionSettings
from memprobe.core.workload.registry import Workload
from memprobe.probe.search import HintUse, SearchResult

ENDED = "the prediction process ended without answering"


class PredictedStart:
    """A hint_worker child predicting `workload`'s max batch per precision; one per scan. Use as a context
    manager (the child is killed on exit). Never raises for the child's failures: an answer is
    {"error": why} instead."""

    def __init__(
        self,
        workload: Workload,
        precisions: list[str],
        steps: int = 3,
        world: tuple[int, str] | None = None,
        mode: str = "train",
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`world` = (N, strategy) predicts per GPU for N data-parallel GPUs (predict --gpus N); `mode` "infer"
        predicts forward passes; `steps` as the scan's trial runs them; `env`: variables the child gets on top of
        this process's environment (ScanOptions.env; CUDA stays hidden from it)."""
        self.workload, self.precisions, self.steps = workload, precisions, steps
        self.env = dict(env or {})
        self.world, self.mode = world, mode
        self.child: Child | None = None
        self._ids = itertools.count(1)
        self._answers: dict[int, dict[str, Any]] = {}  # by request id: answers are never taken for another request
        self._ended = ""  # why no more answers will come ("" while the child runs)

    def __enter__(self) -> "PredictedStart":
        try:
            self.child = Child.start(
                [sys.executable, "-m", "memprobe.predict.hint_worker"],
                env={**self.env, "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"},
                watched=True,
                log=os.devnull,  # its stderr was never read: no error message quotes it
            )
            self._send(
                HintSetup(
                    self.workload,
                    self.precisions,
                    self.steps,
                    self.mode,
                    list(self.world) if self.world else None,
                )
            )
        except OSError:
            self.__exit__()
            self._ended = "the prediction process could not be started"
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.child is not None:
            self.child.kill()  # it predicts for the scan alone: nothing to wait for once the scan is over
            self.child.close()
            self.child = None
        self._ended = self._ended or "the prediction process is not running"

    def _send(self, message: HintSetup | HintRequest) -> None:
        assert self.child is not None
        self.child.send(message)

    def _pump(self, timeout_s: float) -> None:
        """Read what the child has sent, waiting at most `timeout_s` for the first bytes (0: not at all), and
        file each complete answer under its request id. A child that ended or sent garbage ends the prediction."""
        if self.child is None:
            return
        try:
            for line in self.child.lines(timeout_s):
                answer = read_message(line, HintAnswer)
                self._answers[answer.id or 0] = {**answer.record(), "received_at": time.time()}
            if self.child.output_ended:
                raise OSError(ENDED)
        except (OSError, ValueError) as exc:  # ValueError: a line that is not an answer (ProtocolError)
            self._ended = str(exc) if isinstance(exc, OSError) and str(exc) else f"no prediction: {exc}"
            self.__exit__()

    def ask(self, precision: str, capacity_bytes: float | None) -> "Prediction":
        """Ask for the predicted max batch of `precision` at `capacity_bytes` (the scan's allocator capacity);
        returns at once. The Prediction's poll gives the answer when it has come."""
        if not capacity_bytes:
            return Prediction(self, 0, {"error": "no allocator capacity to predict at"})
        if self.child is None or not self.child.alive():
            return Prediction(self, 0, {"error": self._ended or "the prediction process is not running"})
        ident = next(self._ids)
        try:
            self._send(HintRequest(precision, int(capacity_bytes), ident))
        except OSError:
            self._ended = ENDED
            self.__exit__()
            return Prediction(self, 0, {"error": ENDED})
        return Prediction(self, ident)

    def hint_for(
        self,
        precision: str,
        capacity_bytes: float | None,
        settings: PrecisionSettings,
        note: Callable[[str], None],
        started_at: float,
    ) -> "PrecisionHint":
        """The search's hint for one precision (see PrecisionHint), asked now. `started_at`: time.time() when
        the precision started (arrival times are counted from it)."""
        return PrecisionHint(self.ask(precision, capacity_bytes), settings, note, started_at)


class Prediction:
    """One asked-for prediction. `poll` answers {"max_batch": n, "seconds": s, "at": t, ...} or {"error": why}
    once the child has answered this request, None until then."""

    def __init__(self, start: PredictedStart, ident: int, answer: dict[str, Any] | None = None) -> None:
        self.start, self.ident, self.answer = start, ident, answer

    def poll(self, timeout_s: float = 0.0) -> dict[str, Any] | None:
        """The answer if it has come, waiting at most `timeout_s` for it (0, the search's way: not at all)."""
        deadline = time.monotonic() + timeout_s
        while self.answer is None:
            # An answer filed by an earlier pump (read with another request's) is taken before waiting for more.
            self.answer = self.start._answers.pop(self.ident, None)
            if self.answer is not None:
                break
            self.start._pump(max(0.0, deadline - time.monotonic()))
            self.answer = self.start._answers.pop(self.ident, None)
            if self.answer is None and self.start.child is None:
                self.answer = {"error": self.start._ended or ENDED}
            if self.answer is None and time.monotonic() >= deadline:
                return None
        return self.answer


class PrecisionHint:
    """What find_max_batch polls for one precision (`poll`), is told what became of the prediction (`decided`),
    and `finish`es with after the search. Keeps settings.predicted_start: the answer, `arrived_s` (seconds
    from the precision's start to the child's answer), `after_trials`, `used` and `why` not; says each step
    through `note`."""

    def __init__(
        self, prediction: Prediction, settings: PrecisionSettings, note: Callable[[str], None], started_at: float
    ) -> None:
        self.prediction, self.settings, self.note, self.started_at = prediction, settings, note, started_at
        self.record: dict[str, Any] | None = None
        self.poll()  # an answer that cannot come (no capacity, no child) is said at once

    def poll(self) -> int | None:
        """The predicted max batch once it has come, else None; never waits."""
        if self.record is not None:
            return self.record.get("max_batch")
        answer = self.prediction.poll()
        if answer is None:
            return None
        record = self.record = self.settings.predicted_start = dict(answer)
        at = record.pop("at", None) or record.pop("received_at", None)
        record.pop("received_at", None)
        record["arrived_s"] = round(max(0.0, at - self.started_at), 2) if at else 0.0
        if record.get("max_batch") is None:
            record.update(used=False, why=record.get("error", "no max batch in the answer"))
            self.note(f"no predicted start: {record['why']}")
        return record.get("max_batch")

    def decided(self, use: HintUse) -> None:
        """Record and say what the search did with the prediction."""
        assert self.record is not None
        self.record.update(after_trials=use.after_trials, used=use.used, why=use.why)
        came = (
            f"predicted max batch {use.batch} (memprobe predict on the CPU) came {self.record['arrived_s']:g} s "
            f"into the precision, after {use.after_trials} trial{'s' if use.after_trials != 1 else ''}"
        )
        self.note(f"{came}: tried next" if use.used else f"{came}: not used, {use.why}")

    def finish(self, found: SearchResult, search_seconds: float) -> None:
        """After the search: record (and say) a prediction the search never judged: late, or never come."""
        if self.record is not None and "used" in self.record:
            return
        batch = self.poll()
        if self.record is None:
            self.record = self.settings.predicted_start = {
                "arrived_s": None,
                "used": False,
                "why": f"no prediction before the search ended ({search_seconds:g} s, {found.trials} trials)",
            }
            self.note(f"no predicted start: {self.record['why']}")
        elif "used" not in self.record:
            self.record.update(after_trials=found.trials, used=False, why="came after the search had ended")
            self.note(
                f"predicted max batch {batch} came {self.record['arrived_s']:g} s into the precision, "
                f"after the search had ended ({search_seconds:g} s): not used"
            )
