"""The garbage collector around bulk work (memprobe/predict/collector.py) and the program's quick end (cli.run)."""

from __future__ import annotations

import gc
import sys

import pytest

from memprobe.predict.collector import paused


@pytest.fixture(autouse=True)
def _collector_as_found():
    was_on = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if was_on else gc.disable)()


def test_paused_switches_automatic_collection_off_inside_and_back_on_after():
    gc.enable()
    with paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_paused_leaves_a_collector_that_was_off_off():
    gc.disable()
    with paused():
        pass
    assert not gc.isenabled()


def test_paused_is_undone_when_the_work_raises():
    gc.enable()
    with pytest.raises(KeyboardInterrupt), paused():
        raise KeyboardInterrupt
    assert gc.isenabled()


def test_keep_freezes_what_was_made_inside():
    gc.unfreeze()
    with paused(keep=True):
        made = [[i] for i in range(1000)]
    assert gc.get_freeze_count() >= len(made)
    with paused():
        pass
    assert gc.get_freeze_count() >= len(made)  # without keep nothing more is frozen, nothing is unfrozen


def test_run_exits_with_the_command_s_code_and_freezes(monkeypatch, capsys):
    from memprobe.cli import run

    gc.unfreeze()
    monkeypatch.setattr(sys, "argv", ["memprobe", "predict", "--model", "no-such-model"])
    with pytest.raises(SystemExit) as exited:
        run()
    assert exited.value.code == 1  # as `memprobe predict --model no-such-model` exits
    assert "no-such-model" in capsys.readouterr().err
    assert gc.get_freeze_count() > 0
