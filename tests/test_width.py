"""Every table and note fits 120 columns by default (issue 37, item 7): a wide table is split by columns (each part
repeating what names a row), a cell too long for any part is written in full under its table (never cut with '...'),
a note is wrapped; `--wide` prints everything whole, and csv/json are never fitted."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from tabulate import tabulate

from memprobe.cli import main
from memprobe.core.text import textwidth

REPO = Path(__file__).resolve().parents[1]
R = REPO / "reports"
GOOD = R / "h100" / "nvidia-h100-80gb-hbm3_resnet50_train_20261124-003756.json"
WIDTH = 120

COMMANDS = [
    ["report", str(R / "h100"), str(R / "h200"), "--with-published"],
    ["report", str(R / "h100"), str(R / "h200"), "--format", "plain"],
    ["report", "--scans", str(R / "h100"), str(R / "h200")],
    ["report", "--scans", str(R / "emulated_h100")],
    ["report", "--llm", str(R / "h100_llm")],
    [
        "report",
        "--breakdown",
        str(R / "breakdown" / "h100"),
        "--predicted",
        str(R / "breakdown" / "predicted-breakdowns.json"),
    ],
    ["report", "--frontier", str(R / "h200_frontier" / "scans"), str(R / "h200_frontier" / "predicted")],
    ["guide", str(R / "h100"), str(R / "h200")],
    ["guide", str(R / "h100"), "--format", "plain", "--budget", "5000"],
    ["guide"],
    ["plan", "--model", "resnet50", "--gpu", "H200", "--global-batch", "8192", "--results", str(R / "h200")],
    ["list"],
    ["list", "bert-large"],
]


def _run(argv: list[str]):
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    return result


def _too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > WIDTH]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: " ".join(a for a in argv if "/" not in a))
def test_every_line_fits_120_columns(argv):
    assert _too_wide(_run(argv).stdout) == []


@pytest.mark.parametrize(
    "argv", COMMANDS[:3] + COMMANDS[7:9], ids=lambda argv: " ".join(a for a in argv if "/" not in a)
)
def test_wide_prints_the_tables_and_notes_whole(argv):
    wide = _run([*argv, "--wide"]).stdout
    assert _too_wide(wide)  # the same reports, unfitted, are wider than 120
    fitted = _run(argv).stdout
    # nothing is lost: every word and number of the wide report is in the fitted one too
    words = r"\w[\w.%*+-]*"  # not the rules under a table's header, whose length is the column's
    assert set(re.findall(words, wide)) <= set(re.findall(words, fitted))


def test_a_split_table_repeats_the_columns_that_name_a_row():
    text = _run(["report", str(R / "h100"), str(R / "h200")]).stdout
    tables = [block for block in re.split(r"\n\s*\n", text) if block.startswith("| workload")]
    heads = [[c.strip() for c in block.splitlines()[0].strip("|").split("|")] for block in tables]
    split = [h for h in heads if h[:3] == ["workload", "GPU", "source"] and "batch unit" not in h and "unit" not in h]
    assert split, heads  # the max batch and throughput tables went on in a second part that names its rows
    for block in tables:
        rows = block.splitlines()
        assert len({len(r) for r in rows}) == 1  # a whole table, not a cut one


def test_a_cell_too_long_for_any_part_is_written_under_its_table(tmp_path):
    data = json.loads(GOOD.read_text())
    data["environment"]["gpu"]["name"] = "A GPU " + "with a very long name " * 4 + "X" * 10  # 104 characters > 100
    data["environment"]["gpu"]["name"] = name = data["environment"]["gpu"]["name"][:100].strip()
    (tmp_path / "long.json").write_text(json.dumps(data))
    text = _run(["report", "--scans", str(tmp_path)]).stdout
    assert _too_wide(text) == [] and "..." not in text
    rows = [line for line in text.splitlines() if line.startswith("|") and "[1]" in line]
    assert rows and name not in "".join(rows)  # the cell names its note ...
    assert f"[1] {name}" in text.splitlines()  # ... written whole under the table
    wide = _run(["report", "--scans", "--wide", str(tmp_path)]).stdout
    assert name in wide and "[1]" not in wide


def test_no_cell_of_report_or_guide_is_cut():
    for argv in [a for a in COMMANDS if a[0] in ("report", "guide")]:
        text = _run(argv).stdout
        cut = [line for line in text.splitlines() if line.startswith("|") and re.search(r"\.\.\.\s*\|", line)]
        assert cut == [], (argv, cut[:3])


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_wide_with_a_machine_format_is_refused(fmt):
    result = CliRunner().invoke(main, ["report", str(GOOD), "--format", fmt, "--wide"])
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert result.exit_code == 2 and errors == [
        f"Error: --wide has no effect with --format {fmt} (it is never fitted to a width)"
    ]


def test_machine_formats_are_never_cut():
    for fmt in ("csv", "json"):
        text = _run(["report", str(R / "h100"), str(R / "h200"), "--format", fmt]).stdout
        assert "nvidia-h100-80gb-hbm3_nasnet-large_train_20261124-052439.json, not nvidia" in text


def test_predict_fits_120_columns():
    argv = ["predict", "--model", "toy", "-p", "fp32", "--memory", "4GiB,8GiB,16GiB,32GiB,64GiB,96GiB"]
    result = _run(argv)
    assert _too_wide(result.stdout) == []
    assert "96GiB" in result.stdout and "|" in result.stdout


# --- the layout itself ---------------------------------------------------------------------------------------------


def test_a_table_is_split_by_columns_each_part_keeping_the_first():
    headers = ["name"] + [f"column {i}" for i in range(20)]
    rows = [["row a"] + [f"value {i}" for i in range(20)], ["row b"] + [str(i) for i in range(20)]]
    with textwidth.limit(WIDTH):
        text = textwidth.table(headers, rows, "github", keep=1)
    parts = text.split("\n\n")
    assert len(parts) > 1 and all(p.startswith("| name") for p in parts)
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    cells = {c.strip() for line in text.splitlines() for c in line.split("|")}
    assert {f"value {i}" for i in range(20)} <= cells and {f"column {i}" for i in range(20)} <= cells
    assert textwidth.table(headers, rows, "github") == tabulate(
        rows, headers=headers, tablefmt="github", disable_numparse=True
    )


def test_notes_are_wrapped_as_list_items():
    note = "a note " * 40
    with textwidth.limit(WIDTH):
        text = textwidth.notes_text([note.strip(), "short"])
    lines = text.splitlines()
    assert lines[0].startswith("- a note") and all(line.startswith("  ") for line in lines[1:-1])
    assert lines[-1] == "- short" and max(map(len, lines)) <= WIDTH
    assert " ".join(line[2:] for line in lines[:-1]) == note.strip()


def test_a_rendered_table_is_split_at_its_own_column_bars():
    rows = [["fp32", "0.03", "0.0000021"] + ["65536"] * 6]
    headers = ["precision", "static GiB", "GiB/sample"] + [
        f"{m}GiB: predicted max batch" for m in (8, 16, 32, 48, 64, 96)
    ]
    rendered = tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)
    with textwidth.limit(WIDTH):
        text = textwidth.fit_text("title\n\n" + rendered + "\n\n" + "word " * 50)
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    parts = [block for block in text.split("\n\n") if block.startswith("|")]
    assert len(parts) > 1 and all(p.startswith("| precision") for p in parts)
    assert all("0.0000021" in p or "GiB/sample" not in p for p in parts)  # cells kept as written
    assert textwidth.fit_text(rendered) == rendered  # no limit: unchanged


def test_an_edited_file_cannot_widen_a_table_past_the_limit(tmp_path):
    data = copy.deepcopy(json.loads(GOOD.read_text()))
    data["workload"]["name"] = "w" * 100
    (tmp_path / "w.json").write_text(json.dumps(data))
    for argv in (["report"], ["report", "--scans"], ["guide"]):
        assert _too_wide(_run([*argv, str(tmp_path)]).stdout) == []


def test_a_rendered_table_a_little_too_wide_loses_its_padding_not_its_columns():
    headers = ["precision", "predicted static GiB", "predicted GiB/sample", "8GiB: predicted max batch", "16MiB: max"]
    rows = [["fp32", "0.03", "0.0000021", "65536+ (cap)", "0"]]
    rendered = tabulate(
        rows, headers=headers, tablefmt="github", disable_numparse=True, colalign=["left"] + ["right"] * 4
    )
    with textwidth.limit(len(rendered.splitlines()[0]) - 5):  # within tabulate's room beside the headers
        text = textwidth.fit_text(rendered)
    lines = text.splitlines()
    assert len(lines) == 3 and len({len(line) for line in lines}) == 1  # one table, compacted
    assert lines[2].endswith(" 65536+ (cap) |" + " " * 10 + "0 |")  # numbers stay right-aligned
