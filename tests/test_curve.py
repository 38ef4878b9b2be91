"""Throughput curve: the ladder of batch sizes, the best batch b*, timing the ladder in fake trial processes
(shared below the edge, fresh near it), and the curve in a whole scan_precision with fakes (no torch)."""

from __future__ import annotations

import itertools

import pytest

from fakes import TOY_CPU_BUDGET, FakeFactory, FakeWorker, World, assert_all_closed, run_scan, toy_scan, toy_workload
from memprobe.core.estimates.memory_model import MemoryModel
from memprobe.core.process.protocol import MeasureRequest, Ready, SetupRequest
from memprobe.core.records.records import CurvePoint, Timed
from memprobe.probe.curve import CurveError, best_point, curve_point, ladder, summary
from memprobe.probe.curve_cost import PointCost
from memprobe.probe.curve_run import PointTimer, measure_curve
from memprobe.probe.scan import INFER_TRIAL_STEPS, INFER_WARMUP, ScanOptions

# --- the ladder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "max_batch, points, expected",
    [
        (1870, 8, [16, 32, 64, 128, 256, 512, 1024, 1870]),  # the 7 largest powers of two below B, then B
        (3321, 8, [32, 64, 128, 256, 512, 1024, 2048, 3321]),
        (1030, 8, [8, 16, 32, 64, 128, 256, 512, 1030]),  # 1024 is within 1/8 of B: skipped
        (155, 4, [32, 64, 128, 155]),
        (9, 8, [1, 2, 4, 9]),  # 8 > 7/8 * 9: skipped
        (2, 8, [1, 2]),
        (1, 8, [1]),
        (0, 8, []),  # nothing trains: no curve
        (1870, 1, [1870]),
    ],
)
def test_default_ladder(max_batch, points, expected):
    assert ladder(max_batch, points) == expected


def test_requested_ladder_drops_sizes_above_b_and_always_ends_at_b():
    assert ladder(1000, 8, [128, 64, 5000, 1000, 64]) == [64, 128, 1000]
    assert ladder(1000, 2, [64, 128, 256]) == [256, 1000]  # the cap keeps the largest


@pytest.mark.parametrize("points, requested", [(0, None), (8, [0, 16])])
def test_unusable_ladder_raises(points, requested):
    with pytest.raises(CurveError):
        ladder(100, points, requested)


def test_scan_options_refuse_a_bad_ladder_as_a_value_error():
    with pytest.raises(ValueError):
        ScanOptions(precisions=["fp32"], curve_batches=[0])


# --- b* -----------------------------------------------------------------------------------------


def fit(batch, sps):
    return {"batch": batch, "outcome": "fit", "samples_per_s": sps, "units_per_s": sps * 2}


def test_best_point_is_the_fastest_fit_and_ignores_failures():
    points = [fit(256, 5863), fit(512, 6216), fit(1870, 6598), {"batch": 2048, "outcome": "oom"}, fit(3321, 4360)]
    assert best_point(points)["batch"] == 1870
    assert summary(points) == {"best_batch": 1870, "best_samples_per_s": 6598, "best_units_per_s": 13196}


def test_best_point_tie_goes_to_the_smaller_batch():
    assert best_point([fit(512, 100.0), fit(256, 100.0), fit(1024, 99.0)])["batch"] == 256


def test_no_fitting_point_means_no_best_batch():
    assert best_point([{"batch": 8, "outcome": "oom"}]) is None
    assert summary([]) == {"best_batch": None, "best_samples_per_s": None, "best_units_per_s": None}


def test_curve_point_keeps_spread_and_peaks():
    measured = Timed(
        batch=64,
        outcome="fit",
        samples_per_s=640.0,
        units_per_s=1280.0,
        step_time={"steps": 10, "median_s": 0.1, "p10_s": 0.09, "p90_s": 0.12},
        peak_allocated=10,
        peak_reserved=12,
    )
    point = curve_point(measured, fresh=False)
    assert point.to_dict() == {
        "batch": 64,
        "outcome": "fit",
        "fresh": False,
        "samples_per_s": 640.0,
        "units_per_s": 1280.0,
        "step_median_s": 0.1,
        "step_p10_s": 0.09,
        "step_p90_s": 0.12,
        "timed_steps": 10,
        "peak_allocated": 10,
        "peak_reserved": 12,
    }
    failed = curve_point(Timed(batch=64, outcome="oom", error="OutOfMemoryError: x"), fresh=True)
    assert failed.outcome == "oom" and failed.error.startswith("OutOfMemoryError")


