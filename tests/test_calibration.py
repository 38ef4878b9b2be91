"""benchmarks/calibration.py groups the committed scans by card and tabulates predicted vs measured."""

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).parents[1]
SPEC = importlib.util.spec_from_file_location("calibration", REPO / "benchmarks" / "calibration.py")
calibration = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(calibration)


def test_collect_takes_the_newest_finished_scan_per_card_from_the_committed_files():
    found = calibration.collect(
        [str(REPO / "reports" / "h100"), str(REPO / "reports" / "emulated_h100")], ["transformer-big"]
    )
    cards = {e["card"]: e for e in found[("transformer-big", None)]["fp16"]}
    assert set(cards) == {"NVIDIA H100 80GB HBM3 (real)", "24 GiB emulated", "48 GiB emulated"}
    assert [cards[c]["measured"] for c in ("NVIDIA H100 80GB HBM3 (real)", "48 GiB emulated", "24 GiB emulated")] == [
        679,
        406,
        182,
    ]
    # each prediction is made at the allocator capacity the scan itself recorded
    assert round(cards["NVIDIA H100 80GB HBM3 (real)"]["capacity_bytes"] / 2**30, 2) == 78.57
    assert round(cards["24 GiB emulated"]["capacity_bytes"] / 2**30, 2) == 23.40


def row(workload, precision, card, gib, measured, predicted):
    return {
        "workload": workload,
        "precision": precision,
        "card": card,
        "capacity_gib": gib,
        "measured": measured,
        "predicted": predicted,
        "error_percent": round(100.0 * (predicted - measured) / measured, 2),
    }


def test_table_marks_misses_and_cells_not_run():
    text = calibration.table(
        [
            row("a", "fp32", "H100 (real)", 78.6, 100, 101),
            row("a", "fp32", "24 GiB emulated", 23.4, 50, 47),
            row("b", "fp16", "H100 (real)", 78.6, 10, 10),
        ]
    )
    lines = text.splitlines()
    assert lines[0].startswith("| workload | precision | H100 (real): measured | predicted | error | 24 GiB emulated")
    assert "| a | fp32 | 100 | 101 | +1.0% | 50 | 47 | **-6.0%** |" in lines
    assert "| b | fp16 | 10 | 10 | +0.0% | not run |  |  |" in lines
    assert lines[-2] == "Within 3%: 2 of 3 comparisons; exact: 1."
    assert (
        lines[-1] == "Unsafe (predicted above the measured B, a batch that did not train): 1 of 3, by at most 1 batch."
    )


def test_a_multi_gpu_scan_is_a_column_of_its_own_predicted_for_the_same_world(tmp_path):
    from conftest import RecordingProgress
    from fakes import TOY, FakeGroup, fake_group_opts
    from memprobe.probe.distributed.scan import scan_distributed

    _result, path = scan_distributed(TOY, fake_group_opts(), 2, "fsdp", tmp_path, RecordingProgress(), FakeGroup())
    found = calibration.collect([str(path)], None)
    ((key, per_precision),) = found.items()
    assert key == ("toy", (2, "fsdp"))
    (entry,) = per_precision["fp32"]
    assert entry["card"] == "2x cpu fsdp, per GPU" and entry["measured"] == 990
    (row,) = calibration.predict_rows("toy", per_precision, (2, "fsdp"))  # traced as rank 0 of 2 under fsdp
    assert (row["card"], row["measured"], row["capacity_gib"]) == ("2x cpu fsdp, per GPU", 990, 0.0)
    assert row["predicted"] == 0  # 100,000 bytes hold less than the emulated cuBLAS workspace
    assert (row["safe"], row["safe_margin"]) == (0, 0.10)  # FSDP2's safe batch leaves 10%


def test_every_multi_gpu_file_is_a_row_per_strategy_and_world_size_with_its_efficiency(tmp_path):
    from conftest import RecordingProgress
    from fakes import TOY, FakeGroup, fake_group_opts
    from memprobe.probe.distributed.scan import scan_distributed

    for strategy in ("ddp", "fsdp"):  # the same card, workload and precision: neither replaces the other
        scan_distributed(TOY, fake_group_opts(), 2, strategy, tmp_path, RecordingProgress(), FakeGroup())
    found = calibration.collect([str(tmp_path)], None)
    assert sorted(found) == [("toy", (2, "ddp")), ("toy", (2, "fsdp"))]
    rows = []
    for (name, world), per_precision in sorted(found.items()):
        (entry,) = per_precision["fp32"]
        assert (entry["world_size"], entry["strategy"]) == world and entry["efficiency"] == pytest.approx(0.5 / 0.55)
        safe, margin = (991, 0.10) if world[1] == "fsdp" else (940, 0.05)  # fsdp's safe batch above B: marked
        rows.append(
            {
                **entry,
                "workload": name,
                "precision": "fp32",
                "predicted": 985,
                "error_percent": -0.51,
                "safe": safe,
                "safe_margin": margin,
            }
        )
    rows.append({"gpu": "cpu", "workload": "toy", "precision": "fp32", "world_size": 1, "measured": 1200})
    lines = calibration.multi_gpu_table(rows).splitlines()
    assert lines[0].startswith("| GPU | workload | precision | strategy | GPUs | per-GPU B (measured) | predicted")
    assert "| cpu | toy | fp32 | ddp | 2 | 990 | 985 | -0.5% | 940 | 1200 | 90.9% |" in lines
    assert "| cpu | toy | fp32 | fsdp | 2 | 990 | 985 | -0.5% | **991** | 1200 | 90.9% |" in lines
    assert lines[-2].startswith("Per GPU: 2 multi-GPU comparisons; exact: 0; unsafe (predicted above")
    assert (
        "safe batch above the measured per-GPU B: 1 (margin of the usable memory left: ddp 5%, fsdp 10%)" in lines[-2]
    )


def test_the_predicted_start_replay_counts_fewer_trials_from_an_exact_prediction():
    spec = importlib.util.spec_from_file_location("replay", REPO / "benchmarks" / "predicted_start_replay.py")
    replay = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(replay)
    precision = {
        "memory_model": {"peak_reserved": {"static_bytes": 1e9, "per_sample_bytes": 5e8}},
        "max_batch": 155,
        "capacity_bytes": int(1e9 + 5e8 * 155.5),
        "search_seconds": 170.0,
        "attempts": [
            {"batch": 1, "seconds": 14.0, "fresh": False},
            {"batch": 155, "seconds": 18.0, "fresh": True},
            {"batch": 156, "seconds": 20.0, "fresh": True},
        ],
    }
    got = replay.replay(precision, 155)
    assert got["hinted_trials"] == 3 and got["hinted_seconds"] == 14.0 + 2 * 19.0
    assert got["plain_trials"] > got["hinted_trials"]
