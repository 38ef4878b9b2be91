"""The fork server (runner.Zygote): trial processes forked pre-imported, crashes seen, fallback to exec."""

from __future__ import annotations

import os
import signal
import time

import pytest

from memprobe.core.process.child import ForkServerError
from memprobe.core.process.protocol import Lost, PingRequest, Pong, Ready
from memprobe.core.workload.registry import load_registry
from memprobe.probe.runner import Worker, WorkerFactory, WorkerSpec, Zygote

BUDGET = 8 << 20


@pytest.fixture(scope="module")
def toy_spec():
    return WorkerSpec(load_registry()["toy"], "fp32", "train", "cpu", BUDGET, timeout_s=120)


@pytest.fixture(scope="module")
def factory(toy_spec):
    made = WorkerFactory(toy_spec.workload, forkserver=True)
    yield made
    made.close()


def test_forked_workers_run_trials_and_start_without_imports(factory, toy_spec):
    first = factory.fresh(toy_spec)  # waits for the server's imports
    assert first.child.forked
    assert first.trial(16, 3).fits
    first.close()
    assert not first.alive

    started = time.monotonic()
    second = factory._new_worker()
    spawn_seconds = time.monotonic() - started
    try:
        # exec'ing python and importing torch takes seconds; a fork takes milliseconds
        assert spawn_seconds < 1.0, spawn_seconds
        second.setup(toy_spec)
        assert isinstance(second.info, Ready) and second.info.capacity_bytes == BUDGET
        assert second.trial(10**6, 3).outcome == "oom"
        assert second.trial(16, 3).fits  # usable after an OOM
        assert second.child.pid != first.child.pid
    finally:
        second.close()


def test_killed_forked_worker_is_a_crash(factory, toy_spec):
    worker = factory.fresh(toy_spec)
    os.kill(worker.child.pid, signal.SIGKILL)
    attempt = worker.trial(4, 3)
    assert attempt.outcome == "crash" and "died" in attempt.message
    worker.close()
    assert not worker.alive


def assert_falls_back_to_exec(made: WorkerFactory, toy_spec) -> None:
    """The factory's next process is exec'd (a forked one must not be used), trains, and the server is dropped."""
    worker = made.fresh(toy_spec)
    try:
        assert not worker.child.forked, "a broken fork server's process must not be used"
        assert worker.trial(16, 3).fits
    finally:
        worker.close()
    assert made._zygote is None


def test_factory_falls_back_to_exec_when_the_server_is_gone(toy_spec):
    made = WorkerFactory(toy_spec.workload, forkserver=True)
    try:
        made._zygote.child.kill()
        assert_falls_back_to_exec(made, toy_spec)
    finally:
        made.close()


def test_spawn_from_a_closed_server_raises(toy_spec):
    zygote = Zygote("memprobe.workloads.toy")
    zygote.close()
    with pytest.raises(ForkServerError):
        Worker("memprobe.workloads.toy", zygote)


def test_environment_switch_turns_the_fork_server_off(monkeypatch, toy_spec):
    monkeypatch.setenv("MEMPROBE_FORKSERVER", "0")
    made = WorkerFactory(toy_spec.workload)
    try:
        assert made._zygote is None
    finally:
        made.close()


@pytest.mark.slow
def test_a_forked_process_that_does_not_answer_the_ping_makes_the_factory_fall_back(toy_spec, monkeypatch):
    import memprobe.probe.runner as runner

    made = WorkerFactory(toy_spec.workload, forkserver=True)
    try:
        real_request = runner.Worker.request

        def hang_on_ping(self, request, timeout_s):
            if isinstance(request, PingRequest):
                return Lost(timed_out=True)  # as if the forked child never answered
            return real_request(self, request, timeout_s)

        monkeypatch.setattr(runner.Worker, "request", hang_on_ping)
        assert_falls_back_to_exec(made, toy_spec)
    finally:
        made.close()


def test_ping_answers_from_a_forked_process(factory):
    worker = factory._new_worker()
    try:
        assert worker.request(PingRequest(), 30) == Pong(True, worker.child.pid)
    finally:
        worker.close()
