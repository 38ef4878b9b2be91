"""A timed run: its steps timed, utilization sampled meanwhile, and the figures of one that fits.

Step times come from CUDA events around each step (no host synchronisation inside the timed
region); on the CPU from a host clock. Utilization is sampled on a background thread from NVML
(GPU %, memory-controller %, memory used, power, SM clock, temperature) and from /proc for the
trial process itself (CPU %, RSS), and summarised as mean and max.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from memprobe.core.process.outcomes import classify_error, described, message_of
from memprobe.core.process.protocol import MeasureRequest
from memprobe.core.workload.run_length import timed_steps_within
from memprobe.training.step import Memory, run_step, run_until_state
from memprobe.workloads.base import Amp, TrainTask

PREFILL, DECODE, END = "prefill", "decode", "end"  # the points workloads/generation.greedy_generate marks
_NVML_FIELDS = ("gpu_util_pct", "mem_util_pct", "mem_used_bytes", "power_w", "sm_clock_mhz", "temperature_c")


def time_steps(step: Callable[[], Any], n: int, device: torch.device) -> list[float]:
    """Run `step` n times and return each step's seconds."""
    if device.type == "cuda":
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for start, end in events:
            start.record()
            step()
            end.record()
        torch.cuda.synchronize(device)
        return [start.elapsed_time(end) / 1000.0 for start, end in events]
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return times


class PhaseClock:
    """Times the phases of each generation it is handed to as `mark` (GenerateTask.mark): a CUDA event (the host
    clock on the CPU) at the prefill's start, at the first decode forward and at the end; no host synchronisation."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.runs: list[list[Any]] = []  # per generation: [prefill start, decode start or None, end]

    def _now(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def __call__(self, point: str) -> None:
        if point == PREFILL:
            self.runs.append([self._now(), None, None])
        elif point == DECODE and self.runs and self.runs[-1][1] is None:
            self.runs[-1][1] = self._now()
        elif point == END and self.runs:
            self.runs[-1][2] = self._now()

    def _seconds(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1000.0 if self.cuda else end - start

    def phases(self) -> list[tuple[float, float | None]]:
        """(prefill seconds, decode seconds or None without a decode forward) of each generation timed; call after
        the device was synchronised. The prefill ends where the first decode forward starts (it includes choosing
        the first new token)."""
        out: list[tuple[float, float | None]] = []
        for start, decode, end in self.runs:
            if end is None:
                continue
            if decode is None:
                out.append((self._seconds(start, end), None))
            else:
                out.append((self._seconds(start, decode), self._seconds(decode, end)))
        return out


def timed_phases(task: Any, mode: str) -> PhaseClock | None:
    """In generate mode, a PhaseClock handed to the task (its `mark`) for the timed generations; else None."""
    if mode != "generate":
        return None
    task.mark = PhaseClock(task.device)
    return task.mark


def generation_figures(task: Any, n: int, clock: PhaseClock) -> dict[str, Any]:
    """The timed generations' phases at n as Timed fields: median prefill and decode seconds, the tokens each made
    per second (GenerateTask.phase_tokens), the KV cache's bytes; the clock is taken back from the task."""
    task.mark = None
    phases = clock.phases()
    prefill_tokens, decode_tokens = task.phase_tokens(n)
    out: dict[str, Any] = {"kv_cache_bytes": task.kv_cache_bytes(n)}
    if phases:
        prefill = statistics.median(p for p, _ in phases)
        out.update(prefill_seconds=prefill, prefill_tokens_per_s=prefill_tokens / prefill if prefill > 0 else None)
        decodes = [d for _, d in phases if d is not None]
        if decodes and decode_tokens:
            decode = statistics.median(decodes)
            out.update(decode_seconds=decode, decode_tokens_per_s=decode_tokens / decode if decode > 0 else None)
    return out


def summarize_times(times: list[float]) -> dict[str, float]:
    """Median, spread and extremes of step times, in seconds."""
    ordered = sorted(times)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]

    return {
        "steps": len(times),
        "median_s": statistics.median(times),
        "mean_s": statistics.fmean(times),
        "min_s": ordered[0],
        "max_s": ordered[-1],
        "p10_s": pct(0.10),
        "p90_s": pct(0.90),
        "stdev_s": statistics.stdev(times) if len(times) > 1 else 0.0,
    }


