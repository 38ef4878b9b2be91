"""scan_precision / scan_workload orchestration against fake trial processes (no torch, no subprocess).

The fake factory hands out workers whose edge can differ between the first trial of a process
(fresh) and later ones (in-process), and whose timed run can fail where the trial fitted, so the
search -> fresh proof -> throughput pipeline is checked cheaply and deterministically.
"""

from __future__ import annotations

import pytest

import memprobe.probe.pipeline
import memprobe.probe.scan
from conftest import RecordingProgress
from fakes import (
    PER_SAMPLE,
    STATIC,
    FakeFactory,
    FakePrediction,
    FakeWorker,
    World,
    assert_all_closed,
    run_scan,
    toy_workload,
)
from memprobe.core.process.protocol import Emulation
from memprobe.core.records.results import read_result
from memprobe.probe.scan import NoCudaError, ScanOptions, scan_workload


def checks_of(result):
    return [(c.batch, c.outcome) for c in result.proof.checks]


# --- the agreed case -----------------------------------------------------------------------


def test_scan_precision_agreed():
    world = World(75)
    result, progress, envs = run_scan(world)
    assert result.status == "done" and result.stop == "edge"
    assert result.max_batch == 75
    assert result.proof.agreed is True and result.proof.verified is True
    assert (result.proof.fits, result.proof.fails, result.proof.fail_outcome) == (75, 76, "oom")
    assert checks_of(result) == [(76, "oom"), (75, "fit")]
    assert result.capacity_bytes == world.capacity
    assert result.settings.weights_bytes == STATIC and result.settings.flags == {"x": 1}
    assert envs == [world.workers[0].info.environment]
    # the search ran in one process; each check in its own new one
    assert [w.number for w in world.workers] == [1, 2, 3]
    search_trials = [e for e in world.log if e[0] == "trial" and e[1] == 1]
    assert len(search_trials) == len(result.attempts)
    assert_all_closed(world)


def test_throughput_comes_from_the_process_that_proved_b():
    world = World(75)
    result, _, _ = run_scan(world, warmup=2, timed_steps=4)
    measures = [e for e in world.log if e[0] == "measure"]
    # B was timed once, in the fresh process right after its trial; no extra process for timing
    assert measures == [("measure", 3, 75, 1)]
    assert result.throughput.batch == 75
    assert result.throughput.outcome == "fit"
    assert result.throughput.samples_per_s == 150.0
    assert result.throughput.step_time["steps"] == 4
    assert len(world.workers) == 3
    # the proof's fit carries the larger peak of the trial and the timed run
    fit_check = result.proof.checks[1]
    assert fit_check.peak_allocated == STATIC + PER_SAMPLE * 75 + 1
    assert fit_check.peak_reserved == STATIC + PER_SAMPLE * 75 + 2
    assert "then in the same run 1 more warm-up + 4 timed steps" in result.proof.fit_check


def test_no_throughput_means_no_timed_runs():
    world = World(75, measure_edge=10)
    result, _, _ = run_scan(world, measure=False)
    assert result.max_batch == 75 and result.proof.agreed is True
    assert result.throughput is None
    assert not [e for e in world.log if e[0] == "measure"]
    assert "timed" not in result.proof.fit_check


# --- the fresh edge differs -------------------------------------------------------------------


def test_fresh_edge_one_higher():
    world = World(75, fresh_edge=76)
    result, progress, _ = run_scan(world)
    assert result.max_batch == 76
    assert result.proof.agreed is False and result.proof.verified is True
    assert result.proof.search.to_dict() == {"fits": 75, "fails": 76}
    assert checks_of(result) == [(76, "fit"), (77, "oom")]
    assert result.throughput.batch == 76
    assert any("moved the edge" in n for n in progress.notes)
    assert_all_closed(world)


def test_fresh_edge_one_lower():
    world = World(75, fresh_edge=74)
    result, _, _ = run_scan(world)
    assert result.max_batch == 74
    assert checks_of(result) == [(76, "oom"), (75, "oom"), (74, "fit")]
    assert result.proof.verified is True and result.proof.agreed is False
    assert result.throughput.batch == 74


