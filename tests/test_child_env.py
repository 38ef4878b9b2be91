"""Every process memprobe starts gets core.child_env's environment: the GPU safety switches reach each one.

The static half walks memprobe/ for every subprocess call and asserts it passes env= built by child_env (or
launch_env, which starts from it); the other half runs the recipes and checks what a child would get.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from memprobe.core.child_env import SAFE_ENV, child_env

PACKAGE = Path(__file__).resolve().parents[1] / "memprobe"
SPAWNERS = {"Popen", "run", "call", "check_call", "check_output"}
RECIPES = {"child_env", "launch_env", "_worker_env"}


def _spawn_calls() -> list[tuple[Path, ast.Call, ast.AST]]:
    """(module, call, enclosing function) for every subprocess.<spawner>(...) in memprobe/."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for scope in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
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


def _names_called(node: ast.AST) -> set[str]:
    return {
        n.func.id if isinstance(n.func, ast.Name) else n.func.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))
    }


def test_every_spawn_site_passes_an_environment_from_the_one_recipe():
    calls = _spawn_calls()
    assert len(calls) >= 8  # trial worker, fork server, hint, nothing-fits, torchrun x2, --parallel, nvidia-smi
    for path, call, scope in calls:
        where = f"{path.relative_to(PACKAGE)}:{call.lineno}"
        env = next((k.value for k in call.keywords if k.arg == "env"), None)
        assert env is not None, f"{where}: a child started without env="
        if isinstance(env, ast.Name):  # a variable: the function that spawns must build it with a recipe
            assert _names_called(scope) & RECIPES, f"{where}: env={env.id} not built by child_env/launch_env"
        else:
            assert _names_called(env) & RECIPES, f"{where}: env= not built by child_env/launch_env"


def test_the_recipe_sets_the_switches_where_unset_and_keeps_the_users():
    env = child_env({"PATH": "/bin", "NCCL_NVLS_ENABLE": "1"}, CUDA_VISIBLE_DEVICES="")
    assert env["PATH"] == "/bin" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["NCCL_NVLS_ENABLE"] == "1"  # the user's own choice stands
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" and env["NVSHMEM_DISABLE_NVLS"] == "1"


@pytest.mark.parametrize("recipe", ["worker", "launch"])
def test_trial_workers_and_launches_get_every_switch(recipe, monkeypatch):
    for key in SAFE_ENV:
        monkeypatch.delenv(key, raising=False)
    if recipe == "worker":
        from memprobe.probe.runner import _worker_env as make
    else:
        from memprobe.probe.distributed.launch import launch_env as make
    env = make()
    assert {k: env[k] for k in SAFE_ENV} == SAFE_ENV


def test_a_watched_child_is_given_this_process_pid_and_others_are_not():
    import os

    from memprobe.core.lifeline import PARENT_ENV

    assert child_env({}, watched=True)[PARENT_ENV] == str(os.getpid())
    assert PARENT_ENV not in child_env({})


def test_a_scans_variables_reach_its_trial_processes_and_cuda_stays_hidden_from_the_predicting_ones(monkeypatch):
    """ScanOptions.env (find_max_batch's GPU and import path) goes on top of this process's environment in each
    recipe; the predicted-start and nothing-fits children keep CUDA hidden whatever it says."""
    import subprocess

    from memprobe.probe import nothing_fits
    from memprobe.probe.hint import PredictedStart
    from memprobe.probe.runner import _worker_env

    given = {"CUDA_VISIBLE_DEVICES": "5", "PYTHONPATH": "/somewhere"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    worker = _worker_env(given)
    assert worker["CUDA_VISIBLE_DEVICES"] == "5" and worker["PYTHONPATH"] == "/somewhere"
    assert worker["PYTHONUNBUFFERED"] == "1" and worker["NCCL_NVLS_ENABLE"] == "0"

    started: list[dict[str, str]] = []

    def recorded(*args, env, **kwargs):
        started.append(env)
        raise OSError("recorded")  # each spawner says a child that cannot start in its own way

    monkeypatch.setattr(subprocess, "Popen", recorded)
    monkeypatch.setattr(subprocess, "run", recorded)
    from fakes import TOY

    with PredictedStart(TOY, ["fp32"], env=given):
        pass
    with pytest.raises(OSError):
        nothing_fits._default_need(TOY, "fp32", env=given)
    for env in started:
        assert env["CUDA_VISIBLE_DEVICES"] == "" and env["PYTHONPATH"] == "/somewhere"
    assert len(started) == 2


def test_find_max_batch_gives_its_processes_the_gpu_and_import_path_and_leaves_os_environ_alone(monkeypatch, tmp_path):
    """The API once narrowed CUDA_VISIBLE_DEVICES and set PYTHONPATH in os.environ for the call (and put them back);
    now they are ScanOptions.env, and the caller's environment is the same during the call as before it."""
    import os

    import memprobe
    import memprobe.probe.scan
    from memprobe.core.results import ScanResult

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
