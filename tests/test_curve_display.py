"""The knee and b* where people read them: `report --scans`, the report's like-for-like tables (b* beside B, the
ranking at B beside that at b*), `guide`'s value table, the relative table and chart labels, the curve chart; and
the committed result files (no curves) still render through all of them."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from fakes import H100, H200, cards, loaded, make_result, with_curve
from memprobe.cli import main
from memprobe.compare.charts import relative_heat
from memprobe.compare.comparison import build_comparison
from memprobe.compare.curve_chart import knee_mark, write_curve_chart
from memprobe.compare.curves import knee_text, like_for_like, ranking_table
from memprobe.compare.guide import guide_report
from memprobe.compare.relative import relative_table, relative_throughput
from memprobe.compare.report import comparison_report
from memprobe.compare.scan_table import scan_rows
from memprobe.core.records.records import CurvePoint

REPORTS = Path(__file__).resolve().parents[1] / "reports"


def h200_with_knee(skipped: bool = False):
    """The H200's resnet50 fp16 as an earlier scan measured it: b* 2048, the knee at 2644 (-36.6% at 2684), B 3321."""
    result = with_curve(
        make_result(H200, "resnet50", {"fp16": {"batch": 3321, "speed": 4241.0}}, unit="images"),
        "fp16",
        {256: 5863.0, 512: 6216.0, 1024: 6476.0, 2048: 6686.0, 2644: 6690.0, 2684: 4241.0, 3321: 4241.0},
    )
    p = result.precisions["fp16"]
    p.knee_batch, p.knee_after_batch, p.knee_drop = 2644, 2684, round(4241.0 / 6690.0 - 1, 4)
    if skipped:
        p.curve.append(CurvePoint(batch=128, outcome="skipped", phase="refine", error="estimated 9 s, 2 s left"))
        p.curve.sort(key=lambda c: c.batch)
    return result


def test_knee_text_says_whether_bisection_located_it():
    assert knee_text(2644, 2684, -0.366) == "2644 (-36.6% at 2684)"
    assert knee_text(2366, 2684, -0.366) == "2366-2684 (-36.6%, not located within 2%)"
    assert knee_text(None, None, None) == "-"


def test_scan_table_shows_b_star_the_knee_and_what_the_curve_covered():
    row = scan_rows([h200_with_knee(skipped=True)])[0]
    assert row["b* (curve)"].startswith("2644: 6690.0 images/s (B -36.6%)") and "best of timed" in row["b* (curve)"]
    assert row["knee (fall)"] == "2644 (-36.6% at 2684)"
    assert row["curve"] == "7 timed, 256-3321, 12 s; 1 skipped (budget)"
    assert row["throughput at B"] == "4241.0 images/s"


def test_scan_table_of_a_length_search_says_seq_len():
    result = make_result(H100, "llama-1b+maxseq@b1", {"bf16": {"batch": 17401, "speed": 1.8}})
    result.workload.params = {"axis": "seq_len", "batch": 1}
    assert scan_rows([result])[0]["max batch"] == "seq len 17401"


def test_report_ranks_cards_at_b_and_at_b_star_side_by_side():
    table = ranking_table(build_comparison(cards()))
    ranks = {row[2]: (row[5], row[8]) for row in table.rows}
    h200 = next(k for k in ranks if "H200" in k)
    h100 = next(k for k in ranks if "H100" in k)
    assert ranks[h100] == (1, 2) and ranks[h200] == (2, 1)  # at B the H100 leads; like for like the H200 does
    text, _, _ = comparison_report(cards(), reference="H100")
    assert "Cards ranked at max batch B and at best batch b*" in text
    one_card, _, _ = comparison_report(cards()[:1], reference="H100")
    assert "Cards ranked" not in one_card  # one card: nothing to rank


def test_report_best_batch_table_shows_the_knee():
    text, _, _ = comparison_report(loaded(h200_with_knee()), fmt="plain")
    assert "2644 (-36.6% at 2684)" in text and "knee (fall)" in text


def test_a_card_without_a_curve_is_marked_at_b_in_the_relative_table_and_chart():
    old = make_result("NVIDIA A100-SXM4-80GB", "resnet50", {"fp16": {"batch": 1000, "speed": 3000.0}})
    comparison = like_for_like(build_comparison(cards() + loaded(old)), "best").comparison
    relative = relative_throughput(comparison, reference="H100")
    rows = {row[0]: [str(c) for c in row] for row in relative_table(relative).rows}
    a100 = next(v for k, v in rows.items() if "A100" in k)
    h200 = next(v for k, v in rows.items() if "H200" in k)
    assert a100[2].endswith("(at B)") and not h200[2].endswith("(at B)")
    heat = relative_heat(relative)
    a100_row = next(i for i, (label, _) in enumerate(heat.rows) if "A100" in label)
    h200_row = next(i for i, (label, _) in enumerate(heat.rows) if "H200" in label)
    assert heat.cells[(a100_row, 0)].text.endswith(" B") and not heat.cells[(h200_row, 0)].text.endswith(" B")
    # all at B (no curves anywhere): nothing to mark
    plain = relative_throughput(like_for_like(build_comparison(loaded(old)), "best").comparison)
    assert not any("(at B)" in str(c) for row in relative_table(plain).rows for c in row)


def test_guide_value_table_says_where_each_throughput_was_taken_and_the_knee():
    old = make_result("NVIDIA A100-SXM4-80GB", "resnet50", {"fp16": {"batch": 1000, "speed": 3000.0}}, unit="images")
    text = guide_report(loaded(h200_with_knee(), old), fmt="plain")
    assert "measured: at the best batch b* where the scan timed a curve, else at max batch B" in text
    assert "b* 2644" in text and "2644 (-36.6% at 2684)" in text and "B 1000 (no curve)" in text and "@v1#" not in text


def test_curve_chart_marks_the_knee(tmp_path):
    comparison = build_comparison(loaded(h200_with_knee()))
    assert [p.name for p in write_curve_chart(comparison, tmp_path)] == [
        "throughput_vs_batch.png",
        "throughput_vs_batch.svg",
    ]
    assert "knee 2644: -36.6%" in (tmp_path / "throughput_vs_batch.svg").read_text()
    point = next(p for p in comparison.points if p.precision == "fp16")
    assert knee_mark(point) == (2644, 6690.0, "knee 2644: -36.6%")
    point.knee_batch = 2600  # not a point on the drawn curve: no mark
    assert knee_mark(point) is None


@pytest.mark.parametrize(
    "args",
    [
        ["report", "--scans", str(REPORTS / "h100")],
        ["report", str(REPORTS / "h100")],
        ["guide", str(REPORTS / "h100")],
        ["report", "--scans", str(REPORTS / "h100_llm")],
    ],
)
def test_committed_results_without_curves_still_render(args):
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 0, done.output
    assert "Traceback" not in done.output
