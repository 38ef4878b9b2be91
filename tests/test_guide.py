"""`memprobe guide`: predictions from a hand-computed memory model, the carried-over overhead, verdicts,
per-dollar and per-watt values, the budget filter and the CLI."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fakes import H100, GiB, loaded, make_result
from memprobe.cli import main
from memprobe.compare.card_predictions import memory_models, predict_max_batch, predictions
from memprobe.compare.comparison import MEASURED, PREDICTED
from memprobe.compare.guide import guide_report
from memprobe.compare.verdicts import VERDICT_ALL, VERDICT_MOST, VERDICT_NO, verdicts
from memprobe.core.cards.catalog import Card, Catalog, Price, load_catalog
from memprobe.core.cards.overhead import OverheadTable, ScannedCard, default_overhead_table, overhead_for
from memprobe.core.records.results import write_result


def card(
    name: str,
    gib: float,
    cc: str = "8.6",
    usd: float | None = None,
    tdp: float | None = 300,
    patterns: tuple[str, ...] = (),
) -> Card:
    return Card(
        name=name,
        aliases=(),
        device_patterns=patterns,
        architecture="test",
        compute_capability=cc,
        memory_bytes=int(gib * GiB),
        peak_tflops={"fp32": None, "tf32": None, "fp16": None, "bf16": None},
        peak_source="test",
        bandwidth_gb_s=None,
        tdp_w=tdp,
        spec_source="test",
        prices=(Price(usd, "2026", "test"),) if usd else (),
    )


# Measured card: datasheet 80 GiB, the driver exposes 79 GiB, the allocator could use 78 GiB -> overhead 2 GiB.
BIG = card("Big 80", 80, patterns=("BIGCARD",))
SMALL_CATALOG = Catalog(
    cards=(
        card("Six", 6, cc="7.5"),
        card("Eight", 8),
        card("Card 24", 24, usd=2000),
        card("Card 48", 48, usd=5000),
        BIG,
    ),
    sources={"test": "test"},
)
# The overhead data as if memprobe had scanned the Big 80: capacity 78 GiB, 2 GiB overhead carried to the others.
TABLE = OverheadTable({"Big 80": ScannedCard("Big 80", 78 * GiB, 2 * GiB, 1, ("BIGCARD",), ("test",))}, "test")


def measured(static_gib: float = 4, per_sample_gib: float = 1, batch: int = 74, precision: str = "fp16"):
    return make_result(
        "BIGCARD-1",
        precisions={
            precision: {
                "batch": batch,
                "speed": 100.0,
                "static": static_gib * GiB,
                "per_sample": per_sample_gib * GiB,
                "capacity": 78 * GiB,
            }
        },
        total_bytes=79 * GiB,
    )


# --- the arithmetic -------------------------------------------------------------------------------


def test_predict_max_batch_by_hand():
    # static 4 GiB + 1 GiB per sample on a 24 GiB card with 1.5 GiB overhead: 22.5 GiB usable -> 18 samples
    assert predict_max_batch(4 * GiB, 1 * GiB, 24 * GiB - 1.5 * GiB) == 18
    assert predict_max_batch(4 * GiB, 1 * GiB, 5 * GiB) == 1  # exactly one sample fits
    assert predict_max_batch(4 * GiB, 1 * GiB, 5 * GiB - 1) == 0  # one byte short
    assert predict_max_batch(4 * GiB, 1 * GiB, 3 * GiB) == 0  # not even the model fits
    with pytest.raises(ValueError):
        predict_max_batch(4 * GiB, 0, 24 * GiB)


def test_overhead_is_derived_from_the_measured_card():
    result = measured()
    overhead = overhead_for(result, result.precisions["fp16"], SMALL_CATALOG)
    assert overhead.bytes == 2 * GiB and overhead.gpu == "Big 80"
    text = overhead.describe()
    assert "80.00 GiB datasheet memory - 78.00 GiB" in text
    assert "1.00 GiB the driver does not expose + 1.00 GiB CUDA context and runtime" in text


def test_overhead_of_a_card_the_catalog_does_not_know_uses_the_reported_total():
    result = make_result(
        "Mystery GPU", precisions={"fp32": {"batch": 3, "capacity": 10 * GiB, "per_sample": GiB}}, total_bytes=11 * GiB
    )
    overhead = overhead_for(result, result.precisions["fp32"], SMALL_CATALOG)
    assert overhead.bytes == 1 * GiB and "not in the catalog" in overhead.describe()


def test_predictions_on_every_card_against_the_hand_computed_model():
    models, notes = memory_models(loaded(measured()), SMALL_CATALOG)
    assert notes == [] and len(models) == 1
    by_card = {p.card.name: p for p in predictions(models, SMALL_CATALOG.cards, TABLE)}
    # usable = card - 2 GiB; batch = floor((usable - 4 GiB) / 1 GiB)
    assert by_card["Six"].batch == 0  # 4 GiB usable: only the static part fits
    assert by_card["Eight"].batch == 2
    assert by_card["Card 24"].batch == 18 and by_card["Card 24"].origin == PREDICTED
    assert by_card["Card 48"].batch == 42
    # on the measured card the measured answer stands, and the model's own figure is kept as a check
    assert (by_card["Big 80"].batch, by_card["Big 80"].predicted_batch, by_card["Big 80"].origin) == (74, 74, MEASURED)


def test_bf16_is_not_predicted_on_cards_without_it():
    models, _ = memory_models(loaded(measured(precision="bf16")), SMALL_CATALOG)
    by_card = {p.card.name: p for p in predictions(models, SMALL_CATALOG.cards, TABLE)}
    assert by_card["Six"].batch is None  # compute capability 7.5: no bf16
    assert by_card["Eight"].batch == 2


def test_a_precision_without_a_memory_model_is_noted_not_predicted():
    result = make_result("BIGCARD", precisions={"fp32": {"batch": 3, "speed": 1.0, "capacity": 78 * GiB}})
    models, notes = memory_models(loaded(result), SMALL_CATALOG)
    assert models == [] and "no usable memory model" in notes[0]


# --- verdicts ---------------------------------------------------------------------------------------


def test_verdicts_follow_the_rule():
    light = measured(static_gib=4, per_sample_gib=1, batch=74)  # fits everywhere but the 6 GiB card
    heavy = make_result(
        "BIGCARD",
        workload="heavy",
        precisions={
            "fp16": {"batch": 36, "speed": 5.0, "static": 40 * GiB, "per_sample": 1 * GiB, "capacity": 78 * GiB}
        },
        total_bytes=79 * GiB,
    )
    models, _ = memory_models(loaded(light, heavy), SMALL_CATALOG)
    found = {v.card.name: v for v in verdicts(predictions(models, SMALL_CATALOG.cards, TABLE), SMALL_CATALOG.cards)}
    # largest batches: toy 74, heavy 36 (both on Big 80) -> roomy from ceil(74/8) = 10 and ceil(36/8) = 5
    assert found["Six"].verdict == VERDICT_NO  # toy 0, heavy 0
    assert found["Eight"].verdict == VERDICT_MOST  # toy 2 (small), heavy 0: half of them train
    assert found["Card 24"].verdict == VERDICT_MOST  # toy 18 roomy, heavy 0 (needs 42 GiB + 2)
    assert found["Card 48"].verdict == VERDICT_ALL  # toy 42, heavy 6 >= 5
    assert found["Big 80"].verdict == VERDICT_ALL
    assert found["Card 48"].best == {"toy": (42, "fp16", PREDICTED), "heavy": (6, "fp16", PREDICTED)}


# --- the whole guide ------------------------------------------------------------------------------


def test_guide_on_the_packaged_catalog_marks_predictions_and_states_the_overhead(tmp_path):
    result = make_result(
        H100,
        workload="bert-large",
        unit="sequences",
        precisions={
            "fp16": {
                "batch": 100,
                "speed": 100.0,
                "static": 4 * GiB,
                "per_sample": 0.75 * GiB,
                "capacity": 78 * GiB,
                "util": {"power_w": {"mean": 500.0}},
            }
        },
        total_bytes=79 * GiB,
    )
    text = guide_report(loaded(result, tmp_path=tmp_path), fmt="plain")
    # the usable memory is the packaged data's, as predict takes it, whatever the file measured
    assert "Usable memory per card, as `memprobe predict --gpu CARD` takes it" in text
    carried = default_overhead_table().carried()
    assert f"minus {carried.overhead_bytes / 2**30:.2f} GiB measured on the {carried.card}, carried over" in text
    assert "`memprobe predict -m WORKLOAD -p PRECISION --gpu CARD` replays the trial" in text
    # RTX 3090: its memory - the carried overhead - what kernels take during the run - 4 GiB static, / 0.75 GiB
    from memprobe.core.cards.cardsize import card_size
    from memprobe.core.cards.catalog import default_catalog

    rtx = default_catalog().find("RTX 3090")
    usable = card_size(rtx)[0] - carried.overhead_bytes - default_overhead_table().run_overhead_bytes
    expected = int((usable - 4 * GiB) // (0.75 * GiB))
    line = next(row for row in text.splitlines() if row.strip().startswith("GeForce RTX 3090") and "(pred)" in row)
    assert f" {expected} (pred)" in line
    assert "Verdict rule" in text and "trains all the large models" in text
    # per 1000 USD on the measured card: 100 / 36718.75 * 1000 = 2.72; per TDP watt 100 / 700 = 0.143; per measured W 0.200
    value = next(row for row in text.splitlines() if "H100 SXM" in row and "sequences/s" in row)
    assert "2.72" in value and "0.143" in value and "0.200" in value


def test_guide_value_table_uses_published_throughput_for_matching_workloads(tmp_path):
    result = make_result(
        H100,
        workload="resnet50",
        unit="images",
        precisions={
            "fp16": {"batch": 1500, "speed": 3000.0, "static": 2 * GiB, "per_sample": 0.05 * GiB, "capacity": 78 * GiB}
        },
    )
    data = json.loads(guide_report(loaded(result), fmt="json"))
    value = next(t for t in data["tables"] if t["key"] == "value")
    cards = {(r["card"], r["throughput"]["origin"]) for r in value["rows"]}
    assert ("H100 SXM", "measured") in cards and ("GeForce RTX 4090", "published") in cards
    rtx4090 = next(r for r in value["rows"] if r["card"] == "GeForce RTX 4090" and r["precision"] == "fp16")
    assert rtx4090["per 1000 USD"]["text"] == "612.24 (pub)"  # 1301 img/s / 2125 USD


def test_budget_filters_cards_by_price():
    text = guide_report([], budget=1000, fmt="plain")
    catalog = load_catalog()
    cheap = [c.name for c in catalog.cards if c.price and c.price.usd <= 1000]
    assert cheap and all(name in text for name in cheap)
    assert "Quadro RTX 8000" not in text and "H100 SXM" not in text
    assert "without a sourced price are left out" in text
    with pytest.raises(ValueError):
        guide_report([], budget=-1)


def test_cli_guide(tmp_path):
    write_result(measured(), tmp_path / "r.json")
    runner = CliRunner()
    result = runner.invoke(main, ["guide", str(tmp_path), "--budget", "40000"])
    assert result.exit_code == 0, result.output
    assert "Verdicts" in result.stdout and "(pred)" in result.stdout
    bad = runner.invoke(main, ["guide", str(tmp_path / "nope.json")])
    assert bad.exit_code != 0 and "Traceback" not in bad.output and "cannot read" in bad.output
    assert runner.invoke(main, ["guide", "--budget", "-5"]).exit_code != 0
