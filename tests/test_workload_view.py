"""One workload's answer (`report --model`, `guide --model`, the page's top view): every card ranked by throughput at
its best batch b* and by max batch, relative to a reference that has a figure, each figure labelled with its origin;
at most 60 lines of 120 columns in a terminal, no cell cut."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memprobe.compare.comparison import build_comparison, file_kind
from memprobe.compare.curves import like_for_like
from memprobe.compare.workload_view import answer, build_views, default_reference
from memprobe.core.cards.catalog import default_catalog
from memprobe.core.records.results import load_results

REPORTS = Path(__file__).resolve().parents[1] / "reports"
FOLDERS = [str(REPORTS / "h100"), str(REPORTS / "h200")]


def short_and_whole(text: str) -> None:
    lines = text.splitlines()
    assert len(lines) <= 60, len(lines)
    assert max(len(line) for line in lines) <= 120
    assert not [line for line in lines if line.startswith("|") and "..." in line]


def table_rows(text: str) -> list[list[str]]:
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| #")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in rows]


@pytest.mark.parametrize("model", ["bert-large", "resnet50", "pix2pixhd", "transformer-big", "resnet50 (inference)"])
def test_guide_model_is_one_screen_with_every_card(run, model):
    result = run("guide", *FOLDERS, "--model", model)
    assert result.exit_code == 0, result.output
    short_and_whole(result.stdout)
    rows = table_rows(result.stdout)
    assert len(rows) >= len(default_catalog().cards)  # every catalog card (and the scanned ones)
    assert result.stdout.count("\n### ") == 1  # one precision: the others are named, not printed


def test_guide_model_ranks_at_b_star_against_a_card_that_has_a_figure(run):
    text = run("guide", *FOLDERS, "--model", "bert-large").stdout
    rows = table_rows(text)
    assert [r[1] for r in rows[:2]] == ["H200 SXM", "H100 SXM"]  # the two measured cards, fastest first
    assert rows[0][3] == "193" and rows[0][4] == "193" and rows[0][5] == "302.7"  # B, b* and throughput at b*
    # the Quadro RTX 8000 has no bert-large figure, so the reference is a card that has one
    assert re.search(r"\| vs H100 SXM +\|", text) and rows[1][6] == "1.00" and rows[0][6] == "1.15"
    assert rows[2][1] == "B200" and rows[2][3].endswith("(pred)")  # then every other card by max batch
    assert "For bert-large fp16: fastest H200 SXM, 302.7 sequences/s at b* 193 (measured)" in text.replace("\n  ", " ")


def test_report_model_ranks_the_h200_first_at_b_star_and_labels_published_figures(run):
    text = run("report", *FOLDERS, "--model", "resnet50", "--with-published").stdout
    short_and_whole(text)
    rows = table_rows(text)
    assert [r[1] for r in rows[:2]] == ["H200 SXM", "H100 SXM"] and rows[0][5] == "6668.6"
    assert all(r[3].endswith("(pub)") for r in rows[2:])  # no prediction in report: measured or published only
    assert re.search(
        r"\| vs Quadro RTX 8000 +\|", text
    )  # the 2020 study's reference, which has a published resnet50 figure
    assert "(pub) lambda-bench:" in text


def test_model_views_agree_with_the_json(run):
    result = run("guide", *FOLDERS, "--model", "resnet50", "--precision", "fp32,bf16", "--format", "json")
    tables = json.loads(result.stdout)["tables"]
    assert [t["title"].split(":")[0] for t in tables] == ["resnet50 bf16", "resnet50 fp32"]  # mixed precision first
    bf16 = tables[0]["rows"]
    turing = next(r for r in bf16 if r["card"] == "TITAN RTX")
    assert turing["max batch"] == "n/a (no bf16)"  # a card that cannot run the precision says so


@pytest.mark.parametrize(
    ("argv", "code", "said"),
    [
        (["guide", "--model", "no-such-model"], 1, "no workload 'no-such-model' in these results (workloads: "),
        (["guide", "--model", "bert-large", "-p", "tf32"], 1, "no tf32 figures for bert-large"),
        (["guide", "-p", "fp16"], 2, "--precision has no effect without --model"),
        (["report", "--model", "bert-large", "--scans"], 2, "--model prints one workload's answer"),
    ],
)
def test_bad_model_choices_are_one_error_line(run, argv, code, said):
    result = run(argv[0], *FOLDERS, *argv[1:])
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert result.exit_code == code and len(errors) == 1 and said in errors[0], result.output


def test_guide_model_obeys_budget_and_gpu(run):
    text = run("guide", *FOLDERS, "--model", "resnet50", "--budget", "5000").stdout
    cards = [r[1] for r in table_rows(text)]
    catalog = default_catalog()
    assert cards and all(catalog.find(c).price.usd <= 5000 for c in cards)
    assert [r[0] for r in table_rows(text)] == [str(i) for i in range(1, len(cards) + 1)]  # ranked among themselves
    text = run("guide", *FOLDERS, "--model", "resnet50", "--gpu", "H100,A10").stdout
    assert sorted(r[1] for r in table_rows(text)) == ["A10", "H100 SXM"]


def test_default_reference_is_one_with_a_figure():
    assert default_reference(["H100 SXM", "Quadro RTX 8000"], None, ["H100 SXM"]) == "Quadro RTX 8000"
    assert default_reference(["H200 SXM", "H100 SXM"], None, ["H100 SXM"]) == "H100 SXM"
    assert default_reference(["H200 SXM", "H100 SXM"], "H200 SXM", ["H100 SXM"]) == "H200 SXM"
    assert default_reference(["H200 SXM"], "Quadro RTX 8000", []) == "H200 SXM"  # asked for, but no figure here
    assert default_reference([], None, []) == ""


def test_views_rank_by_throughput_and_by_batch_and_say_where_each_figure_comes_from():
    loaded = load_results(FOLDERS)
    basis = like_for_like(build_comparison(loaded, with_published=True))
    kinds = {str(p): file_kind(r) for p, r in loaded}
    views = build_views(basis.comparison, basis.label, [], default_catalog(), kinds)
    view = next(v for v in views if v.key == "resnet50 fp16")
    speeds = [r.throughput.value for r in view.rows if r.throughput]
    assert speeds == sorted(speeds, reverse=True)
    by_batch = sorted((r for r in view.rows if r.rank_batch), key=lambda r: r.rank_batch)
    assert [r.batch.value for r in by_batch] == sorted((r.batch.value for r in by_batch), reverse=True)
    h200 = view.rows[0]
    assert (h200.card, h200.at, h200.throughput.origin) == ("H200 SXM", "b* 2644", "measured")
    assert h200.throughput.source.endswith(".json") and Path(h200.throughput.source).exists()
    assert {r.throughput.origin for r in view.rows[2:]} == {"published"}
    assert {r.throughput.source for r in view.rows[2:]} == {"lambda-bench"}
    assert answer(view).startswith("For resnet50 fp16: fastest H200 SXM, 6668.6 images/s at b* 2644 (measured)")
