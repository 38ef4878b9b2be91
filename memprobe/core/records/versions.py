"""The libraries whose versions decide a model's code path, and versions compared as releases. No torch.

A result file records them (environment.versions); `predict` records the ones it traced with. A version can change
a model's code path and so its memory and speed (T5's attention in transformers 5.17 and 5.24), so `report` and
`predict --compare` say where two differ; torch's local build tag (+cpu, +cu130) is not a difference.
"""

from __future__ import annotations

from typing import Any

LIBRARIES = ("torch", "transformers", "timm")


def release(version: Any) -> str:
    """A version as a release, without its local build tag: "2.11.0+cu130" -> "2.11.0"."""
    return str(version).split("+")[0]
