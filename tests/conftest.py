"""Shared fixtures and fakes for memprobe's CPU-only tests."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from memprobe.core.workload.registry import default_registry_path, load_registry

# The shared fakes (tests/fakes.py) hold asserts (check_invariants, assert_all_closed, ...): rewrite them as pytest
# rewrites a test module's, so a failed check says what it compared. This must run before any test imports it.
pytest.register_assert_rewrite("fakes")


def _share_the_cores_between_workers() -> None:
    """Under pytest-xdist (`-n auto`), N workers share the machine's cores, and each torch, in the worker and in every
    process a test starts (trial processes, fork servers, ranks, predict's children, the CLI), would otherwise run
    as many OpenMP threads as there are cores: on 2 cores, 2 workers' threads spun against each other, and five test
    files took 145 s and 269 CPU seconds instead of 109 s and 186. Each worker's share is cores // N threads (1 on 2
    cores), through OMP_NUM_THREADS, which every child inherits; set before any test imports torch. An
    OMP_NUM_THREADS already set is kept, and a run without workers is left as it was."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers < 2 or "OMP_NUM_THREADS" in os.environ:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    os.environ["OMP_NUM_THREADS"] = str(max(1, cores // workers))
    if "torch" in sys.modules:  # imported already (by a plugin): its thread pool is sized; resize it
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


_share_the_cores_between_workers()


def has_nvidia_gpu() -> bool:
    """True when NVML sees a GPU (then the 'no GPU' tests do not apply to this machine)."""
    try:
        from memprobe.probe.device import gpus

        return bool(gpus())
    except Exception:  # noqa: BLE001 - no driver, no library, no GPU: all mean "no GPU"
        return False


@pytest.fixture(autouse=True, scope="session")
def _sighup_heard():
    """Under `nohup` (or any parent that ignores SIGHUP) the test process starts with SIGHUP ignored, and memprobe
    rightly keeps an ignored SIGHUP ignored (core/process/interrupts.py): the tests that send SIGHUP need it heard. Give the
    session, and the commands it starts, the default disposition."""
    before = signal.getsignal(signal.SIGHUP)
    if before == signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGHUP, before)


@pytest.fixture(autouse=True, scope="module")
def _no_dispatch_mode_left():
    """A torch dispatch mode left on the stack (an in-process trial Session not closed) runs every later op of the
    pytest process through it: a test module after it ran 40 times slower and one failed. Fail the module that
    leaves one, and take it off so the modules after it run as they would alone."""
    yield
    if "torch" not in sys.modules:
        return
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack, _pop_mode

    left = [type(m).__name__ for m in _get_current_dispatch_mode_stack()]
    while _get_current_dispatch_mode_stack():
        _pop_mode()
    if left:
        pytest.fail(f"this module left torch dispatch modes on the stack: {left} (close the Session it set up)")


class RecordingProgress:
    """A ScanProgress that records every call, to check what the scan announced."""

    def __init__(self) -> None:
        self.precisions: list[tuple[str, str]] = []
        self.starts: list[tuple[int, int, bool]] = []  # (index, batch, fresh)
        self.ends: list = []
        self.notes: list[str] = []

    def precision_start(self, workload: str, precision: str) -> None:
        self.precisions.append((workload, precision))

    def trial_start(self, workload: str, precision: str, index: int, batch: int, fresh: bool) -> None:
        self.starts.append((index, batch, fresh))

    def trial_end(self, attempt) -> None:
        self.ends.append(attempt)

    def note(self, text: str) -> None:
        self.notes.append(text)


@pytest.fixture
def scans_seen(monkeypatch, tmp_path):
    """The scan replaced by a recorder of (workload, ScanOptions as a dict), for the CLI and the API alike
    (what each was asked to scan, with nothing run)."""
    import memprobe.probe.scan
    from memprobe.core.records.results import ScanResult

    seen: list[tuple[str, dict]] = []

    def recorded(workload, opts, out_dir, progress):
        seen.append((workload.name, opts.to_dict()))
        return ScanResult(workload=workload.to_dict(), environment={}, settings=opts.to_dict()), tmp_path / "x.json"

    monkeypatch.setattr(memprobe.probe.scan, "scan_workload", recorded)
    return seen


@pytest.fixture(scope="session")
def packaged_models() -> Path:
    return default_registry_path()


@pytest.fixture(scope="session")
def toy():
    """The test-only toy workload from the packaged registry."""
    return load_registry()["toy"]


@pytest.fixture
def run():
    """Invoke the memprobe CLI through click's CliRunner: run("scan", "--model", "toy", ...)."""
    from click.testing import CliRunner

    from memprobe.cli import main

    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(main, [str(a) for a in args])

    return invoke


TESTS = Path(__file__).resolve().parent


@contextmanager
def memprobe_process(args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> Iterator:
    """`python -m memprobe *args` from this checkout, started in a session of its own with stdout and stderr piped
    (`env` added to the environment), for the tests that signal a real command; whatever is left of its session at
    the end is killed, so a failed test leaves no process behind."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "memprobe", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(TESTS.parent), **(env or {})},
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def wait_for(proc: subprocess.Popen, text: str, timeout: float) -> str:
    """stderr lines of `proc` until one holds `text` (or it ends, or `timeout` seconds pass)."""
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen += line
        if text in line or (not line and proc.poll() is not None):
            break
    return seen


@pytest.fixture(scope="module")
def timm_standin():
    """timm importable in this process for the test module: the real torchvision where it works, else the stand-in
    (tests/torchvision_standin.py), taken out again after the module. Skips without timm."""
    from torchvision_standin import forget, install_standin, torchvision_usable

    if importlib.util.find_spec("timm") is None:
        pytest.skip("timm is not installed")
    if torchvision_usable():
        yield
        return
    finder = install_standin()
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        forget(("torchvision", "timm"))


@pytest.fixture
def standin_in_trial_processes(monkeypatch):
    """timm in the trial processes too: a sitecustomize installs the stand-in torchvision there when the real
    one is unusable (see tests/torchvision_standin.py). Skips without timm."""
    if importlib.util.find_spec("timm") is None:
        pytest.skip("timm is not installed")
    paths = [str(TESTS / "standin_site"), str(TESTS)]
    monkeypatch.setenv("PYTHONPATH", ":".join(paths + [p for p in sys.path if p]))


@pytest.fixture
def scan_options_seen(monkeypatch, tmp_path):
    """Replace the scan itself with a recorder: `memprobe scan` then only parses its options. Returns the
    list of ScanOptions each scan was called with."""
    import memprobe.probe.scan
    from memprobe.core.records.results import ScanResult

    seen = []

    def fake_scan_workload(workload, opts, out_dir, progress):
        seen.append(opts)
        return ScanResult(workload=workload.to_dict(), environment={}, settings=opts.to_dict()), tmp_path / "x.json"

    monkeypatch.setattr(memprobe.probe.scan, "scan_workload", fake_scan_workload)
    return seen


def pytest_addoption(parser: pytest.Parser) -> None:
    """--torch-include: the include/ folder of another torch wheel, for tests/test_torch_facts.py (default: the
    installed torch's)."""
    parser.addoption(
        "--torch-include",
        default=None,
        help="torch include/ folder whose headers tests/test_torch_facts.py reads (default: installed)",
    )