# --- timing the ladder in fake processes --------------------------------------------------------


class Proc:
    def __init__(self, number, log, crash_at=()):
        self.number, self.log, self.crash_at, self.closed, self.killed = number, log, crash_at, False, False

    def kill(self):
        self.killed = self.closed = True

    def close(self):
        self.closed = True


class Factory:
    def __init__(self, forks=True, crash_at=()):
        self.forks, self.crash_at = forks, crash_at
        self.counter, self.procs, self.log = itertools.count(1), [], []

    def fresh(self, spec):
        proc = Proc(next(self.counter), self.log, self.crash_at)
        self.procs.append(proc)
        return proc


def free_cost():
    """An estimator that says every point costs nothing (the budget tests give their own)."""
    return PointCost(process_s=0.0, setup_s=0.0, warmup=2, timed=6)


def run_curve(factory, batches, max_batch=1000, at_max=None, model=None, fresh_above=None, budget=None):
    reported = []

    def measure(worker, batch):
        factory.log.append((worker.number, batch))
        if batch in worker.crash_at:
            return Timed(batch=batch, outcome="crash", error="trial process died")
        return Timed(
            batch=batch,
            outcome="fit",
            samples_per_s=float(batch),
            units_per_s=float(batch),
            step_time={"median_s": 1.0, "p10_s": 1.0, "p90_s": 1.0, "steps": 3},
        )

    timer = PointTimer(factory, None, measure, model, fresh_above, max_batch)
    points = measure_curve(timer, batches, at_max, max_batch, free_cost(), budget, reported.append)
    return points, reported


def test_points_below_the_edge_share_one_process_near_ones_are_fresh():
    factory = Factory(forks=True)
    model = MemoryModel(0.0, 1.0, "peak_reserved", 2)  # peak(b) = b bytes
    points, reported = run_curve(
        factory,
        [64, 128, 256, 512, 1000],
        model=model,
        fresh_above=300.0,
        at_max=Timed(batch=1000, outcome="fit", samples_per_s=900.0),
    )
    assert [p.batch for p in points] == [64, 128, 256, 512, 1000]
    # B first (the proof's run), then the coarse pass (every other batch from the top: 512, 128), then the rest
    assert [p.batch for p in reported] == [1000, 512, 128, 256, 64]
    assert [p.phase for p in reported] == ["max", "coarse", "coarse", "refine", "refine"]
    # B from the proof, not re-run; 512 (predicted 512 > 300) fresh in process 1; the rest share process 2
    assert factory.log == [(1, 512), (2, 128), (2, 256), (2, 64)]
    assert [p.fresh for p in points] == [False, False, False, True, True]
    assert points[-1].samples_per_s == 900.0
    assert all(p.closed for p in factory.procs)


def test_without_a_fork_server_every_point_shares_one_process():
    factory = Factory(forks=False)
    points, _ = run_curve(factory, [64, 128, 1000], model=None, fresh_above=None)
    assert factory.log == [(1, 1000), (1, 128), (1, 64)]
    assert not any(p.fresh for p in points)


def test_a_crash_is_kept_as_a_point_and_the_next_batch_gets_a_new_process():
    factory = Factory(forks=True, crash_at=(64,))
    model = MemoryModel(0.0, 1.0, "peak_reserved", 2)
    points, _ = run_curve(
        factory,
        [64, 128, 256, 1000],
        model=model,
        fresh_above=2000.0,
        at_max=Timed(batch=1000, outcome="fit", samples_per_s=1000.0),
    )
    assert [(p.batch, p.outcome) for p in points] == [(64, "crash"), (128, "fit"), (256, "fit"), (1000, "fit")]
    assert factory.log == [(1, 256), (1, 64), (2, 128)]
    assert all(p.closed for p in factory.procs)


