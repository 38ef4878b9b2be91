"""Comma-separated lists as people type them (`-p fp16,bf16`, `--gpus 1,2`, CUDA_VISIBLE_DEVICES): one reading
for every command, the API and the process code."""

from __future__ import annotations

from collections.abc import Sequence


def comma_items(text: str | None) -> list[str]:
    """The items of a comma-separated list, stripped, empty ones left out ("fp16, bf16," -> ["fp16", "bf16"];
    None or "" -> [])."""
    return [item.strip() for item in (text or "").split(",") if item.strip()]


def listed(value: str | Sequence[str]) -> list[str]:
    """A comma-separated string's items (comma_items), or a sequence's as a list: how the API takes a list option
    either way ("fp16,bf16" or ["fp16", "bf16"])."""
    return comma_items(value) if isinstance(value, str) else list(value)


def visible_devices(value: str | None) -> list[str] | None:
    """The devices a CUDA_VISIBLE_DEVICES value lists, in order; None where the variable is unset (every GPU is
    visible), [] where it is set but empty (none is)."""
    return None if value is None else comma_items(value)
