"""The repeat rule (B fits in K fresh runs), the flaky band and the bounded walk near a flaky edge, against fakes whose
fresh runs fit or fail by a script (probe/edge_walk.py, probe/proof.py, the pipeline, the records and their words)."""

from __future__ import annotations

import random

import pytest
from click.testing import CliRunner

from conftest import RecordingProgress
from fakes import TOY, FakeGroup, FakeTrials, World, fake_group_opts, linear, make_result, run_scan
from memprobe.cli import main
from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.process.outcomes import FIT, OOM
from memprobe.core.records.records import Band, BandRun, Proof
from memprobe.core.records.results import read_result, write_result
from memprobe.core.text.edge_text import band_text, edge_text, runs_text
from memprobe.probe.distributed.scan import scan_precision_distributed
from memprobe.probe.edge_walk import CHECK_CAP_FACTOR, EDGE_BUDGET_S, confirm_edge
from memprobe.probe.proof import proof_record
from memprobe.probe.search import SearchResult, find_max_batch

RUN_S = 9.0  # a small CNN's fresh run on an H200 (process, build, trial and timed steps): 8-10 s in the zoo's scans


class Flaky:
    """check(n): fresh runs whose outcome near the edge is scripted. `script[b]` lists b's outcomes run by run (True
    fits); past its script, b fits with probability `p[b]` (a seeded draw); elsewhere it fits iff b <= `solid`. Every
    run takes `seconds` of wall time."""

    def __init__(self, solid, script=None, p=None, seed=0, seconds=RUN_S):
        self.solid, self.seconds = solid, seconds
        self.script = {b: list(v) for b, v in (script or {}).items()}
        self.p = p or {}
        self.rng = random.Random(seed)
        self.calls: list[int] = []
        self.outcomes: list[tuple[int, bool]] = []

    def fits(self, batch: int) -> bool:
        if self.script.get(batch):
            return self.script[batch].pop(0)
        if batch in self.p:
            return self.rng.random() < self.p[batch]
        return batch <= self.solid

    def __call__(self, batch: int) -> Attempt:
        self.calls.append(batch)
        ok = self.fits(batch)
        self.outcomes.append((batch, ok))
        return Attempt(batch, FIT if ok else OOM, peak_reserved=batch, wall_seconds=self.seconds)


def claimed(batch: int) -> SearchResult:
    """A search that claimed `batch` (fitted there, failed at batch + 1)."""
    return SearchResult(batch, batch + 1, "edge")


def walked_seconds(check: Flaky) -> float:
    return len(check.calls) * check.seconds


# --- the repeat rule on a steady edge ---------------------------------------------------------------------------


def test_b_is_run_again_until_it_fitted_k_times_and_the_pair_stays_the_proof():
    check = Flaky(75)
    edge = confirm_edge(check, claimed(75), repeat=2)
    assert check.calls == [76, 75, 75], "B+1, then B, then B once more"
    assert (edge.max_batch, edge.fits, edge.fails, edge.verified, edge.agreed) == (75, 75, 76, True, True)
    assert (edge.repeat, edge.runs_at_b, edge.fits_at_b, edge.ended_by) == (2, 2, 2, "edge")
    three = Flaky(75)
    assert confirm_edge(three, claimed(75), repeat=3).fits_at_b == 3 and three.calls == [76, 75, 75, 75]


def test_a_search_trial_that_fitted_fresh_counts_as_one_of_the_k_runs():
    check = Flaky(75)
    known = {76: Attempt(76, OOM, fresh=True), 75: Attempt(75, FIT, fresh=True)}
    edge = confirm_edge(check, claimed(75), known=known, repeat=2)
    assert check.calls == [75] and edge.reused == [76, 75]
    assert (edge.max_batch, edge.runs_at_b, edge.verified) == (75, 2, True)


def test_at_the_batch_cap_b_is_run_k_times():
    found = find_max_batch(FakeTrials(10**9, linear()), max_batch=100)
    check = Flaky(10**9)
    edge = confirm_edge(check, found, max_batch=100, repeat=2)
    assert check.calls == [100, 100]
    assert (edge.max_batch, edge.fails, edge.verified, edge.ended_by) == (100, None, True, "cap")


