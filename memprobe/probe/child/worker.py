"""The trial process: builds one workload on the device and runs trials on request.

Started by runner.Worker as `python -m memprobe.probe.child.worker --preload MODULE`. It speaks core/process/protocol.py:
one request per line on stdin, one answer per line on the protocol pipe (the original stdout;
fd 1 is redirected to stderr so library prints cannot corrupt the protocol). It imports torch and
the workload's module at start but touches CUDA only at `setup`, so a spare worker can wait,
pre-imported, while another process is being measured.

Requests: setup, trial, measure, flops, ping, exit. After a CRASH outcome the process answers and exits: a
corrupted CUDA context cannot run another trial.

With `--zygote-fd FD` the process is a fork server instead: it imports once, never touches CUDA,
and for each request on the Unix socket FD (carrying the child's stdin, protocol and log file
descriptors) forks a trial process that starts with everything imported. Forking before CUDA is
initialised is safe; the child creates its own CUDA context at setup.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import inspect
import os
import signal
import sys
import time
from contextlib import nullcontext
from typing import Any, Callable

import torch

from memprobe.core.cards.memcap import CapPlan, MemoryCapError, plan_cap
from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.process import lifeline
from memprobe.core.process.outcomes import CRASH, USER_ERROR, classify_error, described, message_of, with_memory_state
from memprobe.core.process.protocol import (
    Answer,
    Emulation,
    Failure,
    Flops,
    FlopsRequest,
    MeasureRequest,
    PingRequest,
    Pong,
    ProtocolError,
    Ready,
    SetupRequest,
    TrialRequest,
    crashed,
    decode_request,
    encode_answer,
)
from memprobe.core.records.records import Timed
from memprobe.core.workload.run_length import MIN_TIMED_STEPS  # noqa: F401 - re-exported
from memprobe.probe.child import breakdown, zygote
from memprobe.probe.child import measure as timing
from memprobe.probe.child.environment import torch_environment
from memprobe.training.cpu_memory import LiveBytes
from memprobe.training.step import Memory, run_trial
from memprobe.workloads.base import TrainTask, UserModelError
from memprobe.workloads.families import family_builder

EXIT_AFTER_CRASH = 3


def trial_settings(precision: str, cudnn_benchmark: bool) -> dict[str, Any]:
    """The torch settings a trial process makes before it builds the model, by attribute path under `torch`:
    fp32 is true FP32 (TF32 off everywhere), tf32 turns TF32 on, fp16/bf16 keep PyTorch's defaults; cuDNN's
    benchmark mode as asked. One more setting is one more entry here: apply_precision_flags makes it and the
    result's environment records it (flags.set_in_trial_process)."""
    settings: dict[str, Any] = {"backends.cudnn.benchmark": cudnn_benchmark}
    if precision in ("fp32", "tf32"):
        settings["backends.cuda.matmul.allow_tf32"] = settings["backends.cudnn.allow_tf32"] = precision == "tf32"
    return settings


def _torch_attribute(path: str) -> tuple[Any, str]:
    *owners, name = path.split(".")
    return functools.reduce(getattr, owners, torch), name


def apply_precision_flags(precision: str, cudnn_benchmark: bool) -> dict[str, Any]:
    """Make trial_settings' settings in this process; returns them as torch reads them back, by path."""
    settings = trial_settings(precision, cudnn_benchmark)
    for path, value in settings.items():
        setattr(*_torch_attribute(path), value)
    return {path: getattr(*_torch_attribute(path)) for path in settings}