def test_the_search_process_fitting_far_above_the_fresh_edge_is_proven_and_said():
    # the H200's bert-large-squad fp16 inference: the search's process fit 9412, fresh processes fit only up to
    # 9405; the checks walk down past the check limit of 6 to prove 9405 and 9406, and the result says why
    world = World(9412, fresh_edge=9405)
    result, progress, _ = run_scan(world, measure=False)
    assert checks_of(result) == [
        (9413, "oom"),
        (9412, "oom"),
        (9411, "oom"),
        (9409, "oom"),
        (9405, "fit"),
        (9407, "oom"),
        (9406, "oom"),
    ]
    assert (
        result.max_batch == 9405 and result.proof.verified and (result.proof.fits, result.proof.fails) == (9405, 9406)
    )
    record = result.proof.non_monotone
    assert record["search_fits"] == [9412] and record["fails"] == [9406, 9407, 9409, 9411, 9412]
    assert record["note"] in progress.notes and "B = 9405 fits fresh and 9406 fails fresh" in record["note"]


def test_timed_run_failure_at_b_lowers_the_answer():
    # the H100 case: B completes the 3-step trial fresh, then runs out of memory in the timed run
    world = World(75, measure_edge=74)
    result, _, _ = run_scan(world, warmup=3, timed_steps=10)
    assert result.max_batch == 74
    assert checks_of(result) == [(76, "oom"), (75, "oom"), (74, "fit")]
    failed = result.proof.checks[1]
    assert "failed at step 3 of the 11 steps that followed it" in failed.message
    assert "fragmentation" in failed.message
    assert failed.peak_reserved == STATIC + PER_SAMPLE * 75 + 7
    assert result.proof.fails == 75 and result.proof.fail_outcome == "oom"
    assert result.throughput.batch == 74 and result.throughput.outcome == "fit"
    assert_all_closed(world)


# --- Ctrl-C ------------------------------------------------------------------------------------


def ctrl_c_at_trial(monkeypatch, at: int) -> None:
    """Make the fake workers' trial at batch `at` raise KeyboardInterrupt, as a Ctrl-C during it would."""
    original = FakeWorker.trial

    def interrupted(self, batch, steps, keep=False, decode_steps=None):
        if batch == at:
            raise KeyboardInterrupt
        return original(self, batch, steps, keep, decode_steps)

    monkeypatch.setattr(FakeWorker, "trial", interrupted)


@pytest.mark.parametrize("forks", [False, True])
def test_ctrl_c_during_a_trial_kills_its_process_at_once(forks, monkeypatch):
    # waiting politely would let a trial or timed run go on for its remaining steps (the H100
    # pix2pixhd fp32 scan was SIGKILLed 10 s after its interrupt)
    world = World(75)
    ctrl_c_at_trial(monkeypatch, 16)
    with pytest.raises(KeyboardInterrupt):
        run_scan(world, forks=forks)
    assert getattr(world.workers[-1], "killed", False), "the process running the interrupted trial was killed"
    assert_all_closed(world)