def test_a_fresh_search_failure_below_the_claimed_b_starts_the_walk_there():
    # the search's fresh trials need not agree with one edge: 72 failed fresh, then 75 fitted in its shared process
    known = {72: Attempt(72, OOM, fresh=True)}
    check = Flaky(70)
    edge = confirm_edge(check, claimed(75), known=known, repeat=2)
    assert check.calls[0] == 71 and edge.reused == [72]
    assert edge.max_batch == 70 and edge.verified and edge.max_batch < 72


# --- a flaky edge -----------------------------------------------------------------------------------------------


def test_a_failed_repeat_makes_b_part_of_the_band_and_the_walk_settles_below_it():
    # 75 fits once and fails the next time; 74 fits every time
    check = Flaky(74, script={75: [True, False]})
    edge = confirm_edge(check, claimed(75), repeat=2)
    assert (edge.max_batch, edge.fits, edge.fails, edge.verified, edge.fits_at_b) == (74, 74, 75, True, 2)
    proof = proof_record(edge, claimed(75))
    assert proof.band == Band(75, 75, [BandRun(75, 1, 1)])
    assert edge_text(edge.max_batch, proof) == "B 74, 2 of 2 fresh runs; 75 flaky (75: 1 of 2 fitted)"


def test_the_issues_walk_fit_3438_failed_3437_and_3435_fit_3433_settles_within_the_budget():
    # Blind on an H200: a small CNN's fresh runs fitted at 3438, then failed at 3437 and 3435 and fitted at 3433; one
    # fresh trial per batch walked 17 runs in 160 s without settling. Here every batch from 3434 up is flaky.
    script = {3438: [True, False], 3437: [False], 3436: [False, True], 3435: [False], 3434: [True, False]}
    check = Flaky(3433, script=script)
    edge = confirm_edge(check, claimed(3438), repeat=2)
    assert check.calls == [3439, 3438, 3438, 3437, 3433, 3433, 3435, 3434, 3434]  # 81 s, against 17 runs in 160 s
    assert walked_seconds(check) <= EDGE_BUDGET_S
    assert edge.verified and edge.max_batch == 3433 and edge.fits_at_b == edge.runs_at_b == 2
    proof = proof_record(edge, claimed(3438))
    assert (proof.band.low, proof.band.high) == (3434, 3438)
    assert {r.batch: (r.fits, r.fails) for r in proof.band.runs} == {
        3434: (1, 1),
        3435: (0, 1),
        3437: (0, 1),
        3438: (1, 1),
    }


def test_near_a_flaky_edge_no_new_batch_is_tried_past_the_budget_only_the_repeats_of_b():
    # 20 s runs: after the band is seen the walk jumps below it, makes that batch hold and stops at 90 s
    script = {3438: [True, False], 3437: [False]}
    check = Flaky(3433, script=script, seconds=20.0)
    edge = confirm_edge(check, claimed(3438), repeat=2)
    assert new_batches_past_the_budget(check) == []
    assert (edge.max_batch, edge.fits_at_b, edge.ended_by) == (3433, 2, "budget")
    assert not edge.verified and edge.fails == 3437  # 3434-3436 were never run: B+1 is not proven to fail
    assert "not the" not in proof_record(edge, claimed(3438)).non_monotone["note"]


def test_search_fits_that_a_check_contradicts_are_no_floor_and_the_walk_settles_within_the_budget():
    # inception_v3 on an H200: 2728-2772 fitted in fresh search trials (the trial only), then 2777-2763 each failed in
    # the steps after the trial; the walk stepped from one search fit to the next and ended after 7 checks with no
    # fit, B 2762 unverified (its timed run then failed). Here the batches train (trial and steps) up to 2700.
    search_fits = [2273, 2728, 2729, 2731, 2735, 2743, 2748, 2757, 2760, 2763, 2766, 2772]
    check = Flaky(2700, seconds=4.5)
    edge = confirm_edge(check, SearchResult(2772, 2777, "edge"), 6, fresh_fits=search_fits, repeat=2)
    assert (edge.max_batch, edge.verified, edge.fits_at_b, edge.fails) == (2700, True, 2, 2701)
    assert walked_seconds(check) <= EDGE_BUDGET_S
    assert check.calls[:6] == [2773, 2772, 2771, 2769, 2765, 2757]  # steps double past the search's fits