def _nvml_handle(device: torch.device):
    """The NVML handle of the torch device (matched by UUID, so CUDA_VISIBLE_DEVICES is respected)."""
    import pynvml

    pynvml.nvmlInit()
    props = torch.cuda.get_device_properties(device)
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid:
        for candidate in (uuid, f"GPU-{uuid}"):
            try:
                return pynvml.nvmlDeviceGetHandleByUUID(candidate)
            except pynvml.NVMLError:
                pass
    return pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)


def _read_nvml(handle) -> dict[str, float | None]:
    import pynvml

    def safe(fn: Callable[[], float]) -> float | None:
        try:
            return float(fn())
        except pynvml.NVMLError:
            return None

    util = None
    try:
        util = pynvml.nvmlDeviceGetUtilizationRates(handle)
    except pynvml.NVMLError:
        pass
    return {
        "gpu_util_pct": float(util.gpu) if util else None,
        "mem_util_pct": float(util.memory) if util else None,
        "mem_used_bytes": safe(lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used),
        "power_w": safe(lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0),
        "sm_clock_mhz": safe(lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
        "temperature_c": safe(lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
    }


def _rss_bytes() -> float | None:
    try:
        with open("/proc/self/statm") as handle:
            return float(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class UtilizationSampler:
    """Samples NVML and host counters every `interval` seconds on a thread between start() and stop()."""

    def __init__(self, device: torch.device, interval: float = 0.1) -> None:
        self.interval = interval
        self.samples: list[dict[str, float | None]] = []
        self.nvml_error = ""
        self._handle = None
        if device.type == "cuda":
            try:
                self._handle = _nvml_handle(device)
            except Exception as exc:  # noqa: BLE001 - utilization is optional; say why it is missing
                self.nvml_error = f"{type(exc).__name__}: {exc}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last_cpu, last_wall = sum(os.times()[:2]), time.perf_counter()
        while not self._stop.wait(self.interval):
            cpu, wall = sum(os.times()[:2]), time.perf_counter()
            sample: dict[str, float | None] = {
                "host_cpu_pct": 100.0 * (cpu - last_cpu) / max(wall - last_wall, 1e-9),
                "host_rss_bytes": _rss_bytes(),
            }
            last_cpu, last_wall = cpu, wall
            if self._handle is not None:
                sample.update(_read_nvml(self._handle))
            self.samples.append(sample)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        """Stop sampling and return {metric: {mean, max}} plus the sample count and interval."""
        self._stop.set()
        self._thread.join()
        summary: dict[str, Any] = {"samples": len(self.samples), "interval_s": self.interval}
        keys = ("host_cpu_pct", "host_rss_bytes") + (_NVML_FIELDS if self._handle is not None else ())
        for key in keys:
            values = [float(v) for s in self.samples if (v := s.get(key)) is not None]
            summary[key] = {"mean": statistics.fmean(values), "max": max(values)} if values else None
        if self.nvml_error:
            summary["nvml_error"] = self.nvml_error
        return summary


@dataclass
class TimedRun:
    """What a timed run's steps left: how many ran (warm-up included), when the first ended, the step times,
    utilization and generation's phase clock; or the failure (outcome, message) and what raised it."""

    steps: int = 0
    first_end: float = 0.0
    times: list[float] = field(default_factory=list)
    utilization: Any = None
    phases: Any = None
    failure: tuple[str, str] | None = None
    raised: tuple[str, str] = ("", "")


def _flops_at(task, n: int, mode: str) -> float | None:
    """FLOPs per unit of n at this n, for tasks whose count depends on it (None if it cannot be counted)."""
    from memprobe.training.flops import flops_per_sample

    try:
        with torch.compiler.set_stance("force_eager"):
            return flops_per_sample(task, n, mode)
    except Exception:  # noqa: BLE001 - MFU is optional
        return None


def steps_within(steps: int, budget_s: float | None, result: dict[str, Any]) -> int:
    """How many timed steps fit in `budget_s`: at most `steps`, at least MIN_TIMED_STEPS.

    A step's time is estimated from the warm-up steps after the first (`warmup_step_seconds`), or
    with one warm-up step from that step, an upper bound: it carries whatever a new batch size sets
    up (NasNet-Large: ~14 s on the H100; with --compile, the compilation). Costs no extra step.
    Records `timed_steps_cut_from` when it cuts."""
    n = timed_steps_within(steps, budget_s, result.get("warmup_step_seconds") or result.get("first_step_seconds"))
    if n < steps:
        result["timed_steps_cut_from"] = steps
    return n


def run_timed(
    req: MeasureRequest,
    task: TrainTask,
    memory: Memory,
    kept: dict[str, Any] | None,
    result: dict[str, Any],
    precision: str,
    mode: str,
) -> TimedRun:
    """A timed run's steps (worker.Session.measure): warm up (until optimizer state exists), then time the steps
    that fit the budget; what the warm-up showed goes into `result`. `kept`: a fitting trial's batch and state to go
    on from (emptied here, so that nothing keeps the batch once this returns). A step's error is classified into
    the answer, not raised."""
    n, run = int(req.batch), TimedRun()
    try:
        if kept is not None:
            amp, inputs = kept["amp"], kept["inputs"]
            kept.clear()  # the caller's reference to it keeps nothing alive
        else:
            if mode == "train":
                task.start()
            amp = Amp.for_task(task, precision, req.loss_scale)
            inputs = task.make_batch(n)

        def step() -> None:
            run.steps += 1
            if run.steps > 1:
                run_step(task, amp, inputs, mode)
                return
            # The first step alone, synchronized: with --compile it carries the compilation.
            first = time.perf_counter()
            run_step(task, amp, inputs, mode)
            memory.synchronize()
            run.first_end = time.perf_counter()
            result["first_step_seconds"] = round(run.first_end - first, 4)

        # Warm-up also runs until optimizer state exists (fp16 loss scaling may skip updates). A generation
        # going on from its trial needs none: the trial's generations were its warm-up (core/workload/run_length.py).
        warmup = int(req.warmup)
        warm = warmup if mode == "generate" and result["continued_from_trial"] else max(warmup, 1)
        result["warmup_steps"] = run_until_state(step, amp, warm, mode)
        memory.synchronize()
        if result["warmup_steps"] > 1:  # the warm-up steps after the first: a step without set-up
            result["warmup_step_seconds"] = round(
                (time.perf_counter() - run.first_end) / (result["warmup_steps"] - 1), 4
            )
        steps = steps_within(int(req.steps), req.budget_s, result)
        sampler = UtilizationSampler(task.device, float(req.sample_interval))
        sampler.start()
        run.phases = timed_phases(task, mode)  # generation: the prefill and the decode timed apart
        try:
            run.times = time_steps(step, steps, task.device)
        finally:
            run.utilization = sampler.stop()
    except Exception as exc:  # noqa: BLE001
        run.raised = (type(exc).__name__, message_of(exc))
        run.failure = (classify_error(*run.raised), described(exc)[:500])
        del exc
    return run


def fit_figures(task: TrainTask, n: int, run: TimedRun, first_step_s: float | None, mode: str) -> dict[str, Any]:
    """A fitting timed run's figures: step time, throughput, utilization, generation's phases, FLOPs where
    they vary with n, and the compile time."""
    stats = summarize_times(run.times)
    units = task.units_at(n) if hasattr(task, "units_at") else n * task.units_per_sample
    out: dict[str, Any] = dict(
        outcome="fit",
        step_time=stats,
        unit=task.unit,
        units_per_step=units,
        samples_per_s=n / stats["median_s"],
        units_per_s=units / stats["median_s"],
        utilization=run.utilization,
    )
    if run.phases is not None:
        out.update(generation_figures(task, n, run.phases))
    if getattr(task, "flops_vary_with_n", False):
        out["flops_per_sample"] = _flops_at(task, n, mode)
    if task.compiled and first_step_s is not None:
        # Reported apart from the step time: the first step's excess over a timed one.
        out["compile_seconds"] = round(max(0.0, first_step_s - stats["median_s"]), 4)
    return out
