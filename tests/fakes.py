"""The fakes and helpers that several test modules share (each section says what its fakes stand in for).

Test modules import them from here (`from fakes import ...`), never from one another: a test module is for pytest
to collect, and importing one from another makes collection depend on its import side effects. The module is not
named test_*, so pytest does not collect it; conftest.py registers it for pytest's assertion rewriting, so the
asserts in its checks explain their failures as they did in the test modules they came from.
"""

from __future__ import annotations

import itertools
import os
import random
from pathlib import Path
from typing import Callable

from conftest import RecordingProgress
from memprobe.compare.chart_layout import DPI
from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.process.outcomes import FIT, OOM
from memprobe.core.process.protocol import Flops, Ready
from memprobe.core.process.rank_record import RankRecord, RankSetup
from memprobe.core.records.records import CurvePoint, Proof, Timed
from memprobe.core.records.results import PrecisionResult, ScanResult, read_result, write_result
from memprobe.core.workload.registry import load_registry
from memprobe.probe.distributed.launch import LaunchRequest, LaunchResult
from memprobe.probe.runner import WorkerError
from memprobe.probe.scan import ScanOptions, scan_precision
from memprobe.probe.search import SearchResult

# --- made-up result files (for report, guide, charts; no GPU) -------------------------------------------------

GiB = 2**30
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def proven_point(variant, precision: str, n: int, folder: Path) -> tuple[ScanResult, Path]:
    """What a frontier point's scan of `variant` returns when its B is `n`, proven (n + 1 failed), on a fake GPU: the
    result and the path it would be written to under `folder`."""
    scanned = ScanResult(workload=variant.to_dict(), environment={"gpu": {"name": "Fake GPU"}}, settings={})
    scanned.precisions[precision] = PrecisionResult(
        precision, "done", n, proof=Proof(fits=n, fails=n + 1, agreed=True, verified=True)
    )
    return scanned, folder / f"{variant.name}.json"


def make_result(
    gpu: str = H100,
    workload: str = "toy",
    precisions: dict | None = None,
    version: int = 1,
    params: dict | None = None,
    unit: str = "samples",
    total_bytes: int = 79 * GiB,
    created: str = "2026-01-01T00:00:00+00:00",
) -> ScanResult:
    """A result file's content without a GPU. precisions: name -> dict(batch, speed, static, per_sample,
    capacity, flops, util). speed None = no throughput; batch 0 = OOM."""
    precisions = precisions if precisions is not None else {"fp32": {"batch": 10, "speed": 100.0}}
    out = {}
    for name, spec in precisions.items():
        batch = spec.get("batch", 10)
        speed = spec.get("speed")
        throughput = None
        if speed is not None:
            throughput = {
                "batch": batch,
                "outcome": "fit",
                "unit": unit,
                "samples_per_s": speed,
                "units_per_s": speed,
                "utilization": spec.get("util", {}),
            }
            if spec.get("flops"):
                throughput["flops_per_sample"] = spec["flops"]
        model = {}
        if spec.get("per_sample"):
            model = {
                "peak_reserved": {
                    "static_bytes": spec.get("static", 0),
                    "per_sample_bytes": spec["per_sample"],
                    "basis": "peak_reserved",
                    "points": 3,
                    "max_residual_bytes": 0,
                }
            }
        out[name] = PrecisionResult(
            name,
            status=spec.get("status", "done"),
            max_batch=batch,
            stop="edge",
            proof={"fits": batch, "fails": batch + 1, "verified": True, "agreed": True},
            memory_model=model,
            capacity_bytes=spec.get("capacity"),
            throughput=throughput,
            settings={"task": spec.get("task", {})},
        )
    return ScanResult(
        workload={
            "name": workload,
            "family": "toy-mlp",
            "version": version,
            "unit": unit,
            "params": params if params is not None else {"features": 64},
            "optimizer": {"name": "adamw"},
        },
        environment={"gpu": {"name": gpu, "total_bytes": total_bytes}},
        settings={},
        precisions=out,
        status="complete",
        created=created,
    )


def loaded(*results: ScanResult, tmp_path: Path | None = None) -> list[tuple[Path, ScanResult]]:
    """(path, result) pairs as the CLI builds them; written and read back when tmp_path is given."""
    pairs = []
    for i, r in enumerate(results):
        if tmp_path is None:
            pairs.append((Path(f"r{i}.json"), r))
        else:
            path = write_result(r, tmp_path / f"r{i}.json")
            pairs.append((path, read_result(path)))
    return pairs


# --- throughput curves on made-up results (like-for-like comparisons) -----------------------------------------


H200 = "NVIDIA H200"


