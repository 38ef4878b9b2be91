"""Every process memprobe starts gets core.child_env's environment: the GPU safety switches reach each one.

The static half walks memprobe/ for every subprocess call and every spawn through the one handle (core/process/child.py's
Child.start and ForkServer); the other half starts each spawn site with subprocess.Popen recorded and checks what
each child would get.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from memprobe.core.process.child_env import SAFE_ENV, child_env

PACKAGE = Path(__file__).resolve().parents[1] / "memprobe"
SPAWNERS = {"Popen", "run", "call", "check_call", "check_output"}
RECIPES = {"child_env"}
# Where a process may be started by subprocess directly: the handle itself, and nvidia-smi's one-shot run.
DIRECT = {"core/process/child.py", "probe/distributed/topology.py"}
# Every spawn site, each through the handle: Child.start(...) or a ForkServer (probe/runner.Zygote is one).
SITES = {
    "probe/runner.py",  # the trial processes (exec'd) and the fork server
    "probe/hint.py",  # the predicted start
    "probe/nothing_fits.py",  # the nothing-fits trace
    "probe/distributed/launch.py",  # torchrun launches (and the standbys, through start_torchrun)
    "probe/parallel.py",  # --parallel scans
}


def _functions(path: Path) -> list[ast.AST]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _spawn_calls() -> list[tuple[Path, ast.Call, ast.AST]]:
    """(module, call, enclosing function) for every subprocess.<spawner>(...) in memprobe/."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for scope in _functions(path):
            for node in ast.walk(scope):
                func = node.func if isinstance(node, ast.Call) else None
                if (
                    isinstance(func, ast.Attribute)
                    and func.attr in SPAWNERS
                    and isinstance(func.value, ast.Name)
                    and func.value.id == "subprocess"
                ):
                    found.append((path, node, scope))
    return found


def _handle_calls() -> dict[str, int]:
    """Module (relative to memprobe/) -> how many Child.start(...) calls and ForkServer subclasses it has."""
    found: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if (
                    node.func.attr == "start"
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "Child"
                ):
                    found[where] = found.get(where, 0) + 1
            if isinstance(node, ast.ClassDef) and any(
                isinstance(b, ast.Name) and b.id == "ForkServer" for b in node.bases
            ):
                found[where] = found.get(where, 0) + 1
    return found


def _names_called(node: ast.AST) -> set[str]:
    return {
        n.func.id if isinstance(n.func, ast.Name) else n.func.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))
    }


def test_every_process_is_started_through_the_handle_with_an_environment_from_the_one_recipe():
    calls = _spawn_calls()
    assert {str(path.relative_to(PACKAGE)) for path, _c, _s in calls} == DIRECT, "a child started outside core/child"
    for path, call, scope in calls:
        where = f"{path.relative_to(PACKAGE)}:{call.lineno}"
        env = next((k.value for k in call.keywords if k.arg == "env"), None)
        assert env is not None, f"{where}: a child started without env="
        if isinstance(env, ast.Name):  # a variable: the function that spawns must build it with the recipe
            assert _names_called(scope) & RECIPES, f"{where}: env={env.id} not built by child_env"
        else:
            assert _names_called(env) & RECIPES, f"{where}: env= not built by child_env"
    assert set(_handle_calls()) - {"core/process/child.py"} == SITES  # ForkServer starts its server as a Child


def test_the_recipe_sets_the_switches_where_unset_and_keeps_the_users():
    env = child_env({"PATH": "/bin", "NCCL_NVLS_ENABLE": "1"}, CUDA_VISIBLE_DEVICES="")
    assert env["PATH"] == "/bin" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["NCCL_NVLS_ENABLE"] == "1"  # the user's own choice stands
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" and env["NVSHMEM_DISABLE_NVLS"] == "1"


def _start_site(site: str, given: dict[str, str], folder: Path) -> None:
    """Start spawn site `site` the way the scan does, with `given` as the scan's variables where it takes them."""
    from fakes import TOY
    from memprobe.probe import nothing_fits, runner
    from memprobe.probe.distributed.launch import LaunchRequest, start_launch
    from memprobe.probe.distributed.standby import Standby
    from memprobe.probe.hint import PredictedStart
    from memprobe.probe.options import ScanOptions
    from memprobe.probe.parallel import run_parallel

    if site == "trial process":
        runner.Worker("memprobe.workloads.toy", env=given)
    elif site == "fork server":
        runner.Zygote("memprobe.workloads.toy", env=given)
    elif site == "predicted start":
        with PredictedStart(TOY, ["fp32"], env=given) as start:  # says it could not start, raises nothing
            assert start.ask("fp32", 1 << 30).poll()["error"] == "the prediction process could not be started"
        raise OSError("recorded")
    elif site == "nothing fits":
        nothing_fits._default_need(TOY, "fp32", env=given)
    elif site == "torchrun launch":
        start_launch(LaunchRequest(TOY, "fp32", "ddp", 2, [1], device="cpu"))
    elif site == "standby":
        Standby(2, "cpu", TOY)
    elif site == "--parallel scan":
        run_parallel([TOY], ScanOptions(["fp32"], device="cpu"), ["0"], folder)


