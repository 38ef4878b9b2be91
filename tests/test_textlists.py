"""One reading of comma-separated lists for every command, the API and the process code."""

from __future__ import annotations

from memprobe.core.textlists import comma_items, visible_devices


def test_items_are_stripped_and_empty_ones_left_out():
    assert comma_items(" fp16, bf16,,") == ["fp16", "bf16"]
    assert comma_items("") == [] and comma_items(None) == [] and comma_items(" , ") == []


def test_visible_devices_tells_unset_from_empty():
    assert visible_devices(None) is None  # every GPU visible
    assert visible_devices("") == []  # none is
    assert visible_devices("2, 3") == ["2", "3"]
