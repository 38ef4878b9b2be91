"""One reading of comma-separated lists for every command, the API and the process code."""

from __future__ import annotations

from memprobe.core.text.textlists import comma_items, visible_devices


def test_items_are_stripped_and_empty_ones_left_out():
    assert comma_items(" fp16, bf16,,") == ["fp16", "bf16"]
    assert comma_items("") == [] and comma_items(None) == [] and comma_items(" , ") == []


def test_visible_devices_tells_unset_from_empty():
    assert visible_devices(None) is None  # every GPU visible
    assert visible_devices("") == []  # none is
    assert visible_devices("2, 3") == ["2", "3"]


def test_every_reader_of_cuda_visible_devices_reads_it_so():
    """The GPU count of --gpus all, the --parallel slots and the ranks' NVML indices: set but empty is no GPU (the
    count and the slots once fell back to every GPU NVML lists, which no trial process could see)."""
    import pytest

    from memprobe.probe.distributed.scan import gpu_count
    from memprobe.probe.distributed.topology import visible_indices
    from memprobe.probe.parallel import gpu_slots

    assert gpu_count("2, 3") == 2 and gpu_count("") == 0
    assert gpu_slots(None, "cuda", visible="4,6") == ["4", "6"] and gpu_slots(1, "cuda", visible="4,6") == ["4"]
    with pytest.raises(ValueError, match="no GPU"):
        gpu_slots(None, "cuda", visible="")
    assert visible_indices(2, "3, 1,0") == [3, 1] and visible_indices(2, "") == [0, 1]


def test_the_api_takes_a_list_option_as_a_comma_separated_string_or_a_sequence():
    from memprobe.core.text.textlists import listed

    assert listed("fp16, bf16,") == ["fp16", "bf16"]
    assert listed(("fp16", "bf16")) == ["fp16", "bf16"] and listed([]) == []
