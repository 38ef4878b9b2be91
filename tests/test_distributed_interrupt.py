"""An interrupted multi-GPU scan keeps what it finished: Ctrl-C, SIGTERM or a time limit, in any stage.

Against a fake launcher: stopped in the search, the proof or the 1-GPU baseline, the result file holds the trials
so far (marked partial; a precision proven and timed stays done). On the CPU with real launches (gloo, 2 ranks):
`memprobe scan --gpus 2` stopped by SIGTERM or SIGINT exits 143 or 130, writes its trials, and leaves no rank.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from conftest import RecordingProgress, memprobe_process, wait_for
from fakes import TOY, FakeGroup, fake_group_opts, rank_processes, toy_scan
from memprobe.core.records.results import read_result
from memprobe.probe.distributed.scan import scan_distributed
from memprobe.probe.pipeline import ScanInterrupted

REPO = Path(__file__).resolve().parents[1]


class StopAt(FakeGroup):
    """FakeGroup whose `stop_at`-th launch (1-based) is interrupted, as Ctrl-C or a signal would."""

    def __init__(self, stop_at: int) -> None:
        super().__init__()
        self.stop_at = stop_at

    def __call__(self, req):
        if len(self.requests) + 1 == self.stop_at:
            self.requests.append(req)
            raise KeyboardInterrupt
        return super().__call__(req)


def _interrupted_file(tmp_path, stop_at: int):
    group = StopAt(stop_at)
    with pytest.raises(ScanInterrupted) as stopped:
        scan_distributed(TOY, fake_group_opts(curve=False), 2, "ddp", tmp_path, RecordingProgress(), group)
    assert stopped.value.path is not None and stopped.value.path.exists()
    assert [p.name for p in tmp_path.iterdir()] == [stopped.value.path.name]  # no temporary file left
    data = read_result(stopped.value.path)
    assert data.status == "partial" and data.settings.interrupted is True
    return data.precisions["fp32"], group


def test_stopped_in_the_search_the_file_keeps_the_search_trials_so_far(tmp_path):
    p, _group = _interrupted_file(tmp_path, stop_at=4)  # launch 1: batch 1 and 2; then 2 search trials
    assert p.status == "interrupted" and p.settings.interrupted_at == "search"
    assert [a.batch for a in p.attempts][:2] == [1, 2] and len(p.attempts) == 4
    assert p.max_batch is None and p.memory_model  # the trials still give the memory line
    assert p.settings.launches["process_groups"] == 4


def test_stopped_in_the_proof_the_file_keeps_the_search_and_the_checks_so_far(tmp_path):
    # the search took launches 1-8 here; the proof checks 991 (launch 9), then 990 is stopped (launch 10)
    group = FakeGroup()
    scan_distributed(TOY, fake_group_opts(curve=False), 2, "ddp", tmp_path / "full", RecordingProgress(), group)
    search = sum(1 for r in group.requests if r.world_size == 2) - 3  # the proof's 991, 990 and 990 again are last
    p, _ = _interrupted_file(tmp_path / "stopped", stop_at=search + 2)
    assert p.status == "interrupted" and p.settings.interrupted_at == "proof"
    assert p.max_batch is None and p.proof is not None and not p.proof.verified
    assert [(c.batch, c.outcome) for c in p.proof.checks] == [(991, "oom")]
    assert p.proof.ended_by == "interrupted" and p.proof.repeat == 2
    assert p.proof.found.fits == 990 and len(p.attempts) > 2


def test_stopped_while_timing_one_gpu_the_proven_edge_is_kept_as_done(tmp_path):
    group = FakeGroup()
    scan_distributed(TOY, fake_group_opts(curve=False), 2, "ddp", tmp_path / "full", RecordingProgress(), group)
    p, _ = _interrupted_file(tmp_path / "stopped", stop_at=len(group.requests))  # the 1-GPU baseline
    assert p.status == "done" and p.settings.interrupted_at == "scaling"
    assert p.max_batch == 990 and p.proof.verified and p.throughput.outcome == "fit"
    assert "scaling" not in p.settings.to_dict()


# --- real launches, real signals ------------------------------------------------------------------


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
@pytest.mark.slow
def test_a_signal_stops_a_real_multi_gpu_scan_which_writes_its_trials_and_leaves_no_rank(tmp_path, sig, code):
    out = tmp_path / "out"
    args = [*toy_scan("8MB"), "--gpus", "2", "-p", "fp32"]
    args += ["--no-curve", "--no-throughput", "--out", str(out)]
    with memprobe_process(args, env={"TMPDIR": str(tmp_path)}) as proc:
        seen = wait_for(proc, "trial 4 ", 240)
        assert "trial 4 " in seen, seen
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=90)
    assert proc.returncode == code, err[-2000:]
    assert "Traceback" not in err and "interrupted" in err
    (path,) = out.glob("*.json")
    data = read_result(path)
    p = data.precisions["fp32"]
    assert data.status == "partial" and p.status == "interrupted" and len(p.attempts) >= 3
    assert str(path) in err  # the CLI names the file that kept them
    time.sleep(1.0)
    assert rank_processes(str(tmp_path)) == []


def test_the_search_benchmark_reads_seconds_trials_and_process_groups_from_a_result_file(tmp_path):
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("mgs", REPO / "benchmarks" / "multi_gpu_search.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    _result, path = scan_distributed(
        TOY, fake_group_opts(curve=False), 2, "ddp", tmp_path, RecordingProgress(), FakeGroup()
    )
    got = bench.figures(json.loads(path.read_text()), "fp32")
    assert got["max_batch"] == 990 and got["proof"] == [990, 991] and got["status"] == "done"
    assert got["search_process_groups"] == got["search_trials"] - 1  # no served groups here: batch 1 and 2 share one
    assert got["edge_seconds"] == pytest.approx(got["search_seconds"] + got["proof_seconds"], abs=0.1)
    row = {"strategy": "ddp", "mode": "before", "served_groups": False, "wall_seconds": 151.0, **got}
    assert bench.MODES["before"] == {"MEMPROBE_SERVED_GROUPS": "0", "MEMPROBE_PRESTART": "0"}
    line = bench.table([row]).splitlines()[2]
    assert line.startswith("| ddp | a launch per trial (before) | 990 (990 fits, 991 fails) |")
