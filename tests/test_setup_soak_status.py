"""The scan side of reliability: setup OOMs classified, honest file statuses, and `scan --soak` (fakes, no GPU)."""

from __future__ import annotations

import json

import pytest

import memprobe.probe.scan
import memprobe.probe.setup_failure
from conftest import RecordingProgress
from fakes import FakeFactory, FakeWorker, World, assert_all_closed, run_scan, toy_scan, toy_workload
from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.process.outcomes import OOM, classify_error
from memprobe.core.process.protocol import Failure, SetupRequest
from memprobe.core.records.records import Proof
from memprobe.core.records.results import SCHEMA, read_result
from memprobe.probe.scan import ScanOptions, scan_workload
from memprobe.probe.soak import apply_soak, soak

GIB = 2**30


# --- setup failures -----------------------------------------------------------------------------


def test_accelerator_error_saying_out_of_memory_is_oom_wherever_raised():
    assert classify_error("AcceleratorError", "CUDA error: out of memory") == OOM
    assert classify_error("", "trial process died: torch.AcceleratorError: CUDA error: out of memory") == OOM
    # a corrupted context still wins over an OOM-looking message
    assert classify_error("AcceleratorError", "CUDA error: an illegal memory access; out of memory") == "crash"


def test_oom_creating_the_context_is_reported_as_oom_at_that_stage(monkeypatch):
    torch = pytest.importorskip("torch")
    from memprobe.probe.child.worker import Session

    class AcceleratorError(RuntimeError):
        pass

    def no_memory():
        raise AcceleratorError("CUDA error: out of memory")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "init", no_memory)
    answer = Session().setup(SetupRequest(device="cuda", precision="fp32", workload=toy_workload()))
    assert isinstance(answer, Failure) and answer.kind == OOM and answer.stage == "cuda-context"
    assert "creating the CUDA context" in answer.message and "out of memory" in answer.message


def test_setup_oom_with_other_processes_names_them_and_is_an_error(monkeypatch):
    held = int(139.72 * GIB)
    monkeypatch.setattr(
        memprobe.probe.setup_failure,
        "other_gpu_processes",
        lambda device, env=None: [{"pid": 4242, "name": "python", "used_bytes": held}],
    )
    result, _, _ = run_scan(World(75, setup_error="oom"))
    assert result.status == "error" and result.max_batch is None
    assert "pid 4242 python holds 139.72 GiB" in result.error
    assert "end them or wait" in result.error
    failure = result.settings.setup_failure
    assert failure["outcome"] == OOM and failure["other_processes"][0]["pid"] == 4242


def test_setup_oom_on_an_idle_card_means_nothing_fits(monkeypatch):
    monkeypatch.setattr(memprobe.probe.setup_failure, "other_gpu_processes", lambda device, env=None: [])
    result, _, _ = run_scan(World(75, setup_error="oom"))
    assert result.status == "done" and result.max_batch == 0 and result.stop == "nothing-fits"
    assert "does not fit this card" in result.error


# --- honest statuses -------------------------------------------------------------------------------


def _scan_file(monkeypatch, tmp_path, world: World, precisions=("fp32", "bf16")):
    monkeypatch.setattr(memprobe.probe.scan, "WorkerFactory", lambda workload, env=None: FakeFactory(world))
    monkeypatch.setattr(memprobe.probe.setup_failure, "other_gpu_processes", lambda device, env=None: [])
    opts = ScanOptions(precisions=list(precisions), device="cpu", cpu_budget_bytes=world.capacity)
    return scan_workload(toy_workload(), opts, tmp_path, RecordingProgress())


def test_every_precision_in_error_makes_a_failed_file(monkeypatch, tmp_path):
    world = World(75, outcomes={16: "error"})
    world.gpu = "cpu"
    result, path = _scan_file(monkeypatch, tmp_path, world)
    assert result.status == "failed"
    assert read_result(path).status == "failed"


def test_one_precision_done_keeps_the_file_complete(monkeypatch, tmp_path):
    result, path = _scan_file(monkeypatch, tmp_path, World(75))
    assert result.status == "complete" and read_result(path).status == "complete"