def test_points_past_the_time_budget_are_skipped_but_b_is_kept():
    factory = Factory(forks=True)
    points, _ = run_curve(
        factory,
        [64, 128, 1000],
        model=None,
        fresh_above=None,
        budget=0.0,
        at_max=Timed(batch=1000, outcome="fit", samples_per_s=900.0),
    )
    assert [(p.batch, p.outcome) for p in points] == [(64, "skipped"), (128, "skipped"), (1000, "fit")]
    assert all("of the 0 s curve budget left" in p.error for p in points[:2])
    assert factory.log == [] and best_point([p.to_dict() for p in points])["batch"] == 1000


def test_interrupt_kills_the_running_process():
    factory = Factory(forks=True)

    def measure(worker, batch):
        raise KeyboardInterrupt

    timer = PointTimer(factory, None, measure, None, None, 1000)
    with pytest.raises(KeyboardInterrupt):
        measure_curve(timer, [64, 1000], None, 1000, free_cost(), None, lambda p: None)
    assert factory.procs[0].killed


# --- in a whole scan_precision (the fake trial processes of fakes.py) ---------------------------


def test_scan_stores_curve_best_batch_and_reuses_the_proofs_timed_run_at_b(monkeypatch):
    world = World(75)
    # the fake step takes 0.5 s at any batch up to 32, then slows sharply: a cliff, so b* < B
    monkeypatch.setattr(
        FakeWorker, "step_time", staticmethod(lambda b: 0.5 if b <= 32 else 0.5 * b / 16), raising=False
    )
    result, progress, _ = run_scan(world, curve=True)
    assert result.max_batch == 75
    # the ladder, then the knee's bisection between 32 and 64 down to one batch apart
    assert [p.batch for p in result.curve] == [1, 2, 4, 8, 16, 32, 33, 34, 36, 40, 48, 64, 75]
    assert [p.batch for p in result.curve if p.phase == "knee"] == [33, 34, 36, 40, 48]
    assert all(p.outcome == "fit" for p in result.curve)
    assert result.best_batch == 32 and result.best_samples_per_s == pytest.approx(64.0)
    assert (result.knee_batch, result.knee_after_batch, result.knee_drop) == (32, 33, -0.5)
    assert "knee at batch 32: throughput -50.0% at 33 (located within 2%)" in progress.notes
    assert result.curve[-1].samples_per_s == result.throughput.samples_per_s
    assert result.curve_seconds is not None
    measured_at_b = [e for e in world.log if e[0] == "measure" and e[2] == 75]
    assert len(measured_at_b) == 1  # the proof's timed run; the curve did not time B again
    assert any("best batch b* = 32" in n for n in progress.notes)
    assert_all_closed(world)


def test_no_curve_option_times_only_b():
    world = World(75)
    result, _, _ = run_scan(world, curve=False)
    assert result.curve == [] and result.best_batch is None
    assert [e[2] for e in world.log if e[0] == "measure"] == [75]


def test_requested_ladder_is_used():
    world = World(75)
    result, _, _ = run_scan(world, curve=True, curve_batches=[10, 40, 500])
    assert [p.batch for p in result.curve] == [10, 40, 75]


# --- inference: fewer steps per trial -----------------------------------------------------------


def test_inference_trials_and_warmup_are_shorter():
    opts = ScanOptions(precisions=["fp16"], mode="infer")
    assert opts.trial_steps == INFER_TRIAL_STEPS == 2 and opts.warmup_steps == INFER_WARMUP == 1
    train = ScanOptions(precisions=["fp16"], steps=4, warmup=3)
    assert train.trial_steps == 4 and train.warmup_steps == 3
    assert opts.curve_budget == 20.0 and train.curve_budget == 45.0
    assert ScanOptions(precisions=["fp16"], mode="infer", curve_budget_s=60.0).curve_budget == 60.0
    with pytest.raises(ValueError, match="curve budget"):
        ScanOptions(precisions=["fp16"], curve_budget_s=0.0)


