"""Cards by name for predict: --gpu takes catalog names and aliases and uses the driver-reported
total; --memory says how it was read and points at --gpu when it is a card's datasheet size."""

from __future__ import annotations

import pytest

from memprobe.core.cards.cardsize import SizeError, card_size, read_sizes
from memprobe.core.cards.catalog import CatalogError, default_catalog, load_catalog

MIB, GIB = 2**20, 2**30


def test_catalog_records_driver_totals_with_their_source():
    catalog = default_catalog()
    h100, h200 = catalog.find("H100 SXM"), catalog.find("H200")
    assert h100.driver_total_bytes == 81559 * MIB and "H100" in h100.driver_total_source
    assert h200.driver_total_bytes == 143771 * MIB and h200.driver_total_source
    assert catalog.find("A10").driver_total_bytes is None


@pytest.mark.parametrize("name", ["H200", "h200", "NVIDIA H200", "H200 SXM"])
def test_gpu_by_name_or_alias_uses_the_driver_total(name):
    sizes = read_sizes(None, name)
    assert sizes.labels == [("H200 SXM", 143771 * MIB)]
    assert "as the driver reports it" in sizes.notes[0]


def test_gpu_without_a_driver_total_falls_back_to_the_datasheet_and_says_so():
    sizes = read_sizes(None, "A10")
    assert sizes.labels == [("A10", 24 * GIB)]
    assert "datasheet size" in sizes.notes[0] and "no driver-reported total" in sizes.notes[0]


def test_decimal_gb_is_said_back_and_a_datasheet_size_suggests_gpu():
    sizes = read_sizes("141GB", None)
    assert sizes.labels == [("141GB", 141 * 10**9)]
    assert any("read as decimal GB" in n and "131.32 GiB" in n and "141GiB" in n for n in sizes.notes)
    assert any('--gpu "H200 SXM"' in n for n in sizes.notes)


def test_binary_size_that_is_no_datasheet_size_gets_no_hint():
    sizes = read_sizes("23GiB", None)
    assert sizes.labels == [("23GiB", 23 * GIB)] and sizes.notes == []


def test_memory_and_gpu_together_keep_their_order():
    sizes = read_sizes("24GiB", "H100 SXM,H200")
    assert [label for label, _ in sizes.labels] == ["24GiB", "H100 SXM", "H200 SXM"]


@pytest.mark.parametrize(
    "memory, gpus, fragment",
    [
        ("0", None, "larger than 0"),
        ("0GiB", None, "larger than 0"),
        ("big", None, "not a size"),
        (None, "H900", "unknown GPU 'H900'"),
        (",", None, "give at least one"),
        (None, None, "give at least one"),
    ],
)
def test_bad_sizes_and_names(memory, gpus, fragment):
    with pytest.raises(SizeError, match=fragment):
        read_sizes(memory, gpus)


def test_card_size_is_the_datasheet_size_without_a_driver_figure():
    card = default_catalog().find("A100 80GB SXM4")
    assert card_size(card)[0] == card.memory_bytes


def test_catalog_refuses_a_driver_total_without_a_source(tmp_path):
    path = tmp_path / "gpus.yaml"
    path.write_text(
        "cards:\n  - {name: X, memory_gib: 8, compute_capability: '8.0', spec_source: s, peak_source: s,"
        " driver_total_mib: 8000}\n"
    )
    with pytest.raises(CatalogError, match="driver_total_source"):
        load_catalog(path)