def test_an_old_complete_file_whose_precisions_all_failed_reads_as_failed(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(
        json.dumps(
            {
                "schema": SCHEMA,
                "schema_version": 1,
                "status": "complete",
                "workload": {"name": "toy"},
                "environment": {},
                "settings": {},
                "precisions": {"fp16": {"precision": "fp16", "status": "error", "error": "x"}},
            }
        )
    )
    assert read_result(path).status == "failed"


def test_cli_exits_non_zero_for_a_failed_scan(run, monkeypatch, tmp_path):
    world = World(75, setup_error="error")
    monkeypatch.setattr(memprobe.probe.scan, "WorkerFactory", lambda workload, env=None: FakeFactory(world))
    result = run(
        *toy_scan("1MiB"),
        "--precision",
        "fp32",
        "--out",
        tmp_path,
    )
    assert result.exit_code == 1, result.output
    assert "status failed" in result.output
    assert read_result(next(tmp_path.glob("*.json"))).status == "failed"


# --- soak ------------------------------------------------------------------------------------------


def soaking_world(monkeypatch, soak_edge: int) -> World:
    """A World whose long trials (soak runs, > 3 steps) fit only up to soak_edge."""
    trial = FakeWorker.trial

    def with_soak(self, batch, steps, keep=False, decode_steps=None):
        if steps > 3 and batch > soak_edge:
            self.world.log.append(("soak", self.number, batch))
            self.ran += 1
            return Attempt(batch, OOM, message=f"OutOfMemoryError: fragmentation at step {steps - 7}")
        return trial(self, batch, steps)

    monkeypatch.setattr(FakeWorker, "trial", with_soak)
    return World(75)


def test_soak_that_passes_keeps_b_and_is_recorded(monkeypatch):
    world = soaking_world(monkeypatch, soak_edge=75)
    result, progress, _ = run_scan(world, soak=100)
    record = result.proof.soak
    assert result.max_batch == 75 and record["max_batch"] == 75 and not record["lowered"]
    assert [(r["batch"], r["outcome"], r["fresh"]) for r in record["runs"]] == [(75, "fit", True)]
    assert result.throughput.batch == 75
    assert any("soak" in n for n in progress.notes)
    assert_all_closed(world)


def test_soak_that_fails_lowers_b_and_the_proof(monkeypatch):
    world = soaking_world(monkeypatch, soak_edge=73)
    result, progress, _ = run_scan(world, soak=100)
    record = result.proof.soak
    assert result.max_batch == 73
    assert [(r["batch"], r["outcome"]) for r in record["runs"]] == [(75, "oom"), (74, "oom"), (73, "fit")]
    assert record["lowered"] and record["max_batch_before"] == 75
    assert (result.proof.fits, result.proof.fails, result.proof.fail_outcome) == (73, 74, "oom")
    assert result.throughput.batch == 73  # timed again at the lowered batch
    assert any("lowered the max batch from 75 to 73" in n for n in progress.notes)
    assert_all_closed(world)


def test_soak_off_by_default(monkeypatch):
    result, _, _ = run_scan(World(75))
    assert result.proof.soak is None


def test_soak_that_never_passes_within_its_runs_says_so():
    record = soak(10, 50, lambda batch, steps: Attempt(batch, OOM), max_runs=3)
    assert [r["batch"] for r in record["runs"]] == [10, 9, 8]
    assert record["max_batch"] is None and not record["settled"] and not record["lowered"]
    proof = Proof(fits=10, fails=11)
    assert apply_soak(proof, record) is None and proof.fits == 10


def test_soak_down_to_nothing_means_max_batch_zero():
    record = soak(2, 50, lambda batch, steps: Attempt(batch, OOM))
    assert record["max_batch"] == 0 and record["settled"] and record["lowered"]
    proof = Proof(fits=2, fails=3)
    assert apply_soak(proof, record) == 0 and (proof.fits, proof.fails) == (0, 1)


def test_soak_option_is_validated(run):
    result = run("scan", "--model", "toy", "--soak", "-5")
    assert result.exit_code == 2 and "--soak" in result.output


def test_accelerator_error_with_torchs_debugging_hints_is_still_oom():
    message = (
        "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call, "
        "so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
    )
    assert classify_error("AcceleratorError", message) == OOM
    assert classify_error("AcceleratorError", "CUDA error: device-side assert triggered\n" + message) == "crash"


@pytest.mark.parametrize("sig, code", [("SIGTERM", 143), ("SIGHUP", 129)])
def test_sigterm_and_sighup_stop_a_scan_like_ctrl_c(run, monkeypatch, tmp_path, sig, code):
    import os
    import signal

    world = World(75)
    monkeypatch.setattr(memprobe.probe.scan, "WorkerFactory", lambda workload, env=None: FakeFactory(world))
    trial = FakeWorker.trial

    def signalled_in_bf16(self, batch, steps, keep=False, decode_steps=None):
        if len(world.workers) > 3 and batch == 16:  # fp32 has finished: the signal comes during bf16
            os.kill(os.getpid(), getattr(signal, sig))
        return trial(self, batch, steps)

    monkeypatch.setattr(FakeWorker, "trial", signalled_in_bf16)
    before = signal.getsignal(signal.SIGTERM)
    result = run(
        *toy_scan("1MiB"),
        "--precision",
        "fp32,bf16",
        "--out",
        tmp_path,
    )
    assert result.exit_code == code, result.output
    assert signal.getsignal(signal.SIGTERM) is before  # the handlers are the scan's only while it runs
    data = read_result(next(tmp_path.glob("*.json")))
    assert data.status == "partial"
    assert {k: p.status for k, p in data.precisions.items()} == {"fp32": "done", "bf16": "interrupted"}
    assert_all_closed(world)
