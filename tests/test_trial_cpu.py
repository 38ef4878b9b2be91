"""The real trial runner on the CPU with the toy workload and the fake allocator (memprobe.training.cpu_memory).

In-process through memprobe.probe.child.worker.Session, as a subprocess through memprobe.probe.runner.Worker, and a
whole scan through memprobe.probe.scan.scan_workload. Each worker process costs seconds (it imports
torch), so the expensive pieces are module-scoped.
"""

from __future__ import annotations

import gc
import os
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest

torch = pytest.importorskip("torch")

from conftest import RecordingProgress  # noqa: E402
from fakes import TOY_CPU_BUDGET  # noqa: E402
from memprobe.core.process.protocol import (  # noqa: E402
    Failure,
    FlopsRequest,
    MeasureRequest,
    Ready,
    Request,
    SetupRequest,
    TrialRequest,
    TrialSettings,
)
from memprobe.core.records.results import read_result  # noqa: E402
from memprobe.probe.child.worker import Session  # noqa: E402
from memprobe.probe.runner import Worker, WorkerError, WorkerSpec  # noqa: E402
from memprobe.probe.scan import ScanOptions, scan_workload  # noqa: E402
from memprobe.training.cpu_memory import LiveBytes  # noqa: E402

HUGE = 200_000  # ~50 MB of inputs alone: far over the budget
TOY_MODULE = "memprobe.workloads.toy"