def test_ctrl_c_during_the_timed_run_kills_its_process(monkeypatch):
    world = World(75)
    monkeypatch.setattr(FakeWorker, "measure", lambda self, *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        run_scan(world, forks=True)
    assert getattr(world.workers[-1], "killed", False)
    assert_all_closed(world)


# --- with a fork server: search trials after the first two run fresh ---------------------------


def test_forking_search_runs_near_edge_trials_fresh_and_reuses_them_as_proof():
    world = World(75, fresh_edge=75)
    result, progress, _ = run_scan(world, forks=True, measure=False)
    assert result.max_batch == 75
    assert [a.fresh for a in result.attempts[:2]] == [False, False]  # batch 1 and 2 share the first process
    assert all(a.fresh for a in result.attempts[2:])
    assert result.proof.verified is True and result.proof.agreed is True
    assert sorted(result.proof.reused_from_search) == [75, 76]
    assert checks_of(result) == [(76, "oom"), (75, "fit")]
    trials = [e for e in world.log if e[0] == "trial"]
    assert len(trials) == len(result.attempts)  # nothing ran twice
    assert {b for _, number, b in trials if number == 1} == {1, 2}  # later trials: one process each
    assert len({number for _, number, _ in trials}) == len(result.attempts) - 1
    assert [fresh for _, _, fresh in progress.starts] == [False, False] + [True] * (len(result.attempts) - 2)
    assert_all_closed(world)
    # every trial carries when it ended on the precision's timeline, in the order they ran
    stamps = [a.done_at_s for a in result.attempts] + [c.done_at_s for c in result.proof.checks]
    assert all(isinstance(s, float) for s in stamps)
    assert [a.done_at_s for a in result.attempts] == sorted(a.done_at_s for a in result.attempts)


def test_forking_search_keeps_trials_far_below_the_edge_in_the_shared_process():
    world = World(1000)  # capacity 11 MB: peaks under 5.5 MB (batch < 450) are far from the edge
    result, _, _ = run_scan(world, forks=True, measure=False)
    assert result.max_batch == 1000 and result.proof.agreed is True
    for a in result.attempts:
        assert a.fresh == (a.batch > 450 and a.batch not in (1, 2)), a
    assert any(not a.fresh and a.batch > 2 for a in result.attempts)  # e.g. the 8x step to 16
    assert sorted(result.proof.reused_from_search) == [1000, 1001]


def test_forking_search_finds_the_fresh_edge_directly():
    # in-process the edge would read 75, fresh it is 76: fresh search trials never see the in-process edge
    world = World(75, fresh_edge=76, capacity=STATIC + PER_SAMPLE * 76)
    result, progress, _ = run_scan(world, forks=True, measure=False)
    assert result.max_batch == 76 and result.proof.agreed is True
    assert result.proof.search.to_dict() == {"fits": 76, "fails": 77}
    assert not any("moved the edge" in n for n in progress.notes)


def test_forking_search_times_fresh_fits_that_could_be_b_and_the_proof_runs_nothing_again():
    world = World(75, measure_edge=74)
    result, _, _ = run_scan(world, forks=True, warmup=3, timed_steps=10)
    # 16: fresh, far below the model's edge, the trial alone; 75: the model's edge, so its fit went on to the
    # timed run, which failed (a failure like the proof's); 74, just below that failure, trains throughout
    assert [(a.batch, a.outcome, a.fresh, a.timed_steps) for a in result.attempts] == [
        (1, "fit", False, None),
        (2, "fit", False, None),
        (16, "fit", True, None),
        (75, "oom", True, None),
        (74, "fit", True, 10),
    ]
    assert "failed at step 3 of the 11 steps that followed it" in result.attempts[3].message
    assert result.max_batch == 74 and result.proof.verified and result.proof.agreed
    assert result.proof.reused_from_search == [75, 74]
    assert checks_of(result) == [(75, "oom"), (74, "fit")]
    # no batch size was built twice: one process per fresh trial, nothing re-run for the proof or the timing
    trials = [e[2] for e in world.log if e[0] == "trial"]
    assert trials == [1, 2, 16, 75, 74]
    assert [e[2] for e in world.log if e[0] == "measure"] == [75, 74]
    assert result.throughput.batch == 74 and result.throughput.outcome == "fit"
    assert len(world.workers) == 4
    assert_all_closed(world)


def test_a_fresh_fit_of_b_that_was_not_timed_is_re_run_by_the_proof_with_its_timed_run():
    # the capacity says 90 fit, so the model puts the edge above 75 when 75 fits (and 76 has not failed yet):
    # the search's fresh trial at 75 is the trial alone, and B's proof runs it again with the timed run
    world = World(75, capacity=STATIC + PER_SAMPLE * 90)
    result, _, _ = run_scan(world, forks=True, warmup=3, timed_steps=10)
    assert result.max_batch == 75 and result.proof.verified
    fits = {a.batch: a.timed_steps for a in result.attempts if a.fresh and a.outcome == "fit"}
    assert fits[75] is None  # the search's trial at 75 was the trial alone
    assert 75 not in result.proof.reused_from_search and 76 in result.proof.reused_from_search
    assert checks_of(result)[-1] == (75, "fit") and result.proof.checks[-1].timed_steps == 10
    assert result.throughput.batch == 75
    assert [e[2] for e in world.log if e[0] == "measure"].count(75) == 1
    assert_all_closed(world)


def test_cap_reached_is_checked_and_timed():
    world = World(10**6, capacity=None)
    result, _, _ = run_scan(world, max_batch=50)
    assert result.stop == "cap" and result.max_batch == 50
    assert checks_of(result) == [(50, "fit")]
    assert result.proof.fails is None and result.proof.verified is True
    assert result.throughput.batch == 50


# --- a predicted start that comes late or never (the prediction is polled, never waited for) -------------


class FakeStart:
    """PredictedStart's hint_for, with a prediction that comes after `after` polls (never, when None)."""

    def __init__(self, batch: int, after: int | None) -> None:
        self.batch, self.after = batch, after
        self.asked: list[tuple[str, float]] = []

    def hint_for(self, precision, capacity_bytes, settings, note, started_at):
        from memprobe.probe.hint import PrecisionHint

        self.asked.append((precision, capacity_bytes))
        self.prediction = FakePrediction(
            None if self.after is None else {"precision": precision, "max_batch": self.batch, "at": started_at + 7.0},
            self.after or 0,
        )
        return PrecisionHint(self.prediction, settings, note, started_at)


def test_a_prediction_that_comes_late_is_tried_then_and_its_fit_is_the_proof_and_the_throughput():
    # the capacity says 80 fit, the edge is 75; the prediction (75) comes after the search's failure at 80
    world = World(75, capacity=STATIC + PER_SAMPLE * 80)
    start = FakeStart(75, after=4)  # polled at its creation, after batch 1, then before 16 and 80
    result, progress, _ = run_scan(world, forks=True, start=start, warmup=3, timed_steps=10)
    assert [a.batch for a in result.attempts] == [1, 2, 16, 80, 75, 76]
    assert result.settings.predicted_start == {
        "precision": "fp32",
        "max_batch": 75,
        "arrived_s": 7.0,
        "after_trials": 4,
        "used": True,
        "why": "",
    }
    assert any(n.endswith("came 7 s into the precision, after 4 trials: tried next") for n in progress.notes)
    assert result.max_batch == 75 and result.proof.verified and result.proof.reused_from_search == [76, 75]
    assert result.attempts[4].fresh and result.attempts[4].timed_steps == 10  # the predicted batch was timed
    assert [e[2] for e in world.log if e[0] == "measure"] == [75] and result.throughput.batch == 75
    assert len([e for e in world.log if e[0] == "trial"]) == 6  # nothing run again for the proof
    assert start.prediction.polls == 5 and start.asked == [("fp32", world.capacity)]


def test_a_prediction_that_never_comes_costs_the_scan_nothing_and_is_recorded():
    world = World(75, capacity=STATIC + PER_SAMPLE * 80)
    plain, _, _ = run_scan(World(75, capacity=STATIC + PER_SAMPLE * 80), forks=True, measure=False)
    start = FakeStart(75, after=None)
    result, progress, _ = run_scan(world, forks=True, start=start, measure=False)
    assert [a.batch for a in result.attempts] == [a.batch for a in plain.attempts]
    assert start.prediction.polls == len(result.attempts) + 1  # each decision point, and once at the end
    assert result.settings.predicted_start["used"] is False and result.settings.predicted_start["arrived_s"] is None
    assert progress.notes[0].startswith("no predicted start: no prediction before the search ended")


# --- failures before or during the search -----------------------------------------------------


def test_model_that_does_not_fit_at_all():
    result, _, _ = run_scan(World(75, setup_error="oom"))
    assert result.status == "done"
    assert result.max_batch == 0 and result.stop == "nothing-fits"
    assert "setup failed" in result.error


def test_no_cuda_raises():
    with pytest.raises(NoCudaError):
        run_scan(World(75, setup_error="no_cuda"))


def test_setup_error_is_an_error_result():
    result, _, _ = run_scan(World(75, setup_error="error"))
    assert result.status == "error" and result.max_batch is None
    assert "setup failed" in result.error


def test_error_during_search_is_an_error_result():
    world = World(75, outcomes={16: "error"})
    result, _, _ = run_scan(world)
    assert result.status == "error" and result.stop == "error"
    assert result.max_batch is None
    assert result.error == "forced error"
    assert result.proof is None and result.to_dict()["proof"] == {}
    assert len(world.workers) == 1, "no fresh checks after an error"
    assert_all_closed(world)


def test_crash_replaces_the_search_process():
    world = World(75, outcomes={b: "crash" for b in range(76, 200)})
    result, _, _ = run_scan(world)
    assert result.max_batch == 75 and result.proof.agreed is True
    crashes = [a for a in result.attempts if a.outcome == "crash"]
    assert crashes
    # every crash ended its process: the trial after it ran in a new one
    search_workers = {e[1] for e in world.log if e[0] == "trial"} - {w.number for w in world.workers[-2:]}
    assert len(search_workers) == 1 + len(crashes) - (1 if result.attempts[-1].outcome == "crash" else 0)
    assert_all_closed(world)


def test_requested_batches_are_timed_in_fresh_processes():
    world = World(75)
    result, progress, _ = run_scan(world, batches=[8, 500])
    assert [(e.batch, e.outcome) for e in result.extra_batches] == [(8, "fit"), (500, "oom")]
    measures = [e for e in world.log if e[0] == "measure" and e[2] in (8, 500)]
    assert [e[3] for e in measures] == [0, 0], "timed in processes that ran nothing before"
    assert sum("requested batch" in n for n in progress.notes) == 2
    assert_all_closed(world)


def test_a_requested_batch_timed_fresh_already_is_not_built_again():
    world = World(75)
    result, progress, _ = run_scan(world, forks=True, batches=[75, 8])
    assert [(e.batch, e.outcome) for e in result.extra_batches] == [(75, "fit"), (8, "fit")]
    assert [e[2] for e in world.log if e[0] == "measure"] == [75, 8]  # 75: the timed run of its fresh search trial
    assert result.extra_batches[0] == result.throughput and result.extra_batches[0] is not result.throughput
    assert "requested batch 75: the timed run of its fresh trial" in progress.notes
    assert_all_closed(world)


# --- scan_workload with the fake factory ------------------------------------------------------


def test_scan_workload_writes_after_each_precision(monkeypatch, tmp_path):
    world = World(75)
    factories = []

    def make_factory(workload, env=None):
        factories.append(FakeFactory(world))
        return factories[-1]

    saved = []
    real_write = memprobe.probe.pipeline.write_result  # the one writer of result files
    monkeypatch.setattr(memprobe.probe.scan, "WorkerFactory", make_factory)
    monkeypatch.setattr(
        memprobe.probe.pipeline,
        "write_result",
        lambda result, path: saved.append(sorted(result.precisions)) or real_write(result, path),
    )
    opts = ScanOptions(precisions=["fp32", "bf16"], device="cpu", cpu_budget_bytes=world.capacity)
    progress = RecordingProgress()
    result, path = scan_workload(toy_workload(), opts, tmp_path, progress)
    assert saved[:2] == [["fp32"], ["bf16", "fp32"]]
    assert path.name.startswith("fake-gpu-9000_toy_train_")
    assert list(tmp_path.iterdir()) == [path]
    data = read_result(path)
    assert data.status == "complete"
    assert {k: p.max_batch for k, p in data.precisions.items()} == {"fp32": 75, "bf16": 75}
    assert data.gpu_name() == "Fake GPU 9000"  # the trial process's view was merged in
    assert data.environment.hostname is not None  # next to the host's
    assert progress.precisions == [("toy", "fp32"), ("toy", "bf16")]
    assert factories[0].closed


def test_scan_workload_no_cuda_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(
        memprobe.probe.scan, "WorkerFactory", lambda workload, env=None: FakeFactory(World(75, setup_error="no_cuda"))
    )
    opts = ScanOptions(precisions=["fp32"], device="cpu", cpu_budget_bytes=1)
    with pytest.raises(NoCudaError):
        scan_workload(toy_workload(), opts, tmp_path, RecordingProgress())
    assert list(tmp_path.iterdir()) == []


def test_mfu_against_the_catalog_peak_of_a_known_gpu():
    from memprobe.core.cards.catalog import peak_tflops

    world = World(gpu="NVIDIA H100 80GB HBM3", flops_per_sample=1e12)
    result, _, _ = run_scan(world)
    t = result.throughput
    assert result.settings.flops_per_sample == 1e12
    # the fake timed run: batch 75 at a 0.5 s median step -> 150 samples/s -> 150 TFLOP/s achieved
    assert t.achieved_tflops == pytest.approx(150.0)
    assert t.peak_tflops == peak_tflops("NVIDIA H100 80GB HBM3", "fp32") == pytest.approx(67.0)
    assert t.mfu == pytest.approx(150.0 / 67.0)


def test_mfu_absent_with_a_reason_for_an_unknown_gpu_or_no_flop_count():
    result, _, _ = run_scan(World(flops_per_sample=1e9))
    assert result.throughput.mfu is None
    assert "Fake GPU 9000" in result.throughput.mfu_note
    result, _, _ = run_scan(World(gpu="NVIDIA H100 80GB HBM3"))
    assert result.throughput.mfu is None and "no FLOP count" in result.throughput.mfu_note


def test_an_emulated_scan_is_labelled_and_keeps_the_real_chip_for_mfu(tmp_path, monkeypatch):
    world = World(
        gpu="NVIDIA H100 80GB HBM3",
        flops_per_sample=1e12,
        emulation=Emulation(24 * 2**30, 2**29, 24 * 2**30 - 2**29),
    )
    monkeypatch.setattr(memprobe.probe.scan, "WorkerFactory", lambda workload, env=None: FakeFactory(world))
    monkeypatch.setattr(memprobe.probe.scan, "host_environment", lambda seen=None: {"driver": "fake"})
    opts = ScanOptions(precisions=["fp32"], device="cpu", cpu_budget_bytes=world.capacity)
    result, path = memprobe.probe.scan.scan_workload(toy_workload(), opts, tmp_path, RecordingProgress())
    gpu = result.environment.gpu
    assert gpu.name == "NVIDIA H100 80GB HBM3 [emulated 24 GiB cap]"
    assert gpu.real_name == "NVIDIA H100 80GB HBM3" and gpu.emulated_total_bytes == 24 * 2**30
    assert result.environment.emulation["memory_cap_bytes"] == 24 * 2**30
    assert "emulated-24-gib-cap" in path.name
    assert result.precisions["fp32"].throughput.peak_tflops == pytest.approx(67.0)  # the H100's own peak


def test_ctrl_c_in_the_first_precisions_search_keeps_its_trials_so_far(monkeypatch, tmp_path):
    # nothing finished but the trials: they are written, marked partial, as a multi-GPU scan does
    world = World(75)
    ctrl_c_at_trial(monkeypatch, 16)
    monkeypatch.setattr(memprobe.probe.scan, "WorkerFactory", lambda workload, env=None: FakeFactory(world))
    opts = ScanOptions(precisions=["fp32", "bf16"], device="cpu", cpu_budget_bytes=world.capacity, curve=False)
    with pytest.raises(memprobe.probe.scan.ScanInterrupted) as stopped:
        scan_workload(toy_workload(), opts, tmp_path, RecordingProgress())
    data = read_result(stopped.value.path)
    assert data.status == "partial" and list(data.precisions) == ["fp32"]
    p = data.precisions["fp32"]
    assert p.status == "interrupted" and p.settings.interrupted_at == "search" and p.max_batch is None
    assert [a.batch for a in p.attempts][:2] == [1, 2] and all(a.batch != 16 for a in p.attempts)
    assert_all_closed(world)
