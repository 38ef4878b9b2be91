"""A killed scan leaves no trial process behind: parent-death signal and pipe watchers.

A scan-like parent starts, on the CPU with the toy workload, a fork server, a trial process forked from
it and an exec'd trial process, sets both running a long trial, starts the search's predict child
(probe/hint.py), and is then killed. Every process it
started must be gone within a few seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only")

REPO = Path(__file__).resolve().parents[1]

PARENT = textwrap.dedent("""
    import json, signal, sys, time
    # SIGHUP as a scan's own process has it, whatever the test runner was started with: an ignored or blocked signal
    # is inherited through exec (nohup, a backgrounded job), and the parent would not die of it
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
    from memprobe.core.workload.registry import load_registry
    from memprobe.probe.hint import PredictedStart
    from memprobe.probe.runner import Worker, WorkerFactory, WorkerSpec

    toy = load_registry()["toy"]
    hint = PredictedStart(toy, ["fp32"]).__enter__()  # the search's predict child, tracing beside the trials
    spec = WorkerSpec(toy, "fp32", "train", "cpu", 8 << 20, timeout_s=600)
    factory = WorkerFactory(toy, forkserver=True)
    forked = factory.fresh(spec)
    execd = Worker(factory.preload)
    execd.setup(spec)
    for worker in (forked, execd):  # a trial that runs for minutes: the parent dies mid-trial
        worker.child.send(json.dumps({"op": "trial", "batch": 16, "steps": 10**7}))
    print(json.dumps({"zygote": factory._zygote.pid, "forked": forked.child.pid,
                      "exec": execd.child.pid, "hint": hint.child.pid}), flush=True)
    time.sleep(600)
""")


LOADED_S = 30.0  # how long a process may take to end on a machine whose cores every test is using


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def descendants(root: int) -> set[int]:
    """Every process below `root` in the process tree, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGHUP], ids=["SIGKILL", "SIGHUP"])
@pytest.mark.slow
def test_killed_parent_leaves_no_trial_process(sig):
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = parent.stdout.readline()
        assert line, "the scan-like parent did not start its trial processes"
        pids = json.loads(line)
        time.sleep(1.0)  # both trials are running now
        started = descendants(parent.pid)
        assert set(pids.values()) <= started, (pids, started)
        assert all(alive(pid) for pid in pids.values())
        os.kill(parent.pid, sig)
        parent.wait(timeout=LOADED_S)
        # The kernel kills them at once (parent-death signal); dying takes a dead process' turn on the CPU to free its
        # memory, which a busy machine gives late (the predict child runs at nice 19): waited for, on a busy machine
        # for long, on an idle one for a fraction of a second.
        deadline = time.monotonic() + LOADED_S
        while time.monotonic() < deadline and any(alive(pid) for pid in started):
            time.sleep(0.1)
        left = {pid for pid in started if alive(pid)}
        assert not left, f"still running {time.monotonic() - deadline + LOADED_S:.1f} s after the parent died: {left}"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