def with_curve(result, precision: str, curve: dict[int, float]):
    """Give a made-up result a throughput curve {batch: samples/s} (B's point must be the at-B speed)."""
    p = result.precisions[precision]
    p.curve = [
        CurvePoint(batch=b, outcome="fit", samples_per_s=s, units_per_s=s, fresh=False)
        for b, s in sorted(curve.items())
    ]
    best = max(p.curve, key=lambda c: c.samples_per_s or 0.0)
    p.best_batch, p.best_samples_per_s, p.best_units_per_s = best.batch, best.samples_per_s, best.units_per_s
    p.curve_seconds = 12.5
    return result


def cards(tmp_path=None):
    """The H200 case: at B the H200 looks slower than the H100; at its best batch it is faster."""
    h100 = with_curve(
        make_result(H100, "resnet50", {"fp16": {"batch": 1870, "speed": 5223.0}}),
        "fp16",
        {256: 5100.0, 512: 5150.0, 1024: 5200.0, 1870: 5223.0},
    )
    h200 = with_curve(
        make_result(H200, "resnet50", {"fp16": {"batch": 3321, "speed": 4360.0}}),
        "fp16",
        {256: 5863.0, 512: 6216.0, 1024: 6476.0, 2048: 6598.0, 3321: 4360.0},
    )
    return loaded(h100, h200, tmp_path=tmp_path)


# --- charts read at screen size -------------------------------------------------------------------------------


def pixels(fig) -> tuple[int, int]:
    """A figure's size in pixels as it is saved (at the charts' DPI)."""
    width, height = fig.get_size_inches()
    return round(width * DPI), round(height * DPI)


