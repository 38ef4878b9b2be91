"""Like-for-like comparisons from throughput curves: best throughput (b*), a common batch, or at B; the table
header and notes that say which; b* beside B; the guide's per-dollar figures; the curve chart; result files
with and without curves; and the OOM classification of torch.AcceleratorError."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fakes import H100, cards, loaded, make_result
from memprobe.cli import main
from memprobe.compare.comparison import ReportError, build_comparison
from memprobe.compare.curve_chart import write_curve_chart
from memprobe.compare.curves import best_batch_table, common_batch, like_for_like
from memprobe.compare.guide import guide_report
from memprobe.compare.relative import relative_throughput
from memprobe.compare.report import comparison_report
from memprobe.core.process.outcomes import CRASH, OOM, classify_error
from memprobe.core.records.results import SCHEMA_VERSION, PrecisionResult, read_result, write_result


def ratio(relative, gpu_part: str) -> float:
    row = next(r for r in relative.rows if gpu_part in r.gpu)
    return next(iter(row.cells.values())).value


def test_best_basis_ranks_cards_by_their_best_throughput():
    comparison = build_comparison(cards())
    at_b = relative_throughput(like_for_like(comparison, "max").comparison, reference="H100")
    best = relative_throughput(like_for_like(comparison, "best").comparison, reference="H100")
    assert ratio(at_b, "H200") == pytest.approx(4360 / 5223)  # at B the H200 ranks below the H100
    assert ratio(best, "H200") == pytest.approx(6598 / 5223)  # like for like it ranks above
    assert best.rows[0].gpu != at_b.rows[0].gpu


def test_common_basis_uses_the_largest_batch_on_every_curve():
    comparison = build_comparison(cards())
    basis = like_for_like(comparison, "common")
    assert basis.common == {("resnet50", "fp16"): 1024}
    relative = relative_throughput(basis.comparison, reference="H100")
    assert ratio(relative, "H200") == pytest.approx(6476 / 5200)
    assert any("resnet50 fp16 1024" in n for n in basis.notes)


def test_common_batch_of_curves():
    comparison = build_comparison(cards())
    assert common_batch(comparison.points) == 1024


def test_files_without_a_curve_fall_back_to_b_and_are_named():
    old = make_result("NVIDIA A100-SXM4-80GB", "resnet50", {"fp16": {"batch": 1000, "speed": 3000.0}})
    comparison = build_comparison(cards() + loaded(old))
    basis = like_for_like(comparison, "best")
    a100 = next(p for p in basis.comparison.points if "A100" in p.gpu)
    assert a100.throughput == 3000.0
    assert any(n.startswith("At B, not best") and "A100" in n for n in basis.notes)


def test_no_curves_at_all_says_so_in_the_label():
    old = make_result(H100, "resnet50", {"fp16": {"batch": 1000, "speed": 3000.0}})
    basis = like_for_like(build_comparison(loaded(old)), "best")
    assert "no throughput curve" in basis.label and "max batch B" in basis.label


def test_unknown_basis_is_a_report_error():
    with pytest.raises(ReportError):
        like_for_like(build_comparison(cards()), "median")


def test_oom_stays_zero():
    oom = make_result("Quadro RTX 8000", "resnet50", {"fp16": {"batch": 0, "speed": None}})
    basis = like_for_like(build_comparison(cards() + loaded(oom)), "best")
    assert next(p for p in basis.comparison.points if p.gpu == "Quadro RTX 8000").throughput == 0.0


def test_report_header_names_the_basis_and_shows_b_star_beside_b():
    text, _, relative = comparison_report(cards(), reference="H100", fmt="github")
    assert "Throughput relative to H100 SXM: best throughput per card (at its best batch b*)" in text
    assert "Best batch b* beside max batch B" in text
    table = best_batch_table(build_comparison(cards()))
    by_gpu = {row[1]: [str(c) for c in row] for row in table.rows}
    h200 = next(v for k, v in by_gpu.items() if "H200" in k)
    assert h200[3:5] == ["3321", "2048"] and h200[-2:] == ["-33.9%", "-"]  # no knee in this made-up curve
    text_max, _, _ = comparison_report(cards(), reference="H100", at_batch="max")
    assert "at each card's max batch B" in text_max


def test_report_cli_at_batch_option(tmp_path):
    pairs = cards(tmp_path)
    runner = CliRunner()
    common = runner.invoke(main, ["report", str(tmp_path), "--at-batch", "common", "--reference", "H100"])
    assert common.exit_code == 0, common.output
    assert "the largest batch every compared card fits" in common.output and "1.25" in common.output
    bad = runner.invoke(main, ["report", str(tmp_path), "--at-batch", "median"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert len(pairs) == 2


def test_guide_per_dollar_uses_the_best_throughput(tmp_path):
    data = json.loads(guide_report(cards(), fmt="json"))
    value = next(t for t in data["tables"] if t["key"] == "value")
    h200 = next(
        r
        for r in value["rows"]
        if r["card"].startswith("H200")
        and r["precision"] == "fp16"
        and r["workload"] == "resnet50"
        and "(pub)" not in str(r["throughput"])
    )
    assert h200["throughput"]["value"] == 6598.0
    assert any("best throughput per card" in n for n in value["notes"])


def test_curve_chart_is_written_for_results_with_curves(tmp_path):
    written = write_curve_chart(build_comparison(cards()), tmp_path)
    assert sorted(p.name for p in written) == ["throughput_vs_batch.png", "throughput_vs_batch.svg"]
    assert all(p.stat().st_size > 5000 for p in written)
    old = make_result(H100, "resnet50", {"fp16": {"batch": 1000, "speed": 3000.0}})
    assert write_curve_chart(build_comparison(loaded(old)), tmp_path / "none") == []


# --- result files ---------------------------------------------------------------------------------


def test_result_round_trip_keeps_the_curve(tmp_path):
    result = cards()[1][1]
    back = read_result(write_result(result, tmp_path / "r.json"))
    p = back.precisions["fp16"]
    assert [c.batch for c in p.curve] == [256, 512, 1024, 2048, 3321]
    assert (p.best_batch, p.best_samples_per_s, p.curve_seconds) == (2048, 6598.0, 12.5)
    assert p.at_max_samples_per_s == 4360.0
    assert back.schema_version == SCHEMA_VERSION


def test_version_1_file_without_a_curve_still_loads(tmp_path):
    path = write_result(make_result(H100, "resnet50", {"fp16": {"batch": 1000, "speed": 3000.0}}), tmp_path / "o.json")
    data = json.loads(path.read_text())
    data["schema_version"] = 1
    for p in data["precisions"].values():
        for key in ("curve", "best_batch", "best_samples_per_s", "best_units_per_s", "curve_seconds"):
            p.pop(key)
    path.write_text(json.dumps(data))
    old = read_result(path).precisions["fp16"]
    assert old.curve == [] and old.best_batch is None and old.at_max_samples_per_s == 3000.0
    assert PrecisionResult("fp16").at_max_samples_per_s is None


# --- torch.AcceleratorError ---------------------------------------------------------------------

ACCELERATOR_OOM = (
    "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other "
    "API call, so the stacktrace below might be incorrect.\nFor debugging consider passing "
    "CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)


def test_accelerator_error_out_of_memory_is_oom():
    assert classify_error("AcceleratorError", ACCELERATOR_OOM) == OOM


@pytest.mark.parametrize(
    "first_line", ["CUDA error: device-side assert triggered", "CUDA error: an illegal memory access was encountered"]
)
def test_accelerator_errors_that_corrupt_the_context_stay_crashes(first_line):
    message = first_line + "\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
    assert classify_error("AcceleratorError", message) == CRASH