class Session:
    """State of one worker: the built task, its device and memory bookkeeping."""

    def __init__(self) -> None:
        self.task: TrainTask | None = None
        self.precision = ""
        self.mode = "train"
        self.memory: Memory | None = None
        self.cap_bytes: int | None = None
        self.capacity_bytes: int | None = None  # what the trials may use: free + reserved at setup, or the cap
        # A fitting trial's batch and mixed-precision state, kept for timed steps that go on from it (see measure).
        self.kept: dict[str, Any] | None = None

    def built(self) -> tuple[TrainTask, Memory]:
        """The task and the memory bookkeeping the setup built. Raises RuntimeError before a setup that built one."""
        if self.task is None or self.memory is None:
            raise RuntimeError("no workload is set up in this process")
        return self.task, self.memory

    def apply_cap(self) -> CapPlan | None:
        """With --memory-cap, re-cap the allocator for the memory now held outside it (kernels load
        lazily). Called after memory.reset(), so only live tensors are in PyTorch's reserved bytes."""
        return None if self.cap_bytes is None else self._cap(self.cap_bytes)

    def _cap(self, cap_bytes: int) -> CapPlan:
        """Cap the allocator to emulate a card of `cap_bytes`. Raises MemoryCapError where it cannot (plan_cap)."""
        device = self.built()[0].device
        free, total = torch.cuda.mem_get_info(device)
        plan = plan_cap(cap_bytes, total, free, torch.cuda.memory_reserved(device))
        torch.cuda.set_per_process_memory_fraction(plan.fraction, device)
        return plan

    def setup(self, req: SetupRequest) -> Ready | Failure:
        """Build the workload on the device: Ready, or a Failure saying at which stage and why."""
        device = torch.device(req.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            reason = "torch was built without CUDA" if torch.version.cuda is None else "torch sees no CUDA device"
            return Failure("no_cuda", reason)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        settings = req.settings
        self.precision, self.mode = req.precision, req.mode
        applied = apply_precision_flags(self.precision, settings.cudnn_benchmark)
        tracker = None
        if device.type == "cpu":
            tracker = LiveBytes(req.cpu_budget_bytes)
            tracker.__enter__()  # stays active for the life of this process
        self.memory = Memory(device, tracker)
        workload = req.workload
        builder = family_builder(workload.family)
        started = time.perf_counter()
        if device.type == "cuda":
            try:
                torch.cuda.init()
                torch.empty(1, device=device)  # creates the context now, so its cost is timed apart
            except Exception as exc:  # noqa: BLE001 - e.g. AcceleratorError "CUDA error: out of memory"
                kind = classify_error(type(exc).__name__, message_of(exc))
                return Failure(kind, f"creating the CUDA context: {described(exc)}"[:500], "cuda-context")
        cuda_init_seconds = time.perf_counter() - started
        started = time.perf_counter()
        torch.manual_seed(0)
        # Builders that take the precision (the user's build(device, precision)) are given it.
        extra = {"precision": self.precision} if "precision" in inspect.signature(builder).parameters else {}
        try:
            task = self.task = builder(workload.params, workload.optimizer, device, **extra)
        except UserModelError as exc:  # the user must change their model or its name: say how, with their traceback
            return Failure(USER_ERROR, f"{exc}\n{exc.details}" if exc.details else str(exc))
        except Exception as exc:  # noqa: BLE001 - a model that cannot be built fits no batch
            kind = classify_error(type(exc).__name__, message_of(exc))
            return Failure(kind, f"building {workload.name}: {described(exc)}"[:500], "build")
        if settings.compile:
            task.compile()  # compiles lazily, at each trial's first step
        self.memory.synchronize()
        # The model lives as long as the process too; collect what building it left, freeze the rest.
        gc.collect()
        gc.freeze()
        build_seconds = time.perf_counter() - started
        emulation = None
        capacity: int | None
        weights: int | None
        if device.type == "cuda":
            free, _total = torch.cuda.mem_get_info(device)
            capacity = free + torch.cuda.memory_reserved(device)
            weights = torch.cuda.memory_allocated(device)
            if settings.memory_cap_bytes:
                self.cap_bytes = settings.memory_cap_bytes
                try:
                    plan = self._cap(settings.memory_cap_bytes)
                except MemoryCapError as exc:
                    return Failure("error", str(exc))
                emulation = Emulation(plan.cap_bytes, plan.outside_bytes, plan.limit_bytes)
                capacity = min(capacity, plan.limit_bytes)
        else:
            capacity = req.cpu_budget_bytes
            weights = tracker.current if tracker else None
        self.capacity_bytes = capacity
        return Ready(
            torch_environment(device, applied),
            capacity,
            weights,
            round(build_seconds, 3),
            round(cuda_init_seconds, 3),
            task.describe(),
            task.unit,
            emulation,
        )

    def close(self) -> None:
        """End the session in a process that goes on: release the task and leave the CPU fake allocator that
        setup entered (a worker process just exits). Every later op of the process would otherwise still run
        through the allocator's dispatch mode. Safe to call twice, or after a setup that failed."""
        self.kept = None
        if self.task is not None:
            self.task.stop()
            self.task = None
        if self.memory is not None and self.memory.cpu is not None:
            self.memory.cpu.__exit__(None, None, None)
            self.memory.cpu = None
        gc.unfreeze()

    def _drop_kept(self) -> None:
        """Release a kept trial's state (optimizer state, gradients, batch) that no timed run went on from."""
        if self.kept is not None:
            self.kept = None
            task, memory = self.built()
            task.stop()
            memory.reset()

    def trial(self, req: TrialRequest) -> Attempt:
        """Run one trial; with `keep`, a trial that fits leaves its state for a measure request with `cont`."""
        self._drop_kept()
        self.kept = {} if req.keep else None
        task, memory = self.built()
        cut = getattr(task, "cut_decode", None) if self.mode == "generate" else None
        with cut(req.decode_steps) if cut is not None else nullcontext():
            attempt = run_trial(
                task,
                self.precision,
                self.mode,
                int(req.batch),
                int(req.steps),
                memory,
                before=self.apply_cap,
                capacity_bytes=self.capacity_bytes,
                loss_scale=req.loss_scale,
                keep=self.kept,
            )
        if not self.kept:
            self.kept = None
        return Attempt.from_dict(attempt)

    def flops(self, req: FlopsRequest) -> Flops:
        """FLOPs per sample of one step (forward + backward, or forward in infer mode), counted once."""
        from memprobe.training.flops import flops_per_sample

        self._drop_kept()
        if self.mode == "generate":
            return Flops(
                None, "FLOPs are not counted for generation: its speed is given as prefill and decode tokens/s"
            )
        task, memory = self.built()
        if getattr(task, "flops_vary_with_n", False):
            return Flops(None, "FLOPs per unit vary with n (the sequence length): counted at each timed n instead")
        try:
            # Counted on the eager step: the FLOPs are the model's, however the step is compiled.
            with torch.compiler.set_stance("force_eager"):
                value = flops_per_sample(task, int(req.batch), self.mode, self.precision)
        except Exception as exc:  # noqa: BLE001 - MFU is optional; say why it is missing
            return Flops(None, described(exc)[:300])
        finally:
            task.stop()
            memory.reset()
        return Flops(value)

    _steps_within = staticmethod(timing.steps_within)  # (tests call it here)

    def _kept_for(self, cont: bool, n: int) -> dict[str, Any] | None:
        """The kept trial's state where a timed run at `n` goes on from it (`cont`), else None (any kept state
        dropped)."""
        kept, self.kept = self.kept, None
        if kept is not None and not (cont and kept.get("batch") == n):
            self.kept = kept
            self._drop_kept()
            kept = None
        return kept

    def measure(self, req: MeasureRequest) -> Timed:
        """Warm up, then time steps with utilization sampling. Errors are classified, not raised;
        `failed_at_step` says which step (1-based, warm-up included) failed."""
        n = int(req.batch)
        task, memory = self.built()
        # `cont`: the steps go on from the trial just run at this batch (its optimizer state, batch and
        # allocator state), as one training run would; no reset between them. Rebuilding the optimizer state
        # and the batch after a trial is what real training never does, and at the edge it failed where the
        # continuous run does not (resnet50 fp32 on an H200: 1698-1705 trained 3 steps, then ran out of memory
        # at the first step after the rebuild).
        kept = self._kept_for(req.cont, n)
        if kept is None:
            memory.reset()
            self.apply_cap()
        result: dict[str, Any] = {"batch": n, "warmup_steps": int(req.warmup), "continued_from_trial": kept is not None}
        # The batch and the step live in run_timed's frame alone: freed before the peaks are read.
        ran = timing.run_timed(req, task, memory, kept, result, self.precision, self.mode)
        result["peak_allocated"], result["peak_reserved"] = memory.peaks()
        if ran.failure is not None:
            outcome, note = with_memory_state(ran.failure[0], *ran.raised, result["peak_reserved"], self.capacity_bytes)
            # Steps run asynchronously on CUDA: the failing one is at most the last one started.
            result.update(outcome=outcome, error=ran.failure[1] + note, failed_at_step=ran.steps)
            if outcome != CRASH:
                task.stop()
                memory.reset()
            return Timed.from_dict(result)
        task.stop()
        memory.reset()
        result.update(timing.fit_figures(task, n, ran, result.get("first_step_seconds"), self.mode))
        return Timed.from_dict(result)


def _ping(_req: PingRequest) -> Pong:
    """Runs a small multithreaded CPU op: a process forked with broken thread state hangs here, and the
    parent falls back to exec'd processes instead of waiting on a setup."""
    value = float(torch.ones(1 << 16).add_(1).sum())
    return Pong(value == 2.0 * (1 << 16), os.getpid())


def _serve(protocol) -> int:
    session = Session()
    # One handler per request kind (core/protocol.REQUESTS); "exit" has none: it ends the loop.
    handlers: dict[str, Callable[[Any], Answer]] = {
        "setup": session.setup,
        "trial": session.trial,
        "measure": session.measure,
        "flops": session.flops,
        "ping": _ping,
        "breakdown": lambda r: breakdown.serve(session, r),
    }
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = decode_request(line)
        except ProtocolError as exc:
            answer: Answer = Failure("error", str(exc))
        else:
            if req.op == "exit":
                return 0
            handler = handlers.get(req.op)
            answer = handler(req) if handler is not None else Failure("error", f"unknown op {req.op!r}")
        protocol.write(encode_answer(answer))
        protocol.flush()
        if crashed(answer):
            return EXIT_AFTER_CRASH
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preload", action="append", default=[], help="module to import before setup")
    parser.add_argument("--zygote-fd", type=int, help="serve fork requests on this Unix socket instead")
    args = parser.parse_args(argv)
    # The parent decides when to stop; Ctrl-C in the terminal must not kill a trial halfway. But when the
    # parent dies (SIGKILL, SIGTERM, SIGHUP), this process ends too: parent-death signal, and for a trial
    # process a watcher of its request pipe (the fork server watches its control socket: zygote.py).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = lifeline.expected_parent()
    lifeline.die_with_parent(parent)
    if args.zygote_fd is None and parent is not None:
        lifeline.watch(parent, 0)
    if args.zygote_fd is None:
        protocol = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    for module in args.preload:
        importlib.import_module(module)
    # torch imports torch._dynamo on first use of torch._disable_dynamo, which every optimizer's constructor (and the
    # CPU fake allocator's dispatch mode) calls: imported here, before the fork server forks, it is not imported
    # again in each trial process's setup (1.5 s of a fresh toy trial's 1.7 s on 2 CPU cores). It starts no thread.
    importlib.import_module("torch._dynamo")
    # The imports live as long as the process: frozen, the garbage collector no longer walks them. Each
    # trial collects twice (trial.Memory.reset), which took ~0.2 s over the 350k objects torch and
    # transformers leave, and a fork server's children no longer copy the pages it would have touched.
    gc.freeze()
    if args.zygote_fd is not None:
        return zygote.serve_forks(args.zygote_fd, _serve)
    return _serve(protocol)


if __name__ == "__main__":
    sys.exit(main())