def clipped(fig) -> list[str]:
    """What of a laid-out figure reaches past its edges: a label cut off in the PNG. The tight bounding box
    covers every artist that is drawn (axes with their tick labels, legends, titles)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw_without_rendering()
    width, height = fig.get_size_inches()
    tight = fig.get_tightbbox(renderer)
    out = []
    for artist in [*fig.axes, *fig.legends, *fig.texts]:
        if not artist.get_visible():
            continue
        box = artist.get_tightbbox(renderer).transformed(fig.dpi_scale_trans.inverted())
        if box.x0 < -0.01 or box.y0 < -0.01 or box.x1 > width + 0.01 or box.y1 > height + 0.01:
            out.append(f"{type(artist).__name__} {box.bounds}")
    assert tight is not None
    return out


# --- fake trials for the batch search (search.py, proof.py, hint.py; no torch) --------------------------------


class FakeTrials:
    """Stands in for the trial function find_max_batch calls, try_batch(n): fits iff n <= edge; a fit reports
    peak(n) (optionally with random noise); `outcomes` forces an outcome at a batch. `calls`: the batches tried."""

    def __init__(
        self,
        edge: int,
        peak: Callable[[int], float],
        fail: str = "oom",
        noise: float = 0.0,
        seed: int = 0,
        outcomes: dict[int, str] | None = None,
    ) -> None:
        self.edge, self.peak, self.fail, self.noise = edge, peak, fail, noise
        self.rng = random.Random(seed)
        self.outcomes = outcomes or {}
        self.calls: list[int] = []

    def __call__(self, batch: int) -> Attempt:
        self.calls.append(batch)
        if batch in self.outcomes:
            return Attempt(batch, self.outcomes[batch], message=f"forced {self.outcomes[batch]} at {batch}")
        if batch > self.edge:
            return Attempt(batch, self.fail, message="fake failure")
        value = self.peak(batch)
        if self.noise:
            value += self.rng.uniform(-self.noise, self.noise)
        value = int(value)
        return Attempt(batch, "fit", peak_allocated=value, peak_reserved=value)


def linear(static: float = 1_000_000, per_sample: float = 10_000) -> Callable[[int], float]:
    """Peak bytes that grow in a straight line with the batch: the memory FakeTrials reports most often."""
    return lambda b: static + per_sample * b


def check_invariants(result: SearchResult, edge: int, cap: int = 65536) -> None:
    """What every result must satisfy, whatever the fake."""
    tried = [a.batch for a in result.attempts]
    assert len(tried) == len(set(tried)), f"a batch was tried twice: {tried}"
    assert all(1 <= b <= cap for b in tried), tried
    by_batch = {a.batch: a for a in result.attempts}
    if result.max_batch > 0:
        assert by_batch[result.max_batch].fits
    if result.first_failure is not None:
        assert not by_batch[result.first_failure].fits
    # nothing that fit lies above a failure, nothing that failed below a fit
    assert all(not a.fits or a.batch <= edge for a in result.attempts)


class FakePrediction:
    """Stands in for hint.Prediction: poll() answers `answer` after `after` polls (None before)."""

    def __init__(self, answer: dict | None, after: int = 0) -> None:
        self.answer, self.after, self.polls = answer, after, 0

    def poll(self, timeout_s: float = 0.0) -> dict | None:
        assert timeout_s == 0.0, "the search never waits"
        self.polls += 1
        return self.answer if self.answer is not None and self.polls > self.after else None


# --- fake trial processes for the scan (scan.py, pipeline.py; no torch, no subprocess) ------------------------

STATIC, PER_SAMPLE = 1_000_000, 10_000  # bytes: a FakeWorker's peak is STATIC + PER_SAMPLE x batch


class World:
    """What the fake processes see. Edges are the largest batch that fits."""

    def __init__(
        self,
        inproc_edge=75,
        fresh_edge=None,
        measure_edge=None,
        setup_error=None,
        outcomes=None,
        capacity="exact",
        gpu="Fake GPU 9000",
        flops_per_sample=None,
        emulation=None,
    ):
        self.emulation = emulation
        self.inproc_edge = inproc_edge
        self.gpu = gpu
        self.flops_per_sample = flops_per_sample
        self.fresh_edge = inproc_edge if fresh_edge is None else fresh_edge
        self.measure_edge = self.fresh_edge if measure_edge is None else measure_edge
        self.setup_error = setup_error  # a WorkerError kind raised by every fresh()
        self.outcomes = outcomes or {}  # batch -> forced in-process outcome
        self.capacity = STATIC + PER_SAMPLE * inproc_edge if capacity == "exact" else capacity
        self.workers: list[FakeWorker] = []
        self.log: list[tuple] = []
        self.decode_cuts: list[tuple] = []  # (process, batch, decode_steps) of every trial: where generations were cut


class FakeWorker:
    """Stands in for a trial process (runner.Worker): trials fit up to the World's edge (fresh_edge in its first
    trial, inproc_edge after), timed runs up to its measure_edge; every call is logged in the World."""

    step_time = staticmethod(lambda batch: 0.5)  # seconds per timed step (tests of the curve replace it)

    def __init__(self, world: World, number: int) -> None:
        self.world, self.number = world, number
        self.ran = 0
        self.closed = False
        self.info = Ready(
            {"device_type": "cpu", "gpu": {"name": world.gpu}, "flags": {"x": 1}},
            capacity_bytes=world.capacity,
            weights_bytes=STATIC,
            build_seconds=0.0,
            task={"parameters": 1},
            unit="samples",
            emulation=world.emulation,
        )

    @property
    def alive(self) -> bool:
        return not self.closed

    def trial(self, batch: int, steps: int, keep: bool = False, decode_steps: int | None = None) -> Attempt:
        assert not self.closed
        edge = self.world.fresh_edge if self.ran == 0 else self.world.inproc_edge
        self.ran += 1
        self.world.log.append(("trial", self.number, batch))
        self.world.decode_cuts.append((self.number, batch, decode_steps))
        if self.ran > 1 and batch in self.world.outcomes:
            return Attempt(batch, self.world.outcomes[batch], message=f"forced {self.world.outcomes[batch]}")
        if batch > edge:
            return Attempt(batch, "oom", message="OutOfMemoryError: fake")
        peak = STATIC + PER_SAMPLE * batch
        return Attempt(batch, "fit", peak, peak, 0.01)

    def measure(self, batch: int, warmup: int, steps: int, budget_s: float | None = None, cont: bool = False) -> Timed:
        assert not self.closed
        self.world.log.append(("measure", self.number, batch, self.ran))
        peak = STATIC + PER_SAMPLE * batch
        if batch > self.world.measure_edge:  # the timed run fails past the trial's edge, as fragmentation makes it
            ran: dict = {"peak_allocated": peak + 5, "peak_reserved": peak + 7, "outcome": "oom"}
            ran.update(error="OutOfMemoryError: fragmentation", failed_at_step=warmup + 2)
        else:
            rate = batch / self.step_time(batch)
            ran = {"peak_allocated": peak + 1, "peak_reserved": peak + 2, "outcome": "fit", "unit": "samples"}
            ran.update(step_time={"steps": steps, "median_s": self.step_time(batch)}, utilization={})
            ran.update(samples_per_s=rate, units_per_s=rate)
        return Timed(batch=batch, warmup_steps=warmup, **ran)

    def flops(self) -> Flops:
        return Flops(self.world.flops_per_sample)

    def kill(self) -> None:
        self.killed = True
        self.closed = True

    def close(self) -> None:
        self.closed = True


class FakeFactory:
    """Stands in for scan.WorkerFactory: each fresh() is a new FakeWorker of the World, or raises its setup_error."""

    def __init__(self, world: World, forks: bool = False) -> None:
        self.world = world
        self.forks = forks  # True: fresh processes are cheap, so the search runs near-edge trials fresh
        self.counter = itertools.count(1)
        self.closed = False

    def fresh(self, spec) -> FakeWorker:
        if self.world.setup_error:
            raise WorkerError(self.world.setup_error, f"setup failed: {self.world.setup_error}")
        worker = FakeWorker(self.world, next(self.counter))
        self.world.workers.append(worker)
        return worker

    def close(self) -> None:
        self.closed = True


def run_scan(world: World, forks: bool = False, start=None, **options):
    """scan_precision of the toy workload in fp32 against the World's fake processes: (result, progress, envs)."""
    options.setdefault("curve", False)  # the search and proof tests; the curve has its own (test_curve.py)
    options.setdefault("repeat", 1)  # one fresh fit proves B here; the repeat rule has its own tests (test_repeat.py)
    opts = ScanOptions(precisions=["fp32"], device="cpu", cpu_budget_bytes=world.capacity, **options)
    progress = RecordingProgress()
    envs = []
    result = scan_precision(toy_workload(), "fp32", opts, FakeFactory(world, forks), progress, envs.append, start)
    return result, progress, envs


