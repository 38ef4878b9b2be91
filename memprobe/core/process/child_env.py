"""The one environment recipe for every process memprobe starts (trial workers, the fork server, the predicted-start
and nothing-fits children, torchrun launches, `--parallel` scans, nvidia-smi).

Each gets the caller's environment with the GPU safety switches set where the user has not set them: NVLink SHARP
(multicast) off in NCCL, and symmetric memory's and NVSHMEM's multicast off (the lending machines' KINDS.md says
why; a process that never touches NCCL loses nothing by having them).
"""

from __future__ import annotations

import os
from typing import Mapping

from memprobe.core.process.lifeline import PARENT_ENV

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def child_env(base: Mapping[str, str] | None = None, *, watched: bool = False, **overrides: str) -> dict[str, str]:
    """The environment for a child process: `base` (default os.environ) with SAFE_ENV set where unset, then
    `overrides` (for example CUDA_VISIBLE_DEVICES="" for a child that must not see a GPU). `watched`: the child
    watches this process and ends when it dies (core/process/lifeline.py), so it is given this process's pid, which lets it
    see a parent that died before it set its parent-death signal."""
    env = dict(os.environ if base is None else base)
    for key, value in SAFE_ENV.items():
        env.setdefault(key, value)
    env.update(overrides)
    if watched:
        env[PARENT_ENV] = str(os.getpid())
    return env
