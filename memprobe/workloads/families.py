"""Which module builds each workload family: the registry (core) knows the family names only; the builders live
here, beside the modules they name, and are imported on first use (the module imports torch and its library)."""

from __future__ import annotations

import importlib
from typing import Any, Callable

# family -> "module:function" that builds the training task. Imported lazily by the trial worker.
BUILDERS: dict[str, str] = {
    "toy-mlp": "memprobe.workloads.toy:build",
    "bert-pretraining": "memprobe.workloads.bert:build_pretraining",
    "bert-squad": "memprobe.workloads.bert:build_squad",
    "transformer-translation": "memprobe.workloads.translation:build",
    "timm-classifier": "memprobe.workloads.vision:build",
    "pix2pixhd": "memprobe.workloads.pix2pixhd:build",
    # Models given by name or by the user's own code (memprobe.workloads.custom resolves them, without torch).
    "timm": "memprobe.workloads.timm_any:build",
    "hf": "memprobe.workloads.hf_config:build",
    "module": "memprobe.workloads.user_module:build",
    "llama-causal-lm": "memprobe.workloads.llm:build",
}


def family_module(family: str) -> str:
    """The module that builds `family` (what a trial worker preloads). Raises KeyError for an unknown family."""
    return BUILDERS[family].partition(":")[0]


def family_builder(family: str) -> Callable[..., Any]:
    """The function that builds a family's training task (imports its module, and so torch, now).

    Raises KeyError for an unknown family and ImportError when its module cannot be imported.
    """
    module, _, function = BUILDERS[family].partition(":")
    return getattr(importlib.import_module(module), function)