def toy_workload():
    """The registry's toy workload, loaded afresh for each call."""
    return load_registry()["toy"]


def assert_all_closed(world: World):
    """Every fake process the scan started was closed: none is left running."""
    assert all(w.closed for w in world.workers), [w.number for w in world.workers if not w.closed]


# --- real trial processes on the CPU (the toy workload under the fake allocator) ------------------------------


def toy_scan(budget: str) -> list[str]:
    """The command line of a scan of the toy workload on the CPU within `budget` ("8MiB"), for CliRunner: the
    options go after it."""
    return ["scan", "--model", "toy", "--device", "cpu", "--cpu-memory-budget", budget]


TOY_CPU_BUDGET = 8 * 2**20  # bytes (8 MiB): the toy MLP's edge is in the hundreds


# --- a fake multi-GPU launcher, and the rank processes of real launches (probe/distributed) -----------------

TOY = load_registry()["toy"]  # the toy workload, loaded once (toy_workload() loads a new one)


class FakeGroup:
    """Stands in for the multi-GPU launcher (launch.launch, which starts torchrun): the `launcher` of the scans.

    Launches without processes: rank r needs STATIC + per_sample[r] x batch bytes of CAPACITY; the
    group steps in `step_s` seconds, one GPU in `single_step_s`; one GPU alone fits up to `single_edge`."""

    STATIC, CAPACITY = 1000, 100_000

    def __init__(self, per_sample=(90, 100), step_s=0.55, single_step_s=0.5, single_edge=10_000):
        self.per_sample, self.step_s, self.single_step_s, self.single_edge = (
            per_sample,
            step_s,
            single_step_s,
            single_edge,
        )
        self.requests: list[LaunchRequest] = []

    def __call__(self, req: LaunchRequest) -> LaunchResult:
        self.requests.append(req)
        per_sample = self.per_sample[: req.world_size] if req.strategy != "none" else (max(self.per_sample),)
        attempts = []
        for batch in req.batches:
            peaks = [self.STATIC + c * batch for c in per_sample]
            fits = max(peaks) <= self.CAPACITY and (req.strategy != "none" or batch <= self.single_edge)
            attempts.append(
                Attempt(
                    batch,
                    FIT if fits else OOM,
                    max(peaks),
                    max(peaks),
                    0.1,
                    "" if fits else "rank 1: oom",
                    fresh=not attempts,
                )
            )
            if not fits:
                break
        measure = None
        if req.measure and attempts[-1].fits:
            step = self.step_s if req.world_size > 1 else self.single_step_s
            samples = req.world_size * req.batches[-1] / step
            measure = Timed(
                outcome=FIT,
                batch=req.batches[-1],
                samples_per_s=samples,
                units_per_s=2 * samples,
                unit="tokens",
                step_time={"median_s": step},
            )
        setup = RankSetup(
            environment={"gpu": {"name": "cpu"}}, capacity_bytes=self.CAPACITY, wrap={"strategy": req.strategy}
        )
        ranks: list[RankRecord | None] = [RankRecord(r, req.world_size, setup=setup) for r in range(req.world_size)]
        return LaunchResult(attempts, measure, setup, 0, False, 1.0, "", ranks)


def fake_group_opts(**extra):
    """ScanOptions of a multi-GPU scan against FakeGroup: fp32 on the CPU, with FakeGroup's capacity."""
    return ScanOptions(precisions=["fp32"], device="cpu", cpu_budget_bytes=FakeGroup.CAPACITY, **extra)


def process_alive(pid: int) -> bool:
    """Whether process `pid` still runs: it exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().split()[2] != "Z"


def rank_processes(folder: str) -> list[int]:
    """Processes of ranks whose launch folder lies under `folder` (so other sessions' ranks are not counted)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmd = handle.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "memprobe.probe.child.rank" in cmd and folder in cmd and process_alive(int(pid)):
            found.append(int(pid))
    return found