def test_search_fits_below_every_failure_still_bound_the_walk_down():
    # the walk from 105 never steps below 100, the search's fresh fit, while no check contradicts it
    check = Flaky(100)
    edge = confirm_edge(check, SearchResult(104, 105, "edge"), 6, fresh_fits=[100], repeat=1)
    assert min(check.calls) == 100 and edge.max_batch == 100


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("repeat", [1, 2, 3])
def test_whatever_a_flaky_edge_does_b_is_below_every_fresh_failure_and_holds_when_verified(seed, repeat):
    rng = random.Random(seed)
    solid = rng.randrange(50, 70)
    width = rng.randrange(1, 15)
    p = {b: rng.choice([0.2, 0.5, 0.8]) for b in range(solid + 1, solid + width + 1)}
    check = Flaky(solid, p=p, seed=seed, seconds=rng.choice([5.0, 9.0, 20.0]))
    edge = confirm_edge(check, claimed(rng.randrange(solid, solid + width + 2)), repeat=repeat)
    failed = {a.batch for a in edge.checks if not a.fits}
    assert not failed or edge.max_batch < min(failed), "B above a batch that failed in a fresh run"
    assert len(check.calls) <= CHECK_CAP_FACTOR * 6 + repeat - 1
    runs_at_b = [a for a in edge.checks if a.batch == edge.max_batch]
    assert edge.runs_at_b == len(runs_at_b) and edge.fits_at_b == sum(a.fits for a in runs_at_b)
    if edge.verified:
        assert edge.fits_at_b >= repeat and all(a.fits for a in runs_at_b)
        assert edge.max_batch + 1 in failed
    # once the edge is seen flaky, no new batch is run past the budget: only batches already run are run again
    assert new_batches_past_the_budget(check) == []


def new_batches_past_the_budget(check: Flaky) -> list[int]:
    """The batches a walk first ran after its runs had taken EDGE_BUDGET_S while a band was already seen."""
    spent, found = 0.0, []
    for i, batch in enumerate(check.calls):
        before = check.calls[:i]
        if spent >= EDGE_BUDGET_S and batch not in before and _band_seen(check, i):
            found.append(batch)
        spent += check.seconds
    return found


def _band_seen(check: Flaky, runs: int) -> bool:
    outcomes = check.outcomes[:runs]
    failed = [b for b, ok in outcomes if not ok]
    return bool(failed) and any(ok and b >= min(failed) for b, ok in outcomes)


def test_with_one_run_a_steady_edge_is_proven_as_before():
    # repeat=1 is the rule of files before schema 5: one fresh fit proves B
    check = Flaky(66)
    edge = confirm_edge(check, claimed(75), max_checks=12)
    assert check.calls == [76, 75, 74, 72, 68, 60, 64, 66, 67]
    assert (edge.max_batch, edge.repeat, edge.runs_at_b) == (66, 1, 1)


# --- the search over flaky trials -------------------------------------------------------------------------------


class FlakyTrials(FakeTrials):
    """try_batch for the search: linear peaks, batches above `solid` fit with probability p (seeded)."""

    def __init__(self, solid: int, width: int, p: float, seed: int) -> None:
        super().__init__(solid + width, linear())
        self.solid, self.p, self.draw = solid, p, random.Random(seed)

    def __call__(self, batch: int) -> Attempt:
        if self.solid < batch <= self.edge and self.draw.random() >= self.p:
            self.calls.append(batch)
            return Attempt(batch, OOM, message="fake flaky failure")
        return super().__call__(batch)


@pytest.mark.parametrize("seed", range(30))
def test_the_search_over_a_flaky_edge_ends_tries_no_batch_twice_and_answers_a_fit(seed):
    trials = FlakyTrials(solid=70, width=8, p=0.5, seed=seed)
    found = find_max_batch(trials, capacity_bytes=linear()(78))
    assert found.stop == "edge" and len(trials.calls) == len(set(trials.calls)) <= 20
    assert any(a.batch == found.max_batch and a.fits for a in found.attempts)
    assert found.max_batch >= 70 or found.first_failure <= 71


# --- the pipeline: one GPU and a group of ranks -----------------------------------------------------------------


