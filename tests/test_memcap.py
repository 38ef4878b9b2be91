"""scan --memory-cap: the cap arithmetic, and that an emulated card is never taken for the real one."""

from __future__ import annotations

import pytest

from memprobe.core.cards.catalog import default_catalog, find_card
from memprobe.core.cards.memcap import MemoryCapError, emulated_name, is_emulated, plan_cap
from memprobe.core.cards.overhead import overhead_for

GiB = 2**30


def test_limit_is_the_cap_minus_what_is_held_outside_the_allocator():
    # an 80 GiB card: 0.5 GiB context, 2 GiB reserved by PyTorch, the rest free
    total, reserved = 80 * GiB, 2 * GiB
    free = total - reserved - GiB // 2
    plan = plan_cap(24 * GiB, total, free, reserved)
    assert plan.outside_bytes == GiB // 2
    assert plan.limit_bytes == 24 * GiB - GiB // 2
    assert plan.fraction == pytest.approx((24 - 0.5) / 80)


def test_kernels_loaded_later_shrink_the_limit():
    total = 80 * GiB
    early = plan_cap(24 * GiB, total, total - GiB // 2, 0)
    later = plan_cap(24 * GiB, total, total - GiB, 0)  # another 0.5 GiB of kernels and workspaces
    assert later.limit_bytes == early.limit_bytes - GiB // 2


@pytest.mark.parametrize("cap", [80 * GiB, 96 * GiB])
def test_a_cap_not_below_the_card_is_refused(cap):
    with pytest.raises(MemoryCapError, match="not below"):
        plan_cap(cap, 80 * GiB, 79 * GiB, 0)


def test_a_cap_below_the_fixed_overhead_is_refused():
    with pytest.raises(MemoryCapError, match="leaves nothing"):
        plan_cap(GiB // 4, 80 * GiB, 80 * GiB - GiB // 2, 0)


def test_an_emulated_card_is_no_catalog_card():
    name = emulated_name("NVIDIA H100 80GB HBM3", 24 * GiB)
    assert name == "NVIDIA H100 80GB HBM3 [emulated 24 GiB cap]" and is_emulated(name)
    assert find_card("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert find_card(name) is None


def test_guide_overhead_of_an_emulated_card_uses_the_cap():
    from fakes import make_result

    name = emulated_name("NVIDIA H100 80GB HBM3", 24 * GiB)
    result = make_result(
        name, precisions={"fp16": {"batch": 20, "capacity": 23 * GiB, "per_sample": GiB}}, total_bytes=79 * GiB
    )
    result.environment.gpu.emulated_total_bytes = 24 * GiB
    overhead = overhead_for(result, result.precisions["fp16"], default_catalog())
    assert overhead.bytes == 1 * GiB  # 24 GiB cap - 23 GiB capacity, not 80 - 23
    assert overhead.gpu == name


def test_cli_memory_cap_needs_a_cuda_device_and_a_size():
    from click.testing import CliRunner

    from memprobe.cli import main

    runner = CliRunner()
    cpu = ["scan", "--model", "toy", "--device", "cpu", "--cpu-memory-budget", "8MiB"]
    result = runner.invoke(main, cpu + ["--memory-cap", "24GiB"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    assert "--memory-cap emulates a smaller GPU" in result.output
    result = runner.invoke(main, cpu + ["--memory-cap", "banana"])
    assert result.exit_code == 2 and "not a size" in result.output
    assert "--memory-cap" in runner.invoke(main, ["scan", "--help"]).output