def worker_children() -> list[int]:
    """Live child processes of this test process that run memprobe.probe.child.worker."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) != os.getpid() or fields[0] == "Z":
                continue
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError, ValueError):
            continue
        if b"memprobe.probe.child.worker" in cmdline:
            found.append(int(stat.parent.name))
    return found


def worker_logs() -> set[str]:
    """Trial-process and fork-server logs in the temp folder this process uses."""
    folder = Path(tempfile.gettempdir())
    return {p.name for pattern in ("memprobe-worker-*.log", "memprobe-zygote-*.log") for p in folder.glob(pattern)}


# --- in-process: memprobe.probe.child.worker.Session ---------------------------------------------------------


@pytest.fixture
def session(toy):
    s = Session()
    info = s.setup(SetupRequest(toy, "fp32", "train", "cpu", TOY_CPU_BUDGET))
    assert isinstance(info, Ready), info
    s.info = info
    yield s
    # Session.setup enters the fake allocator for the life of the process: leave it, so later tests run without it
    s.close()


def trial(session, batch, steps=3):
    return session.trial(TrialRequest(batch=batch, steps=steps)).to_dict()


def test_session_setup_reports_the_cpu_environment(session):
    info = session.info
    assert info.capacity_bytes == TOY_CPU_BUDGET
    assert 0 < info.weights_bytes < TOY_CPU_BUDGET
    assert info.environment["device_type"] == "cpu"
    assert info.environment["gpu"]["name"] == "cpu"
    assert info.environment["flags"]["matmul_allow_tf32"] is False  # fp32 means TF32 off
    assert info.environment["flags"]["set_in_trial_process"] == {
        "backends.cudnn.benchmark": False,
        "backends.cuda.matmul.allow_tf32": False,
        "backends.cudnn.allow_tf32": False,
    }
    assert info.task["parameters"] > 0
    assert info.unit == "samples"


@pytest.mark.parametrize("precision, tf32", [("fp32", False), ("tf32", True), ("bf16", None), ("fp16", None)])
def test_a_trial_process_makes_its_torch_settings_and_reads_them_back(precision, tf32):
    from memprobe.probe.child.worker import apply_precision_flags

    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    try:
        applied = apply_precision_flags(precision, cudnn_benchmark=True)
        expected = {"backends.cudnn.benchmark": True}
        if tf32 is not None:  # fp16/bf16 keep PyTorch's TF32 defaults
            expected |= {"backends.cuda.matmul.allow_tf32": tf32, "backends.cudnn.allow_tf32": tf32}
            assert torch.backends.cuda.matmul.allow_tf32 is tf32 and torch.backends.cudnn.allow_tf32 is tf32
        assert applied == expected and torch.backends.cudnn.benchmark is True
    finally:
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark) = (
            before
        )


def test_small_batch_fits_with_peaks(session):
    a = trial(session, 16)
    assert a["outcome"] == "fit", a
    assert a["batch"] == 16
    assert a["message"] == ""
    assert a["peak_allocated"] == a["peak_reserved"]
    # at least weights + grads + two AdamW moments, and within the budget
    assert 4 * session.info.weights_bytes <= a["peak_allocated"] <= TOY_CPU_BUDGET
    assert a["seconds"] >= 0


def test_peak_grows_with_batch(session):
    small, large = trial(session, 16), trial(session, 600)
    assert small["outcome"] == large["outcome"] == "fit"
    assert large["peak_allocated"] > small["peak_allocated"]


def test_huge_batch_is_an_oom_from_the_fake_allocator(session):
    a = trial(session, HUGE)
    assert a["outcome"] == "oom", a
    assert "memprobe fake allocator" in a["message"]
    assert a["message"].startswith("OutOfMemoryError")
    assert a["peak_allocated"] > TOY_CPU_BUDGET


def test_after_an_oom_a_small_batch_fits_with_the_same_peak(session):
    before = trial(session, 16)
    live_before = session.memory.cpu.current
    assert trial(session, HUGE)["outcome"] == "oom"
    after = trial(session, 16)
    assert after["outcome"] == "fit", after
    assert after["peak_allocated"] == pytest.approx(before["peak_allocated"], rel=0.03)
    # nothing from the failed trial stays alive (the exception's traceback held its tensors)
    session.memory.reset()
    assert session.memory.cpu.current == pytest.approx(live_before, rel=0.03)


def test_repeated_trials_are_deterministic(session):
    peaks = [trial(session, 300)["peak_allocated"] for _ in range(2)]
    assert peaks[0] == peaks[1]


def test_session_measure(session):
    m = session.measure(MeasureRequest(batch=32, warmup=1, steps=3)).to_dict()
    assert m["outcome"] == "fit", m
    assert m["samples_per_s"] > 0 and m["units_per_s"] == pytest.approx(m["samples_per_s"])
    assert m["step_time"]["steps"] == 3
    assert m["step_time"]["min_s"] <= m["step_time"]["median_s"] <= m["step_time"]["max_s"]
    assert m["unit"] == "samples"


def test_session_measure_times_the_first_step_apart(session):
    m = session.measure(MeasureRequest(batch=32, warmup=1, steps=3)).to_dict()
    assert m["first_step_seconds"] > 0
    assert "compile_seconds" not in m  # eager: nothing compiled, nothing to report


def test_timed_steps_go_on_from_a_kept_trial_without_rebuilding(session):
    # A fit kept with "keep" leaves its optimizer state and batch in place: the timed steps that "continue"
    # from it build nothing new, so the live bytes at their start are the trial's, and the peak covers both.
    live = session.memory.cpu.current
    attempt = session.trial(TrialRequest(batch=64, steps=3, keep=True)).to_dict()
    assert attempt["outcome"] == "fit"
    assert session.memory.cpu.current > live  # optimizer state and the batch are still alive
    m = session.measure(MeasureRequest(batch=64, warmup=1, steps=3, cont=True)).to_dict()
    assert m["outcome"] == "fit" and m["continued_from_trial"] is True, m
    assert m["peak_allocated"] >= attempt["peak_allocated"]
    assert session.memory.cpu.current == live  # everything released at the end, as after any timed run


def test_a_kept_trial_is_released_when_no_timed_run_goes_on_from_it(session):
    live = session.memory.cpu.current
    assert trial(session, 64, 3) and session.trial(TrialRequest(batch=64, steps=3, keep=True)).outcome == "fit"
    # another batch size: not a continuation, so the kept state is dropped and the run is built afresh
    m = session.measure(MeasureRequest(batch=32, warmup=1, steps=2, cont=True)).to_dict()
    assert m["outcome"] == "fit" and m["continued_from_trial"] is False
    assert session.memory.cpu.current == live
    assert session.trial(TrialRequest(batch=16, steps=3, keep=True)).outcome == "fit"
    assert trial(session, 16)["outcome"] == "fit" and session.memory.cpu.current == live


def test_a_kept_trial_that_fails_keeps_nothing(session):
    live = session.memory.cpu.current
    assert session.trial(TrialRequest(batch=HUGE, steps=3, keep=True)).outcome == "oom"
    assert session.kept is None and session.memory.cpu.current == live


def test_setup_freezes_the_built_model_and_trials_still_free_everything(toy):
    # Frozen objects are skipped by gc.collect (run twice per trial), but never collected: the model
    # is frozen once at setup, and what a trial makes must still be freed when it ends.
    gc.unfreeze()
    s = Session()
    info = s.setup(SetupRequest(toy, "fp32", "train", "cpu", TOY_CPU_BUDGET))
    try:
        assert isinstance(info, Ready), info
        frozen = gc.get_freeze_count()
        assert frozen > 0
        live = s.memory.cpu.current
        assert s.trial(TrialRequest(batch=64, steps=3)).outcome == "fit"
        assert gc.get_freeze_count() <= frozen  # frozen objects can still die by reference count
        assert s.memory.cpu.current == live
    finally:
        s.close()


def test_close_leaves_the_fake_allocator_and_can_be_called_twice(toy):
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    before = len(_get_current_dispatch_mode_stack())
    s = Session()
    s.close()  # before setup: nothing to leave
    assert isinstance(s.setup(SetupRequest(toy, "fp32", "train", "cpu", TOY_CPU_BUDGET)), Ready)
    assert s.trial(TrialRequest(batch=8, steps=3, keep=True)).outcome == "fit"
    assert len(_get_current_dispatch_mode_stack()) == before + 1
    s.close()
    assert len(_get_current_dispatch_mode_stack()) == before and s.task is None and s.kept is None
    s.close()
    assert len(_get_current_dispatch_mode_stack()) == before


def test_compile_setting_compiles_and_reports_compile_time(toy):
    s = Session()
    info = s.setup(SetupRequest(toy, "fp32", "train", "cpu", TOY_CPU_BUDGET, TrialSettings(compile=True)))
    try:
        assert isinstance(info, Ready), info
        assert info.task["compiled"] == [type(s.task.model).__name__]
        assert s.trial(TrialRequest(batch=8, steps=3)).outcome == "fit"
        m = s.measure(MeasureRequest(batch=8, warmup=1, steps=3)).to_dict()
        assert m["outcome"] == "fit", m
        assert m["compile_seconds"] == pytest.approx(
            max(0.0, m["first_step_seconds"] - m["step_time"]["median_s"]), abs=1e-3
        )
        assert s.flops(FlopsRequest(batch=1)).flops_per_sample > 0  # counted on the eager step
    finally:
        s.close()


def test_session_measure_oom_is_reported_not_raised(session):
    m = session.measure(MeasureRequest(batch=HUGE, warmup=1, steps=2)).to_dict()
    assert m["outcome"] == "oom"
    assert "memprobe fake allocator" in m["error"]
    assert trial(session, 16)["outcome"] == "fit"


def test_live_bytes_counts_and_frees_storage():
    with LiveBytes(budget_bytes=None) as tracker:
        start = tracker.current
        x = torch.empty(1000, dtype=torch.float32)
        assert tracker.current - start == 4000
        del x
        tracker.reset_peak()
        assert tracker.current == start
        assert tracker.peak == start


def test_live_bytes_raises_oom_above_budget():
    with LiveBytes(budget_bytes=10_000) as tracker:
        torch.empty(1000)  # 4000 bytes: fine
        with pytest.raises(torch.OutOfMemoryError, match="memprobe fake allocator"):
            keep = [torch.empty(1000) for _ in range(4)]  # noqa: F841
        assert tracker.peak > 10_000


# --- a real worker subprocess: memprobe.probe.runner.Worker ---------------------------------------------


@pytest.fixture(scope="module")
def toy_spec(toy):
    return WorkerSpec(toy, "fp32", "train", "cpu", TOY_CPU_BUDGET, timeout_s=120)


@pytest.fixture(scope="module")
def worker(toy_spec):
    w = Worker(TOY_MODULE)
    if not torch.cuda.is_available():
        # a setup the process refuses leaves it usable for the next setup
        with pytest.raises(WorkerError) as info:
            w.setup(WorkerSpec(toy_spec.workload, "fp32", device="cuda", timeout_s=120))
        assert info.value.kind == "no_cuda"
    w.setup(toy_spec)
    yield w
    w.close()


def test_worker_setup(worker):
    assert worker.alive
    assert isinstance(worker.info, Ready)
    assert worker.info.capacity_bytes == TOY_CPU_BUDGET
    assert worker.info.environment["device_type"] == "cpu"


def test_worker_trial_fit_and_oom(worker):
    fit = worker.trial(16, 3)
    assert fit.outcome == "fit" and fit.fits
    assert fit.batch == 16 and fit.peak_allocated and fit.peak_reserved
    assert fit.fresh is False
    oom = worker.trial(HUGE, 3)
    assert oom.outcome == "oom"
    assert "memprobe fake allocator" in oom.message
    again = worker.trial(16, 3)
    assert again.fits and again.peak_allocated == pytest.approx(fit.peak_allocated, rel=0.03)
    assert worker.alive


def test_worker_measure(worker):
    m = worker.measure(64, 1, 3)
    assert m.outcome == "fit", m
    assert m.batch == 64
    assert m.samples_per_s > 0
    assert m.step_time["steps"] == 3 and m.step_time["median_s"] > 0


def test_worker_unknown_op(worker):
    @dataclass
    class Dance(Request):
        op: ClassVar[str] = "dance"

    answer = worker.request(Dance(), 30)
    assert answer == Failure("error", "unknown op 'dance'")
    assert worker.alive


def test_dead_and_hung_workers_become_crash_and_timeout(toy_spec):
    dead = Worker(TOY_MODULE)
    dead.kill()
    with pytest.raises(WorkerError) as info:
        dead.setup(toy_spec)
    assert info.value.kind == "crash"
    attempt = dead.trial(4, 3)
    assert attempt.outcome == "crash" and "died" in attempt.message
    assert dead.measure(4, 1, 2).outcome == "crash"
    dead.close()
    assert dead.child.log_path is not None and not dead.child.log_path.exists()

    slow = Worker(TOY_MODULE)
    try:
        slow.setup(WorkerSpec(toy_spec.workload, "fp32", "train", "cpu", None, timeout_s=120))
        slow.spec.timeout_s = 0.05  # far below one trial at this batch
        attempt = slow.trial(20_000, 3)
        assert attempt.outcome == "timeout"
        assert not slow.alive, "a trial past its time limit must be killed"
    finally:
        slow.close()
    assert not slow.alive


# --- the whole scan on the CPU: memprobe.probe.scan.scan_workload -------------------------------------


@pytest.fixture(scope="module")
def scanned(toy, tmp_path_factory):
    out = tmp_path_factory.mktemp("scan-out")
    progress = RecordingProgress()
    opts = ScanOptions(precisions=["fp32"], device="cpu", cpu_budget_bytes=TOY_CPU_BUDGET, timed_steps=2)
    # A private temp folder: other processes on the machine may be writing worker logs to /tmp.
    private = tmp_path_factory.mktemp("tmp")
    saved, tempfile.tempdir = tempfile.tempdir, str(private)
    try:
        logs_before, children_before = worker_logs(), set(worker_children())
        started = time.monotonic()
        result, path = scan_workload(toy, opts, out, progress)
        new_logs = worker_logs() - logs_before
    finally:
        tempfile.tempdir = saved
    return SimpleNamespace(
        result=result,
        path=path,
        out=out,
        progress=progress,
        opts=opts,
        seconds=time.monotonic() - started,
        new_logs=new_logs,
        new_children=set(worker_children()) - children_before,
    )


@pytest.mark.slow
def test_scan_writes_one_result_file(scanned):
    assert scanned.path is not None and scanned.path.exists()
    assert list(scanned.out.iterdir()) == [scanned.path]
    assert scanned.path.name.startswith("cpu_toy_train_") and scanned.path.suffix == ".json"
    on_disk = read_result(scanned.path)
    assert on_disk.to_dict() == scanned.result.to_dict()
    assert on_disk.status == "complete"
    assert on_disk.workload.name == "toy"
    assert on_disk.environment.device_type == "cpu"
    assert on_disk.gpu_name() == "cpu"
    assert on_disk.settings.cpu_budget_bytes == TOY_CPU_BUDGET
    assert on_disk.settings.precisions == ["fp32"]


def test_scan_precision_is_done_and_proved(scanned):
    p = scanned.result.precisions["fp32"]
    assert list(scanned.result.precisions) == ["fp32"]
    assert p.status == "done", p.error
    assert p.stop == "edge"
    assert p.error == ""
    proof = p.proof
    assert proof.verified is True
    assert proof.agreed is True
    assert p.max_batch == proof.fits
    assert proof.fails == proof.fits + 1
    assert proof.fail_outcome == "oom"
    assert (proof.search.fits, proof.search.fails) == (p.max_batch, p.max_batch + 1)
    checks = proof.checks
    # B+1 fails, B fits, and B fits again in one more fresh process: the repeat rule's K = 2 (the default)
    assert [c.batch for c in checks] == [p.max_batch + 1, p.max_batch, p.max_batch]
    assert [c.outcome for c in checks] == ["oom", "fit", "fit"]
    assert (proof.repeat, proof.runs_at_b, proof.fits_at_b, proof.band) == (2, 2, 2, None)
    assert all(c.fresh for c in checks)
    # forked trial processes: B+1 failed fresh in the search and stands; B is taken from the search when its
    # fresh trial went on to the timed run (the search took it for B), else re-run for its timed run
    searched_b = next(a for a in p.attempts if a.batch == p.max_batch)
    assert proof.reused_from_search == ([p.max_batch + 1, p.max_batch] if searched_b.timed_steps else [p.max_batch + 1])
    assert checks[1].timed_steps and checks[2].timed_steps and p.throughput.batch == p.max_batch
    assert 10 < p.max_batch < 100_000


def test_scan_attempts_bracket_the_edge(scanned):
    p = scanned.result.precisions["fp32"]
    attempts = {a.batch: a for a in p.attempts}
    assert attempts[p.max_batch].outcome == "fit"
    assert attempts[p.max_batch + 1].outcome == "oom"
    assert all(a.outcome == ("fit" if a.batch <= p.max_batch else "oom") for a in p.attempts)
    # batch 1 and 2 share the first process; with the fork server the pair at the edge ran fresh
    assert [a.fresh for a in p.attempts[:2]] == [False, False]
    assert attempts[p.max_batch].fresh and attempts[p.max_batch + 1].fresh
    assert len(p.attempts) <= scanned.opts.max_trials
    assert p.search_seconds is not None and p.search_seconds > 0


def test_scan_memory_model_and_capacity(scanned):
    p = scanned.result.precisions["fp32"]
    assert p.capacity_bytes == TOY_CPU_BUDGET
    for basis in ("peak_allocated", "peak_reserved"):
        model = p.memory_model[basis]
        assert model.basis == basis
        assert model.per_sample_bytes > 0
        assert model.points >= 2
    assert p.settings.weights_bytes > 0
    assert p.settings.task.parameters > 0


def test_scan_throughput_at_the_max_batch(scanned):
    p = scanned.result.precisions["fp32"]
    t = p.throughput
    assert t.outcome == "fit", t
    assert t.batch == p.max_batch
    assert t.samples_per_s > 0
    assert t.step_time["steps"] == 2
    # the timed steps went on from B's fresh trial (its steps were the warm-up), one more warm-up step apart
    assert t.continued_from_trial is True and t.warmup_steps == 1


def test_scan_edge_is_exact_in_process(scanned, session):
    # the same workload and budget in this process: the answer fits, one more does not
    b = scanned.result.precisions["fp32"].max_batch
    assert trial(session, b)["outcome"] == "fit"
    assert trial(session, b + 1)["outcome"] == "oom"


def test_scan_reports_progress(scanned):
    p = scanned.result.precisions["fp32"]
    progress = scanned.progress
    assert progress.precisions == [("toy", "fp32")]
    reused, rechecks = list(p.proof.reused_from_search), []
    for c in p.proof.checks:  # a reused search trial is a check once: B's repeat after it ran fresh
        if c.batch in reused:
            reused.remove(c.batch)
        else:
            rechecks.append(c.batch)
    n_search, n_fresh = len(p.attempts), len(rechecks)
    assert [i for i, _, _ in progress.starts] == list(range(1, n_search + n_fresh + 1))
    assert [fresh for _, _, fresh in progress.starts] == [a.fresh for a in p.attempts] + [True] * n_fresh
    assert [b for _, b, _ in progress.starts] == [a.batch for a in p.attempts] + rechecks
    assert len(progress.ends) == n_search + n_fresh


def test_scan_leaves_no_worker_processes_or_logs(scanned):
    assert scanned.new_children == set()
    assert scanned.new_logs == set()


# --- fp16 loss scaling: a trial must see optimizer state ---------------------------------------


class _SkippingAmp:
    """Counts like workloads.base.Amp with tracking: the first `skips` updates are skipped."""

    def __init__(self, skips: int) -> None:
        self.skips, self.applied, self.skipped, self.track = skips, 0, 0, False

    def step(self) -> None:
        assert self.track, "updates must be tracked during a trial"
        if self.skipped < self.skips:
            self.skipped += 1
        else:
            self.applied += 1


def test_trial_runs_until_k_steps_had_optimizer_state():
    from memprobe.training.step import run_until_state

    amp = _SkippingAmp(skips=0)
    assert run_until_state(amp.step, amp, 3, "train") == 3  # no skips: warm-up + 2, as before
    amp = _SkippingAmp(skips=5)
    # 5 skipped, the 6th applies (state appears), then 2 steps that begin with state
    assert run_until_state(amp.step, amp, 3, "train") == 8
    assert amp.applied == 3 and amp.track is False


def test_trial_gives_up_when_loss_scaling_skips_every_update():
    from memprobe.training.step import MAX_SKIPPED_STEPS, NoOptimizerStepError, run_until_state

    amp = _SkippingAmp(skips=10**9)
    with pytest.raises(NoOptimizerStepError, match="skipped"):
        run_until_state(amp.step, amp, 3, "train")
    assert amp.skipped == 3 + MAX_SKIPPED_STEPS


def _fp16_spec(name: str, **params) -> WorkerSpec:
    """An fp16 trial of the registry workload `name` on the CPU, with `params` changed."""
    from memprobe.core.workload.registry import load_registry

    workload = load_registry()[name]
    workload = replace(workload, params={**workload.params, **params})
    return WorkerSpec(workload, "fp16", "train", "cpu", None, timeout_s=120)


# toy-pix2pixhd at 32x16 with one discriminator scale, no local enhancer and 10x the feature-matching weight: its
# fp16 updates still overflow from 2**16 (8 are skipped on the CPU before one applies, as with the registry toy, the
# same 8 in six trials in a row), at 0.15 s a step instead of the registry toy's 1.1 s.
_SKIPS_SOME_UPDATES = {
    "width": 32,
    "height": 16,
    "global_downsamplings": 2,
    "local_enhancers": 0,
    "d_scales": 1,
    "lambda_feat": 100.0,
}


@pytest.mark.slow
def test_fp16_trial_starts_from_the_loss_scale_an_earlier_one_settled_at():
    # a small toy-pix2pixhd in fp16 on the CPU skips ~8 updates while the scaler backs off from 2**16
    s = Session()
    spec = _fp16_spec("toy-pix2pixhd", **_SKIPS_SOME_UPDATES)
    try:
        assert isinstance(s.setup(spec.setup_request()), Ready)
        first = s.trial(TrialRequest(batch=1, steps=3)).to_dict()
        assert first["outcome"] == "fit" and first["steps"] > 3
        assert first["loss_scale"] < 2.0**16
        second = s.trial(TrialRequest(batch=1, steps=3, loss_scale=first["loss_scale"])).to_dict()
        assert second["outcome"] == "fit" and second["steps"] == 3
        assert second["loss_scale"] <= first["loss_scale"]
        assert s.trial(TrialRequest(batch=1, steps=3)).to_dict()["steps"] == first["steps"]  # no scale: 2**16 again
    finally:
        s.close()


def test_fp32_trial_has_no_loss_scale(session):
    assert session.trial(TrialRequest(batch=4, steps=3)).to_dict()["loss_scale"] is None


@pytest.mark.slow
def test_worker_passes_the_settled_loss_scale_to_the_next_process():
    spec = _fp16_spec("toy-pix2pixhd", **_SKIPS_SOME_UPDATES)
    first, second = Worker("memprobe.workloads.pix2pixhd"), Worker("memprobe.workloads.pix2pixhd")
    try:
        first.setup(spec)
        a = first.trial(1, 3)
        assert a.fits and a.steps > 3 and spec.loss_scale == a.loss_scale
        second.setup(spec)  # a fresh process built from the same spec
        b = second.trial(1, 3)
        assert b.fits and b.steps == 3
        measured = second.measure(1, 1, 2)
        assert measured.outcome == "fit" and measured.warmup_steps == 1
    finally:
        first.close()
        second.close()


def test_infer_mode_runs_exactly_the_steps():
    from memprobe.training.step import run_until_state

    calls = []
    assert run_until_state(lambda: calls.append(1), None, 3, "infer") == 3 and len(calls) == 3


class _RaisingTask:
    """A task whose step fails with `message`, as a library does at the edge of memory."""

    device = torch.device("cpu")

    def __init__(self, message: str) -> None:
        self.message = message

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def make_batch(self, n: int) -> None:
        return None

    def train_step(self, batch, amp) -> None:
        raise RuntimeError(self.message)


class _FixedPeaks:
    def __init__(self, reserved: int) -> None:
        self.reserved = reserved

    def reset(self) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def peaks(self) -> tuple[int, int]:
        return self.reserved, self.reserved


@pytest.mark.parametrize("reserved, expected", [(98, "oom"), (40, "error")])
def test_trial_counts_a_cudnn_internal_error_at_full_memory_as_oom(reserved, expected):
    from memprobe.training.step import run_trial

    task = _RaisingTask("cuDNN error: CUDNN_STATUS_INTERNAL_ERROR")
    attempt = run_trial(task, "fp32", "train", 80, 3, _FixedPeaks(reserved), capacity_bytes=100)
    assert attempt["outcome"] == expected
    assert attempt["message"].startswith("RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR")
    assert ("counted as out of memory: 98%" in attempt["message"]) == (expected == "oom")
