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