def test_the_scan_runs_b_again_in_a_fresh_process_and_the_file_records_k_and_the_runs(tmp_path):
    world = World(75)
    result, progress, _ = run_scan(world, repeat=2)
    assert [(c.batch, c.outcome) for c in result.proof.checks] == [(76, OOM), (75, FIT), (75, FIT)]
    assert (result.max_batch, result.proof.repeat, result.proof.runs_at_b, result.proof.fits_at_b) == (75, 2, 2, 2)
    assert result.throughput.batch == 75
    assert "fresh runs: B 75, 2 of 2 fresh runs" in progress.notes
    assert len(world.workers) == 4  # the search's process and three fresh ones


class FlakyGroup(FakeGroup):
    """FakeGroup whose proof checks (fresh launches of one batch with the timed run) fit or fail by `script` first."""

    def __init__(self, script: dict[int, list[bool]]) -> None:
        super().__init__()
        self.script = {b: list(v) for b, v in script.items()}

    def __call__(self, req):
        result = super().__call__(req)
        batch = req.batches[0]
        if req.world_size > 1 and req.measure and self.script.get(batch):
            fits = self.script[batch].pop(0)
            result.attempts[0].outcome = FIT if fits else OOM
            result.measure = result.measure if fits else None
        return result


def test_on_several_gpus_each_repeat_is_a_fresh_process_group_and_a_flaky_b_moves_below_the_band():
    group = FlakyGroup({990: [True, False], 989: [False]})  # rank 1's edge is 990; fresh groups say otherwise
    result, _setup = scan_precision_distributed(
        TOY, "fp32", fake_group_opts(curve=False, repeat=2), 2, "ddp", RecordingProgress(), group
    )
    checks = [(c.batch, c.outcome) for c in result.proof.checks]
    assert checks[:4] == [(991, OOM), (990, FIT), (990, OOM), (989, OOM)]
    assert result.max_batch < 989 and result.proof.verified and result.proof.fits_at_b == 2
    launches = [r for r in group.requests if r.world_size == 2 and len(r.batches) == 1]
    assert len(launches) >= len(checks)  # every check was a launch of its own: a fresh process group
    assert result.proof.band.low <= 989 and result.proof.band.high == 990


# --- the records and their words --------------------------------------------------------------------------------


def test_the_proof_with_its_band_round_trips_through_a_result_file(tmp_path):
    check = Flaky(74, script={75: [True, False], 76: [False]})
    edge = confirm_edge(check, claimed(75), repeat=2)
    proof = proof_record(edge, claimed(75))
    assert proof.to_dict()["band"] == {
        "low": 75,
        "high": 75,
        "runs": [{"batch": 75, "fits": 1, "fails": 1}],
    }
    assert (proof.repeat, proof.runs_at_b, proof.fits_at_b, proof.ended_by) == (2, 2, 2, "edge")
    scan = make_result(precisions={"fp32": {"batch": 74}})
    scan.precisions["fp32"].proof = proof
    back = read_result(write_result(scan, tmp_path / "r.json"))
    assert back.schema_version == 5 and back.precisions["fp32"].proof == proof


def test_the_words_of_the_rule_for_new_and_old_files():
    proof = Proof(fits=7093, fails=7094, repeat=2, runs_at_b=2, fits_at_b=2)
    proof.band = Band(7094, 7100, [BandRun(7094, 1, 1), BandRun(7100, 1, 1)])
    assert edge_text(7093, proof) == "B 7093, 2 of 2 fresh runs; 7094-7100 flaky (7094: 1 of 2 fitted, 7100: 1 of 2)"
    assert edge_text(7093, proof, counts=False) == "B 7093, 2 of 2 fresh runs; 7094-7100 flaky"
    old = Proof.from_dict({"fits": 75, "fails": 76, "verified": True})
    assert (old.repeats, runs_text(old), band_text(old), edge_text(75, old)) == (1, "", "", "B 75")


def test_scan_takes_repeat_and_says_what_it_is():
    shown = CliRunner().invoke(main, ["scan", "--help"]).output
    assert "--repeat" in shown and "flaky band" in shown
    refused = CliRunner().invoke(main, ["scan", "-m", "toy", "--device", "cpu", "--repeat", "0"])
    assert refused.exit_code == 2 and "--repeat" in refused.output and "Traceback" not in refused.output
