"""The curve's knee and budget against fake curves (no torch): a cliff at a known batch located within 2%, a noisy
flat curve with no knee, a cliff the budget cannot resolve (the bracket it has), points whose estimated cost
would overrun the budget never started, inference curves that cover small batches too, and the estimator fed
from a committed H100 result file."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from memprobe.core.estimates.knee import Fall, bisect_batch, counts, falls, knee, resolved
from memprobe.core.records.records import CurvePoint, Timed
from memprobe.core.records.results import read_result
from memprobe.probe.curve import ladder, phases, spread_order
from memprobe.probe.curve_cost import COST_MARGIN, PointCost, from_precision
from memprobe.probe.curve_run import PointTimer, measure_curve

H100 = Path(__file__).resolve().parent / "data"  # frozen copies of H100 result files (reports/ is tidied)
CLIFF = 2675  # the H200's resnet50 fp16 cliff: 2672 fits the fast kernels, 2680 does not


def point(batch, speed, spread=0.0, outcome="fit"):
    """A timed point at `speed` samples/s whose step times spread by +-`spread` (a share of the median)."""
    median = batch / speed
    return {
        "batch": batch,
        "outcome": outcome,
        "samples_per_s": speed,
        "units_per_s": speed,
        "step_median_s": median,
        "step_p10_s": median * (1 - spread),
        "step_p90_s": median * (1 + spread),
    }


# --- the knee's rules -----------------------------------------------------------------------------


def test_a_fall_beyond_ten_percent_and_beyond_the_spread_counts():
    assert counts(point(2048, 6686.0, 0.02), point(3321, 4241.0, 0.02))
    assert not counts(point(1024, 1000.0), point(2048, 910.0))  # -9%: not a knee
    assert not counts(point(1024, 1000.0, 0.10), point(2048, 880.0, 0.10))  # -12%, inside the step-time spread
    assert counts(point(1024, 1000.0, 0.01), point(2048, 880.0, 0.01))  # -12%, clear of it
    assert not counts(point(1024, 900.0), point(2048, 1000.0))  # a rise


def test_falls_skip_points_that_did_not_fit_and_put_the_largest_first():
    points = [point(512, 1000.0), point(1024, 850.0), {"batch": 1536, "outcome": "oom"}, point(2048, 400.0)]
    assert falls(points) == [Fall(1024, 2048, pytest.approx(400 / 850 - 1)), Fall(512, 1024, pytest.approx(-0.15))]
    assert knee(points).before == 1024
    assert knee([point(1, 10.0), point(2, 20.0)]) is None


def test_bisection_prefers_a_ladder_batch_inside_and_stops_at_two_percent():
    fall = Fall(512, 2048, -0.4)
    assert bisect_batch(fall, planned=[256, 1024], taken=[]) == 1024  # the ladder's own batch inside
    assert bisect_batch(fall, planned=[], taken=[]) == 1280  # else the middle
    assert bisect_batch(fall, planned=[], taken=[1280]) is None  # tried (failed or skipped): give up
    assert bisect_batch(Fall(2646, 2687, -0.36), [], []) is None  # 41 <= 2% of 2646: located
    assert resolved(2672, 2680) and resolved(1, 2) and not resolved(2048, 2100)


# --- the order points are timed in ----------------------------------------------------------------


def test_coarse_pass_spans_the_range_before_the_rest():
    below = ladder(3321)[:-1]  # 32 ... 2048
    coarse, refine = phases(below)
    assert coarse == [2048, 32, 512, 128] and refine == [1024, 64, 256]
    assert spread_order([1, 2, 4, 8, 16, 32, 64]) == [64, 1, 8, 32, 4, 16, 2]


# --- a fake curve in fake processes, with a fake clock --------------------------------------------


class Proc:
    def __init__(self, number):
        self.number, self.closed = number, False

    def kill(self):
        self.closed = True

    def close(self):
        self.closed = True


class Factory:
    forks = True

    def __init__(self):
        self.counter, self.procs = itertools.count(1), []

    def fresh(self, spec):
        self.procs.append(Proc(next(self.counter)))
        return self.procs[-1]


class FakeCurve:
    """A throughput curve `speed(batch)` timed in fake processes: each point advances the fake clock by its true
    cost (`setup_s` for the new size, then warm-up and timed steps), so budgets are checked without waiting."""

    def __init__(self, speed, setup_s=0.5, spread=0.02, warmup=2, timed=6):
        self.speed, self.setup_s, self.spread, self.warmup, self.timed = speed, setup_s, spread, warmup, timed
        self.now, self.timed_batches = 0.0, []

    def clock(self):
        return self.now

    def measure(self, worker, batch):
        speed = self.speed(batch)
        step = batch / speed
        self.now += self.setup_s + (self.warmup + self.timed) * step
        self.timed_batches.append(batch)
        return Timed(
            batch=batch,
            outcome="fit",
            samples_per_s=speed,
            units_per_s=speed,
            first_step_seconds=step + self.setup_s,
            warmup_step_seconds=step,
            step_time={
                "median_s": step,
                "p10_s": step * (1 - self.spread),
                "p90_s": step * (1 + self.spread),
                "steps": self.timed,
            },
        )

    def at(self, batch):
        return self.measure(None, batch)

    def run(self, max_batch, budget_s=None, cost=None, batches=None):
        at_max = self.at(max_batch)
        self.now, self.timed_batches = 0.0, []
        cost = cost or PointCost(
            0.0, self.setup_s, self.warmup, self.timed, steps={max_batch: max_batch / self.speed(max_batch)}
        )
        timer = PointTimer(Factory(), None, self.measure, None, None, max_batch)
        points = measure_curve(
            timer, batches or ladder(max_batch), at_max, max_batch, cost, budget_s, lambda p: None, clock=self.clock
        )
        return [p.to_dict() for p in points]  # as the result file has them: the knee reads these


def resnet_h200(batch):
    """ResNet-50 fp16 on an H200 as measured: rising to ~6,700 images/s, then 4,241 past the cliff."""
    return 4241.0 if batch > CLIFF else 6800.0 * batch / (batch + 40)


def test_a_cliff_at_a_known_batch_is_located_within_two_percent():
    curve = FakeCurve(resnet_h200)
    points = curve.run(3321)
    found = knee(points)
    assert found.before <= CLIFF < found.after and found.after - found.before <= 0.02 * found.before
    assert found.drop == pytest.approx(4241 / resnet_h200(found.before) - 1)
    bisected = [p["batch"] for p in points if p["phase"] == "knee"]
    assert 3 <= len(bisected) <= 6 and all(2048 < b < 3321 for b in bisected)
    assert {p["batch"] for p in points} >= set(ladder(3321))  # the whole ladder was timed too


def test_a_noisy_flat_curve_has_no_knee():
    rng = random.Random(7)
    noise = {b: 1 + rng.uniform(-0.05, 0.05) for b in range(1, 5000)}
    curve = FakeCurve(lambda b: 1000.0 * noise[b], spread=0.08)
    points = curve.run(3321)
    assert knee(points) is None
    assert not [p for p in points if p["phase"] == "knee"]


def test_a_gradual_decline_is_not_a_knee():
    # -30% from 2048 to 3321, spread evenly: bisection finds no step of 10%, so there is no knee
    curve = FakeCurve(lambda b: 6000.0 if b <= 2048 else 6000.0 * (1 - 0.3 * (b - 2048) / (3321 - 2048)), spread=0.0)
    points = curve.run(3321)
    assert knee(points) is None
    assert [p["batch"] for p in points if p["phase"] == "knee"]  # it looked


def test_a_cliff_the_budget_cannot_resolve_reports_the_bracket_it_has():
    curve = FakeCurve(resnet_h200, setup_s=4.0)
    points = curve.run(3321, budget_s=45.0)
    assert curve.now <= 45.0  # no point started that its estimate said would overrun
    found = knee(points)
    assert found.before <= CLIFF < found.after and not found.resolved
    timed_knee = [p for p in points if p["phase"] == "knee" and p["outcome"] == "fit"]
    assert 1 <= len(timed_knee) < 5
    skipped = [p for p in points if p["outcome"] == "skipped"]
    assert skipped and all("curve budget left" in p["error"] and p["estimated_s"] > 0 for p in skipped)
    assert all(p["batch"] not in curve.timed_batches for p in skipped)  # never started


def test_every_point_that_started_fit_the_budget_by_its_estimate():
    curve = FakeCurve(resnet_h200, setup_s=2.0)
    started_at = {}
    measure = curve.measure

    def spy(worker, batch):
        started_at[batch] = curve.now
        return measure(worker, batch)

    curve.measure = spy
    points = curve.run(3321, budget_s=30.0)
    for p in points:
        if p["phase"] != "max" and p["outcome"] == "fit":
            assert started_at[p["batch"]] + p["estimated_s"] <= 30.0
    assert curve.now <= 30.0


# --- inference curves cover the range -------------------------------------------------------------


def bert_squad_infer(batch):
    """Sequences/s of an inference forward: best around 256, slower at huge batches (made up, shaped as seen)."""
    return 2000.0 * batch / (batch + 16) * (1.0 if batch <= 1024 else 0.93)


def test_an_inference_curve_with_expensive_large_points_still_times_small_and_middle_ones():
    curve = FakeCurve(bert_squad_infer, setup_s=0.3, warmup=1, timed=6)
    cost = PointCost(1.5, 0.3, warmup=1, timed=6, timed_budget_s=5.0, steps={9405: 9405 / bert_squad_infer(9405)})
    points = curve.run(9405, budget_s=20.0, cost=cost)
    timed = sorted(p["batch"] for p in points if p["outcome"] == "fit")
    skipped = sorted(p["batch"] for p in points if p["outcome"] == "skipped")
    assert 8192 in skipped and 128 in timed and any(256 <= b <= 2048 for b in timed)
    assert curve.now <= 20.0


# --- the estimator ------------------------------------------------------------------------------------


def committed(name: str, precision: str):
    path = next(H100.glob(f"*_{name}_train_*.json"))
    return read_result(path).precisions[precision]


def estimator(p):
    return from_precision(p.attempts, p.checks, p.throughput, p.settings, 3, 2, 6, 5.0)


def test_estimator_from_a_nasnet_record_charges_its_per_size_set_up():
    nasnet = committed("nasnet-large", "fp16")  # H100: 16-28 s for each new batch size
    cost = estimator(nasnet)
    assert 15.0 < cost.setup_s < 30.0 and 0.5 < cost.process_s < 3.0
    assert cost.estimate(64, new_process=False) > 15.0 * COST_MARGIN
    # a 45 s curve has room for one such point, not three
    assert cost.estimate(64, True) < 45.0 < 2 * cost.estimate(32, False)


def test_estimator_from_a_resnet_record_is_cheap_and_learns_from_points():
    resnet = committed("resnet50", "fp16")
    cost = estimator(resnet)
    assert cost.setup_s < 1.5 and cost.estimate(1024, True) < 6.0
    before = cost.estimate(1024, False)
    cost.learn(CurvePoint(1024, "fit", step_median_s=0.5, first_step_s=3.5, warmup_step_s=0.5, process_s=4.0))
    assert cost.setup_s == pytest.approx(3.0) and cost.process_s == 4.0 and cost.step_at(1024) == 0.5
    assert cost.estimate(1024, False) > before


def test_timed_steps_are_cut_as_the_trial_process_cuts_them():
    cost = PointCost(0.0, 0.0, warmup=2, timed=6, timed_budget_s=5.0, steps={100: 2.0}, margin=1.0)
    assert cost.estimate(100, False) == pytest.approx(2.0 * 2 + 3 * 2.0)  # 2 warm-up, 3 timed (at least 3)
    one_warmup = PointCost(0.0, 10.0, warmup=1, timed=6, timed_budget_s=5.0, steps={100: 0.5}, margin=1.0)
    assert one_warmup.estimate(100, False) == pytest.approx(10.5 + 3 * 0.5)  # the first step's set-up cuts them
