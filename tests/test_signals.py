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

from conftest import memprobe_process, wait_for
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
    (["plan", "--model", "toy", "--gpu", "H100", "-p", "fp32"], "memprobe.planning.build", "predicted"),
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


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_real_signal_stops_a_real_predict(tmp_path, sig, code):
    # bert-large takes half a minute to trace on a CPU: the signal comes while it traces
    with memprobe_process(["predict", "--model", "bert-large", "-p", "fp32", "--memory", "24GiB"], tmp_path) as proc:
        seen = wait_for(proc, "tracing on fake tensors", 120)
        assert "tracing on fake tensors" in seen, seen
        time.sleep(1.0)
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err[-2000:]
    assert "Traceback" not in err and "Aborted!" not in err and "interrupted" in err
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # nothing of its session is left


# --- Ctrl-C to the main process alone: never lost, whatever the process is doing -------------------------------------


class _Dies:
    """An object whose death runs Python code (a weak-reference callback), as every traced tensor's does: a signal
    handled there raises where Python cannot raise ("Exception ignored"), and a plain KeyboardInterrupt is lost."""


def _on_death(_ref) -> None:
    total = 0
    for i in range(50):
        total += i


def _churn_then_ctrl_c(*_args, **_kwargs):
    import random
    import threading
    import weakref

    threading.Timer(random.uniform(0.01, 0.3), os.kill, (os.getpid(), signal.SIGINT)).start()
    end = time.monotonic() + 10
    while time.monotonic() < end:
        _refs = [weakref.ref(_Dies(), _on_death) for _ in range(200)]
    raise AssertionError("the Ctrl-C was lost: the command ran on")


def test_ctrl_c_is_never_lost_in_a_finalizer(monkeypatch):
    # Without the interrupt sent again, 16 of 20 such Ctrl-Cs were lost in a plain Python loop like this one.
    monkeypatch.setattr("memprobe.core.process.interrupts.BACKSTOP_S", 120.0)  # the backstop would end pytest itself
    monkeypatch.setattr("memprobe.predict.summary.predict", _churn_then_ctrl_c)
    for _ in range(20):
        started = time.monotonic()
        result = CliRunner().invoke(main, ["predict", "--model", "toy", "--memory", "8GiB", "-p", "fp32"])
        assert result.exit_code == 130, result.output
        assert "interrupted (Ctrl-C): stopped" in result.output and "Traceback" not in result.output
        assert time.monotonic() - started < 5, "the Ctrl-C took several tries to land"


def _interrupt_wrapped_by_an_import(*args, **kwargs):
    # as Python 3.11 does with a KeyboardInterrupt raised in __set_name__ while a class is made (an import under way)
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    except KeyboardInterrupt as exc:
        raise RuntimeError("Error calling __set_name__ on 'cached_property' instance '_name_template'") from exc


def test_ctrl_c_that_surfaces_as_another_error_still_stops_the_command(monkeypatch):
    monkeypatch.setattr("memprobe.predict.summary.predict", _interrupt_wrapped_by_an_import)
    result = CliRunner().invoke(main, ["predict", "--model", "toy", "--memory", "8GiB", "-p", "fp32"])
    assert result.exit_code == 130, result.output
    assert "interrupted (Ctrl-C): stopped" in result.output and "__set_name__" not in result.output


CHURNING_BUILD = """import torch

def build(device, precision):  # fake tensors made and freed for ever, in predict's own process
    while True:
        for _ in range(100):
            torch.empty(16).add_(1)
"""


@pytest.mark.slow
def test_ctrl_c_to_the_main_process_alone_stops_predict_every_time(tmp_path):
    # as `timeout -s INT` sends it: to memprobe's process, not to its group (its forked children get nothing)
    (tmp_path / "churn.py").write_text(CHURNING_BUILD)
    for delay in (0.05, 0.3, 0.7, 1.2, 2.0):
        args = ["predict", "--model", "churn.py:build", "-p", "fp32", "--memory", "8GiB"]
        with memprobe_process(args, tmp_path) as proc:
            seen = wait_for(proc, "building churn.py:build on fake tensors", 120)
            assert "building" in seen, seen
            time.sleep(delay)
            sent = time.monotonic()
            proc.send_signal(signal.SIGINT)
            _out, err = proc.communicate(timeout=60)
            took = time.monotonic() - sent
        assert proc.returncode == 130, (delay, err[-2000:])
        assert "interrupted (Ctrl-C): stopped" in err and "Traceback" not in err, err[-2000:]
        assert "s after the signal" not in err, f"lost, ended by the backstop only ({took:.1f} s)"
        with pytest.raises(ProcessLookupError):
            os.killpg(proc.pid, 0)


def test_a_swallowed_interrupt_still_ends_the_command():
    # code that catches every exception and carries on: the backstop ends the process with 128 + the signal
    script = (
        "import time, memprobe.core.process.interrupts as interrupts\n"
        "interrupts.BACKSTOP_S = 1.0\n"
        "def swallow():\n"
        "    while True:\n"
        "        try:\n"
        "            print('ready', flush=True)  # inside: a signal that comes as it returns is swallowed too\n"
        "            time.sleep(0.05)\n"
        "        except BaseException:\n"
        "            pass\n"
        "with interrupts.stop_on_signals():\n"
        "    while True:\n"
        "        try:\n"
        "            swallow()\n"
        "        except BaseException:\n"
        "            pass\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143 and "interrupted (SIGTERM): stopped (1 s after the signal)" in err, err


def test_a_keyboard_interrupt_no_signal_sent_is_an_error(monkeypatch):
    def raises(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("memprobe.predict.summary.predict", raises)
    result = CliRunner().invoke(main, ["predict", "--model", "toy", "--memory", "8GiB", "-p", "fp32"])
    assert result.exit_code == 1, result.output
    assert "Error: KeyboardInterrupt raised by the code that ran, with no Ctrl-C or signal" in result.output
    assert "interrupted" not in result.output
