"""The one child handle (core/process/child.py) against tiny real python children: answers, time limits, deaths, ends, logs.

Each child here is `python -c SCRIPT`, a few lines that answer the line protocol the way the trial process and the
predicting children do (or fail to), so the handle's behaviour is checked on real processes, pipes and signals.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from memprobe.core.process.child import Child, ChildEnded, ForkServer, ForkServerError
from memprobe.core.process.child_env import SAFE_ENV
from memprobe.core.process.lifeline import PARENT_ENV
from memprobe.core.process.protocol import ExitRequest, HintAnswer, HintRequest, Lost, PingRequest, Pong, Request

REPO = Path(__file__).resolve().parents[1]
SLOW_START_S = 60.0  # a python start on a machine whose cores every test is using

ANSWERING = textwrap.dedent("""
    import json, os, subprocess, sys, time
    print("started", file=sys.stderr, flush=True)
    for line in sys.stdin:
        msg = json.loads(line)
        op = msg.get("op")
        if op == "ping":
            print(json.dumps({"ok": True, "pid": os.getpid()}), flush=True)
        elif op == "exit":
            print("asked to exit", file=sys.stderr, flush=True)
            sys.exit(0)
        elif op == "hang":
            time.sleep(600)
        elif op == "die":  # half an answer, a last word on stderr, then gone
            sys.stdout.write('{"ok": tr')
            sys.stdout.flush()
            print("dying: out of luck", file=sys.stderr, flush=True)
            os._exit(3)
        elif op == "env":
            print(json.dumps({k: os.environ.get(k) for k in msg["keys"]}), flush=True)
        elif op == "spawn":  # a process of its own, in its process group
            sleeper = subprocess.Popen(["sleep", "600"])
            print(json.dumps({"pid": sleeper.pid}), flush=True)
        elif op == "garbage":
            print("not json", flush=True)
        elif "precision" in msg:  # a HintRequest
            print(json.dumps({"id": msg["id"], "precision": msg["precision"], "at": 1.0, "max_batch": 7}), flush=True)