WATCHED = {"trial process", "fork server", "predicted start", "nothing fits"}  # they die with the scan (lifeline)
GIVEN = {"trial process", "fork server", "predicted start", "nothing fits"}  # they take ScanOptions.env
HIDDEN = {"predicted start", "nothing fits"}  # they trace on the CPU: CUDA hidden whatever the scan says


@pytest.mark.parametrize(
    "site", ["trial process", "fork server", *sorted(HIDDEN), "torchrun launch", "standby", "--parallel scan"]
)
def test_each_spawn_site_gives_its_child_the_switches_and_the_scans_variables(site, monkeypatch, tmp_path):
    """Each spawn site, started with subprocess.Popen recorded (and failing, as a missing python would): the child's
    environment has every switch, the scan's variables on top (ScanOptions.env: its GPU and import path) where the
    site takes them, CUDA hidden from the predicting children, this process's pid where the child watches it; and a
    site whose child cannot start leaves no launch folder."""
    import os
    import subprocess
    import tempfile

    from memprobe.core.process.lifeline import PARENT_ENV

    for key in SAFE_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    started: list[dict[str, str]] = []

    def recorded(*args, env, **kwargs):
        started.append(env)
        raise OSError("recorded")

    monkeypatch.setattr(subprocess, "Popen", recorded)
    given = {"CUDA_VISIBLE_DEVICES": "5", "PYTHONPATH": "/somewhere"}
    with pytest.raises(OSError, match="recorded"):
        _start_site(site, given, tmp_path / "out")
    (env,) = started
    assert {k: env[k] for k in SAFE_ENV} == SAFE_ENV
    assert (PARENT_ENV in env) == (site in WATCHED) and env.get(PARENT_ENV, str(os.getpid())) == str(os.getpid())
    if site in GIVEN:
        assert env["PYTHONPATH"] == "/somewhere"
        assert env["CUDA_VISIBLE_DEVICES"] == ("" if site in HIDDEN else "5")
    else:  # torchrun and --parallel scans: this checkout on their import path, the GPUs of this process
        assert str(PACKAGE.parent) in env["PYTHONPATH"].split(os.pathsep)
        assert env["CUDA_VISIBLE_DEVICES"] == "3,5"  # a --parallel scan pins a GPU on CUDA only; this one is the CPU
    assert not list(tmp_path.glob("memprobe-*")), "a child that could not start left its log or launch folder"


def test_a_watched_child_is_given_this_process_pid_and_others_are_not():
    import os

    from memprobe.core.process.lifeline import PARENT_ENV

    assert child_env({}, watched=True)[PARENT_ENV] == str(os.getpid())
    assert PARENT_ENV not in child_env({})


def test_find_max_batch_gives_its_processes_the_gpu_and_import_path_and_leaves_os_environ_alone(monkeypatch, tmp_path):
    """The API once narrowed CUDA_VISIBLE_DEVICES and set PYTHONPATH in os.environ for the call (and put them back);
    now they are ScanOptions.env, and the caller's environment is the same during the call as before it."""
    import os

    import memprobe
    import memprobe.probe.scan
    from memprobe.core.records.results import ScanResult

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    before = dict(os.environ)
    seen = []

    def recorded(workload, opts, out_dir, progress):
        seen.append((dict(opts.env), dict(os.environ)))
        return ScanResult(workload=workload.to_dict(), environment={}, settings=opts.to_dict()), None

    monkeypatch.setattr(memprobe.probe.scan, "scan_workload", recorded)
    memprobe.find_max_batch("toy", "fp32", device=1)
    (tmp_path / "env_model.py").write_text("def build(device, precision):\n    raise NotImplementedError\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # where this process imports the build function from
    import env_model  # type: ignore[import-not-found]

    memprobe.find_max_batch(env_model.build, "fp32", device=0)
    (first, during_first), (second, during_second) = seen
    assert first == {"CUDA_VISIBLE_DEVICES": "5"}
    assert second["CUDA_VISIBLE_DEVICES"] == "3" and str(tmp_path) in second["PYTHONPATH"].split(os.pathsep)
    assert during_first == during_second == before == dict(os.environ)
