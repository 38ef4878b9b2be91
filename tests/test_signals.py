"""Ctrl-C exits 130 and SIGTERM 143 in every command (one mechanism: cli.app.MemprobeGroup), with no traceback, no
"Aborted!", no process left and no half-written file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from memprobe.cli import main

REPO = Path(__file__).resolve().parents[1]
H100 = REPO / "reports" / "h100"


def _signal_self(sig: int):
    def stop(*_args, **_kwargs):
        os.kill(os.getpid(), sig)
        time.sleep(5)  # the signal arrives first; this is never reached in full
        raise AssertionError("the signal did not stop the command")

    return stop


# (command, the function its work goes through, where)
COMMANDS = [
    (["predict", "--model", "toy", "--memory", "8GiB", "-p", "fp32"], "memprobe.predict.summary", "predict"),
    (["report", str(H100), "--charts", "{tmp}"], "memprobe.compare.charts", "write_charts"),
    (["report", str(H100)], "memprobe.compare.report", "comparison_report"),
    (["report", "--scans", str(H100)], "memprobe.compare.scan_table", "scan_table"),
    (["guide", str(H100)], "memprobe.compare.guide", "guide_report"),
    (["list"], "memprobe.cli.listing", "workload_table"),
    (["plan", "--model", "toy", "--gpu", "H100", "-p", "fp32"], "memprobe.plan.build", "predicted"),
    (
        ["predict", "--model", "toy", "--memory", "8GiB", "-p", "fp32", "--breakdown"],
        "memprobe.predict.breakdown",
        "predict_breakdown",
    ),
]


@pytest.mark.parametrize(
    "sig, code",
    [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)],
    ids=["SIGINT", "SIGTERM", "SIGHUP"],
)
@pytest.mark.parametrize("argv, module, name", COMMANDS, ids=[" ".join(c[0][:2]) for c in COMMANDS])
def test_every_command_exits_128_plus_the_signal(monkeypatch, tmp_path, argv, module, name, sig, code):
    import importlib

    monkeypatch.setattr(importlib.import_module(module), name, _signal_self(sig))
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    result = CliRunner().invoke(main, [a.replace("{tmp}", str(tmp_path / "charts")) for a in argv])
    assert result.exit_code == code, result.output
    assert "Aborted!" not in result.output and "Traceback" not in result.output
    assert "interrupted" in result.output
    assert {s: signal.getsignal(s) for s in before} == before  # handlers restored after the command


def test_ctrl_c_while_a_chart_is_written_leaves_no_half_file(monkeypatch, tmp_path):
    from matplotlib.figure import Figure

    real = Figure.savefig

    def half_then_ctrl_c(self, fname, *args, **kwargs):
        fname.write(b"\x89PNG half a file")
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
        return real(self, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", half_then_ctrl_c)
    out = tmp_path / "charts"
    result = CliRunner().invoke(main, ["report", str(H100), "--charts", str(out)])
    assert result.exit_code == 130, result.output
    assert [p.name for p in out.iterdir()] == []  # neither the chart nor its temporary file


def _wait_for(proc: subprocess.Popen, text: str, timeout: float) -> str:
    """stderr lines of `proc` until one holds `text`."""
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen += line
        if text in line or (not line and proc.poll() is not None):
            break
    return seen


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_real_signal_stops_a_real_predict(tmp_path, sig, code):
    # bert-large takes half a minute to trace on a CPU: the signal comes while it traces
    proc = subprocess.Popen(
        [sys.executable, "-m", "memprobe", "predict", "--model", "bert-large", "-p", "fp32", "--memory", "24GiB"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,
    )
    try:
        seen = _wait_for(proc, "tracing on fake tensors", 120)
        assert "tracing on fake tensors" in seen, seen
        time.sleep(1.0)
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, err[-2000:]
    assert "Traceback" not in err and "Aborted!" not in err and "interrupted" in err
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # nothing of its session is left