def test_inference_scan_passes_the_short_trial_and_warmup_to_the_processes(monkeypatch):
    world = World(75)
    seen = {"trial": set(), "warmup": set(), "budget": set()}
    trial, measure = FakeWorker.trial, FakeWorker.measure

    def spy_trial(self, batch, steps, keep=False, decode_steps=None):
        seen["trial"].add(steps)
        return trial(self, batch, steps, keep, decode_steps)

    def spy_measure(self, batch, warmup, steps, budget_s=None, cont=False):
        seen["warmup"].add(warmup)
        seen["budget"].add(budget_s)
        return measure(self, batch, warmup, steps, budget_s, cont)

    monkeypatch.setattr(FakeWorker, "trial", spy_trial)
    monkeypatch.setattr(FakeWorker, "measure", spy_measure)
    result, _, _ = run_scan(world, mode="infer", curve=True, timed_budget_s=5.0)
    assert result.max_batch == 75
    assert seen == {"trial": {2}, "warmup": {1}, "budget": {5.0, 2.5}}  # curve points: half the budget
    assert "2 steps (1 warm-up + 1)" in result.proof.fit_check


# --- the CLI's --curve / --no-curve -------------------------------------------------------------


def test_scan_curve_options_reach_the_scan_options(scan_options_seen, tmp_path):
    from click.testing import CliRunner

    from memprobe.cli import main

    seen = scan_options_seen
    base = (*toy_scan("8MiB"), "--out", str(tmp_path))
    runner = CliRunner()
    for extra in ((), ("--curve",), ("--curve", "64,128"), ("--no-curve",)):
        done = runner.invoke(main, [*base, *extra])
        assert done.exit_code == 0, done.output
    assert [(o.curve, o.curve_batches) for o in seen] == [(True, []), (True, []), (True, [64, 128]), (False, [])]
    bad = runner.invoke(main, [*base, "--curve", "64,x"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output and "--curve" in bad.output
    done = runner.invoke(main, [*base, "--curve-budget", "90"])
    assert done.exit_code == 0, done.output
    assert seen[-1].curve_budget_s == 90.0 and seen[-1].curve_budget == 90.0
    for value in ("0", "-5", "x"):
        bad = runner.invoke(main, [*base, "--curve-budget", value])
        assert bad.exit_code == 2 and "Traceback" not in bad.output and "--curve-budget" in bad.output


@pytest.mark.parametrize(
    "options",
    [{}, {"curve": False}, {"curve_batches": [64, 128], "curve_budget_s": 90.0}],
    ids=["auto", "off", "given"],
)
def test_parallel_children_get_the_curve_options(options, tmp_path):
    from fakes import TOY
    from memprobe.probe.parallel import PartRequest

    opts = ScanOptions(precisions=["fp16"], **options)
    written = PartRequest.of(TOY, opts, "fp16", tmp_path / "part").write(tmp_path / "toy_fp16.request")
    _workload, got = PartRequest.read(written).scan()
    curve = ("curve", "curve_batches", "curve_budget_s")
    assert [getattr(got, k) for k in curve] == [getattr(opts, k) for k in curve]


# --- the timed-step budget in a real (CPU) trial process session ---------------------------------


def test_timed_steps_stop_at_the_budget_but_never_below_three(toy):
    from memprobe.probe.child.worker import MIN_TIMED_STEPS, Session

    s = Session()
    info = s.setup(SetupRequest(toy, "fp32", "train", "cpu", TOY_CPU_BUDGET))
    assert isinstance(info, Ready), info
    try:
        roomy = s.measure(MeasureRequest(8, 1, 6, budget_s=1000.0))
        assert roomy.step_time["steps"] == 6 and roomy.timed_steps_cut_from is None
        tight = s.measure(MeasureRequest(8, 1, 6, budget_s=1e-9))
        assert tight.outcome == "fit", tight
        assert tight.step_time["steps"] == MIN_TIMED_STEPS == 3 and tight.timed_steps_cut_from == 6
    finally:
        s.close()


@pytest.mark.parametrize(
    "first, later, budget, expected",
    [
        (0.5, None, 10.0, 10),
        (2.0, None, 10.0, 5),
        (14.0, None, 10.0, 3),
        (2.0, None, None, 10),
        (None, None, 10.0, 10),
        (14.0, 0.5, 10.0, 10),  # the set-up of a new size (or a compilation) in the first step does not count
        (14.0, 2.5, 10.0, 4),
    ],
)
def test_steps_within_budget(first, later, budget, expected):
    from memprobe.probe.child.worker import Session

    result = {"first_step_seconds": first, "warmup_step_seconds": later}
    assert Session._steps_within(10, budget, result) == expected
    assert ("timed_steps_cut_from" in result) == (expected < 10)


def test_ctrl_c_during_the_curve_keeps_the_proven_precision_and_the_points_timed(monkeypatch, tmp_path):
    import memprobe.probe.scan
    from conftest import RecordingProgress
    from memprobe.core.records.results import read_result
    from memprobe.probe.scan import ScanInterrupted, scan_workload

    world = World(75)
    measure = FakeWorker.measure

    def interrupted_below_32(self, batch, warmup, steps, budget_s=None, cont=False):
        if batch < 32:
            raise KeyboardInterrupt
        return measure(self, batch, warmup, steps, budget_s, cont)

    monkeypatch.setattr(FakeWorker, "measure", interrupted_below_32)
    monkeypatch.setattr(memprobe.probe.scan, "WorkerFactory", lambda workload, env=None: FakeFactory(world))
    opts = ScanOptions(precisions=["fp32", "bf16"], device="cpu", cpu_budget_bytes=world.capacity)
    with pytest.raises(ScanInterrupted) as stop:
        scan_workload(toy_workload(), opts, tmp_path, RecordingProgress())
    saved = read_result(stop.value.path)
    assert saved.status == "partial" and list(saved.precisions) == ["fp32"]
    p = saved.precisions["fp32"]
    assert p.status == "done" and p.max_batch == 75 and p.settings.curve_interrupted is True
    # B, then the coarse pass's largest (64); its next, batch 1, was interrupted
    assert [c.batch for c in p.curve] == [64, 75] and p.best_batch == 75
    assert_all_closed(world)


# --- units: every curve line in the workload's unit, a length search speaks of lengths -----------------


def test_curve_text_is_in_the_workloads_unit():
    from memprobe.probe.curve import curve_text

    images = CurvePoint(512, "fit", False, samples_per_s=6216.0, units_per_s=6216.0)
    assert curve_text(images, "images") == "curve: batch 512 -> 6216.0 images/s (shared process)"
    llama = CurvePoint(8, "fit", True, samples_per_s=24.2, units_per_s=49573.0, phase="knee")
    assert curve_text(llama, "tokens") == "curve: batch 8 -> 49573.0 tokens/s (knee bisection, fresh process)"
    length = CurvePoint(32256, "fit", True, samples_per_s=0.86, units_per_s=27639.4)
    assert curve_text(length, "tokens", "seq len") == "curve: seq len 32256 -> 27639.4 tokens/s (fresh process)"
    skipped = CurvePoint(64, "skipped", phase="refine", error="estimated 9.0 s, 2.0 s of the 45 s curve budget left")
    assert curve_text(skipped, "images") == (
        "curve: batch 64 -> skipped (refine): estimated 9.0 s, 2.0 s of the 45 s curve budget left"
    )


def test_a_sequence_length_scan_prints_lengths_and_tokens_per_second(monkeypatch):
    from conftest import RecordingProgress
    from memprobe.core.workload.registry import load_registry
    from memprobe.core.workload.variants import VariantRequest, apply_variant
    from memprobe.probe.scan import scan_precision

    world = World(75)
    measure = FakeWorker.measure

    def in_tokens(self, batch, warmup, steps, budget_s=None, cont=False):
        out = measure(self, batch, warmup, steps, budget_s)
        if out.outcome == "fit":  # 4 sequences of `batch` tokens per step
            out.unit, out.units_per_s = "tokens", out.samples_per_s * 4
        return out

    monkeypatch.setattr(FakeWorker, "measure", in_tokens)
    workload = apply_variant(load_registry()["toy-llama"], VariantRequest(search="seq-len", batch=4))
    opts = ScanOptions(precisions=["bf16"], device="cpu", cpu_budget_bytes=world.capacity)
    progress = RecordingProgress()
    result = scan_precision(workload, "bf16", opts, FakeFactory(world), progress, lambda env: None)
    assert result.max_batch == 75 and result.curve
    lines = [n for n in progress.notes if n.startswith("curve:")]
    assert lines and all(n.startswith("curve: seq len ") and "tokens/s" in n for n in lines)
    assert any(n.startswith("throughput curve at seq len 1, 2, 4") for n in progress.notes)
    best = next(n for n in progress.notes if "b* =" in n)
    assert best.startswith(f"best seq len b* = {result.best_batch}: {result.best_units_per_s:.1f} tokens/s")
    assert not any("samples/s" in n for n in progress.notes)