""")


@dataclass
class Hang(Request):
    op: ClassVar[str] = "hang"
    answer: ClassVar[type] = Pong


@dataclass
class Die(Request):
    op: ClassVar[str] = "die"
    answer: ClassVar[type] = Pong


@dataclass
class Garbage(Request):
    op: ClassVar[str] = "garbage"
    answer: ClassVar[type] = Pong


def answering(**kwargs) -> Child:
    return Child.start([sys.executable, "-c", ANSWERING], **kwargs)


def gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether process `pid` is gone (or a zombie) within `within_s`."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_a_request_gets_its_typed_answer_and_a_predicting_childs_message_its_own():
    with answering() as child:
        assert child.ask(PingRequest(), timeout_s=SLOW_START_S) == Pong(True, child.pid)
        answer = child.ask(HintRequest("bf16", 1 << 30, 4), HintAnswer, timeout_s=SLOW_START_S)
        assert answer == HintAnswer(4, "bf16", 1.0, max_batch=7)
        assert child.alive() and not child.forked


def test_a_child_that_does_not_answer_in_time_is_killed_and_the_answer_is_lost_by_timeout():
    with answering() as child:
        assert child.ask(PingRequest(), timeout_s=SLOW_START_S) == Pong(True, child.pid)  # started
        began = time.monotonic()
        assert child.ask(Hang(), timeout_s=0.5) == Lost(timed_out=True)
        assert time.monotonic() - began < 10
        assert not child.alive() and child.returncode == -9
        assert child.ask(PingRequest(), timeout_s=5) == Lost()  # a dead child is asked nothing


def test_a_child_that_dies_mid_answer_is_lost_at_once_and_its_log_says_why():
    with answering() as child:
        began = time.monotonic()
        assert child.ask(Die(), timeout_s=SLOW_START_S) == Lost(timed_out=False)
        assert time.monotonic() - began < SLOW_START_S / 2
        assert child.wait(10) and child.returncode == 3
        assert child.log_tail(1) == "dying: out of luck"
        assert child.log_tail() == "started | dying: out of luck"


def test_a_line_that_is_not_an_answer_is_lost_and_a_dead_childs_line_reading_says_it_ended():
    with answering() as child:
        assert child.ask(Garbage(), timeout_s=SLOW_START_S) == Lost()
        child.send(json.dumps({"op": "exit"}))
        with pytest.raises(ChildEnded):
            child.read_line(SLOW_START_S)


def test_kill_ends_the_childs_whole_process_group_and_waits_for_it():
    child = answering()
    try:
        child.send(json.dumps({"op": "spawn"}))
        sleeper = json.loads(child.read_line(SLOW_START_S))["pid"]
        assert not gone(sleeper, 0.2)
        assert child.kill() and not child.alive()
        assert gone(sleeper), "the child's own process outlived the kill"
    finally:
        child.close()


def test_close_asks_the_child_to_exit_then_removes_its_temporary_log():
    child = answering(log_prefix="memprobe-test-child-")
    assert child.ask(PingRequest(), timeout_s=SLOW_START_S).ok
    log = child.log_path
    assert log is not None and log.name.startswith("memprobe-test-child-") and log.exists()
    began = time.monotonic()
    child.close(ExitRequest())
    assert time.monotonic() - began < 5 and child.returncode == 0  # it exited when asked, not killed
    assert not log.exists() and child.closed
    child.close()  # a second close does nothing


def test_close_kills_a_child_that_does_not_exit_within_its_wait():
    child = answering()
    child.send(json.dumps({"op": "hang"}))
    began = time.monotonic()
    child.close(ExitRequest(), wait_s=0.5)
    assert time.monotonic() - began < 10 and child.returncode == -9


def test_leaving_the_with_block_by_an_exception_kills_the_child_at_once():
    with pytest.raises(KeyboardInterrupt), answering() as child:
        child.send(json.dumps({"op": "hang"}))
        raise KeyboardInterrupt
    assert child.returncode == -9 and child.closed


def test_the_child_gets_the_safety_switches_the_callers_variables_and_its_watchers_pid(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # the user's own choice stands
    monkeypatch.delenv("NVSHMEM_DISABLE_NVLS", raising=False)
    keys = [*SAFE_ENV, PARENT_ENV, "CUDA_VISIBLE_DEVICES"]
    for watched in (True, False):
        with answering(env={"CUDA_VISIBLE_DEVICES": ""}, watched=watched) as child:
            child.send(json.dumps({"op": "env", "keys": keys}))
            env = json.loads(child.read_line(SLOW_START_S))
        assert env["NCCL_NVLS_ENABLE"] == "1" and env["NVSHMEM_DISABLE_NVLS"] == "1"
        assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" and env["CUDA_VISIBLE_DEVICES"] == ""
        assert env[PARENT_ENV] == (str(os.getpid()) if watched else None)


def test_lines_are_polled_without_waiting_and_the_end_of_the_output_is_seen():
    script = "import sys, time\nsys.stdin.readline()\nprint('one', flush=True)\nprint('two', flush=True)\n"
    with Child.start([sys.executable, "-c", script]) as child:
        began = time.monotonic()
        assert [child.lines() for _ in range(50)] == [[]] * 50 and time.monotonic() - began < 1.0
        child.send("go")
        seen: list[str] = []
        deadline = time.monotonic() + SLOW_START_S
        while not child.output_ended and time.monotonic() < deadline:
            seen += child.lines(0.5)
        assert seen == ["one", "two"] and child.output_ended


def test_communicate_gives_every_line_of_a_child_that_answers_once_and_ends():
    script = "import sys\nline = sys.stdin.readline()\nprint('noise', flush=True)\nsys.stdout.write(line.upper())\n"
    with Child.start([sys.executable, "-c", script]) as child:
        assert child.communicate("answer me", SLOW_START_S) == ["noise", "ANSWER ME"]
        assert child.returncode == 0
    with Child.start([sys.executable, "-c", "import time; time.sleep(600)"]) as child:
        with pytest.raises(TimeoutError):
            child.communicate("anyone?", 0.5)
        assert child.returncode == -9


def test_a_silent_child_logs_its_output_to_the_file_given_which_stays(tmp_path):
    log = tmp_path / "launcher.log"
    script = "print('*****'); print('working'); import sys; print('failed: no GPU', file=sys.stderr)"
    with Child.start([sys.executable, "-c", script], talk=False, log=log) as child:
        assert child.wait(SLOW_START_S) and child.returncode == 0
        assert child.log_tail(6, skip_prefix="*") == "working | failed: no GPU"
        with pytest.raises(OSError):
            child.send("it reads nothing")
    assert log.exists()


def test_a_program_that_cannot_start_raises_and_leaves_no_log(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(OSError):
        Child.start([str(tmp_path / "no-such-program")])
    assert list(tmp_path.iterdir()) == []


FORK_SERVER = textwrap.dedent("""
    import sys
    from memprobe.probe.child.zygote import serve_forks

    def serve(out):
        for line in sys.stdin:
            out.write(line.upper())
        return 0

    sys.exit(serve_forks(int(sys.argv[1]), serve))
""")


def test_a_forked_child_is_used_like_an_execd_one_and_a_closed_server_forks_no_more():
    server = ForkServer(
        lambda fd: [sys.executable, "-c", FORK_SERVER, str(fd)], env={"PYTHONPATH": str(REPO)}, watched=True
    )
    try:
        child = server.spawn("memprobe-test-forked-")
        assert child.forked and child.pid != server.pid
        child.send("hello")
        assert child.read_line(SLOW_START_S) == "HELLO"
        assert child.alive() and child.kill() and not child.alive()
        child.close()
        assert child.log_path is not None and not child.log_path.exists()
    finally:
        server.close()
    assert not server.child.alive()
    with pytest.raises(ForkServerError):
        server.spawn()


def test_a_silent_child_is_read_no_line_and_asked_nothing(tmp_path):
    with Child.start(["sleep", "600"], talk=False, log=tmp_path / "log") as child:
        began = time.monotonic()
        with pytest.raises(ChildEnded):
            child.read_line(30)
        assert child.ask(PingRequest(), timeout_s=30) == Lost() and child.lines(0.5) == [] and child.output_ended
        assert time.monotonic() - began < 5 and child.alive()
