"""The HTML page (`memprobe report --html`, `guide --html`): it holds the text reports' numbers, links every
measured one to its result file, needs no network, writes atomically, and works in a real headless Chromium."""

from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from webdriver import Browser, find_browser

REPO = Path(__file__).resolve().parents[1]
REPORTS = REPO / "reports"
# The committed results the page is tested on: every section has something (LLM edges, a frontier measured and
# predicted, breakdowns with predicted ones at the same batch, an emulated card).
INPUTS = [
    REPORTS / "h100",
    REPORTS / "h200",
    REPORTS / "h100_llm",
    REPORTS / "h200_frontier" / "scans",
    REPORTS / "h200_frontier" / "predicted",
    REPORTS / "breakdown" / "h200",
    next((REPORTS / "emulated_h100").glob("*48-gib*_transformer-big_*.json")),
]
PREDICTED = REPORTS / "breakdown" / "predicted-breakdowns.json"
SECTIONS = ["max-batch", "throughput", "relative", "breakdown", "llm", "frontier", "scans", "guide", "sources"]


class Tables(HTMLParser):
    """Every <table> of a page: its attributes and rows of (text, attributes) cells; <br> read as a newline."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict] = []
        self.cell: dict | None = None
        self.caption = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.tables.append({"attrs": attrs, "rows": []})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append({"attrs": attrs, "cells": []})
        elif tag in ("td", "th") and self.tables:
            self.cell = {"tag": tag, "attrs": attrs, "text": "", "links": []}
            self.tables[-1]["rows"][-1]["cells"].append(self.cell)
        elif tag == "a" and self.cell is not None:
            self.cell["links"].append(attrs)
        elif tag == "br" and self.cell is not None:
            self.cell["text"] += "\n"
        elif tag == "caption":
            self.caption = True

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.cell = None
        elif tag == "caption":
            self.caption = False

    def handle_data(self, data):
        if self.cell is not None and not self.caption:
            self.cell["text"] += data

    def keyed(self, key: str) -> list[dict]:
        return [t for t in self.tables if t["attrs"].get("data-table") == key]


def body_texts(table: dict) -> list[list[str]]:
    """The texts of a table's body rows (the header row left out)."""
    return [
        [c["text"] for c in row["cells"]] for row in table["rows"] if row["cells"] and row["cells"][0]["tag"] == "td"
    ]


def text_rows(report: dict, key: str) -> list[list[str]]:
    """The rows of one table of `memprobe report --format json`, as the texts the text report prints."""
    table = next(t for t in report["tables"] if t["key"] == key)
    return [[c["text"] if isinstance(c, dict) else str(c) for c in row.values()] for row in table["rows"]]


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    """The page of the committed results, written once for this module's tests by the CLI."""
    from click.testing import CliRunner

    from memprobe.cli import main

    out = tmp_path_factory.mktemp("page") / "index.html"
    args = ["report", *map(str, INPUTS), "--with-published", "--predicted", str(PREDICTED), "--html", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == f"wrote {out}"
    return out


@pytest.fixture(scope="module")
def parsed(page) -> Tables:
    tables = Tables()
    tables.feed(page.read_text())
    return tables


def report_json(*args: str) -> dict:
    from click.testing import CliRunner

    from memprobe.cli import main

    result = CliRunner().invoke(main, ["report", *map(str, INPUTS), "--with-published", "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.slow
def test_page_shows_the_text_reports_numbers(parsed):
    text = report_json()
    for key in ("max_batch", "throughput", "best_batch", "ranking", "gains", "utilization"):
        (table,) = parsed.keyed(key)
        shown = [row[: len(text_rows(text, key)[0])] for row in body_texts(table)]
        assert shown == text_rows(text, key), key


def test_every_reference_card_has_the_numbers_memprobe_computed_for_it(parsed):
    views = parsed.keyed("relative")
    assert len(views) >= 10  # H100, H200 and the published cards that have a throughput
    for reference in ("H200 SXM", "Quadro RTX 8000"):
        expected = text_rows(report_json("--reference", reference), "relative")
        matching = [v for v in views if body_texts(v) == expected]
        assert len(matching) == 1, reference
    h100 = next(v for v in views if body_texts(v) == text_rows(report_json("--reference", "H100 SXM"), "relative"))
    own = next(row for row in body_texts(h100) if row[:2] == ["H100 SXM", "measured"])
    assert {cell.split(" ")[0] for cell in own[2:-1]} == {"1.00", "-"}  # the reference divided by itself
    colored = [c for row in h100["rows"] for c in row["cells"] if "background:" in c["attrs"].get("style", "")]
    assert len(colored) > 20  # a heatmap: the cells are painted on the chart's color scale


def test_measured_figures_link_to_their_result_file_and_environment(page, parsed):
    html = page.read_text()
    anchors = set(re.findall(r'<li id="(src-\d+)"', html))
    (table,) = parsed.keyed("max_batch")
    measured = [c for row in table["rows"] for c in row["cells"] if c["attrs"].get("class") == "o-measured"]
    assert len(measured) > 30
    for cell in measured:
        if cell["attrs"].get("data-value") is None:
            continue  # a status ("interrupted"), not a figure
        (link,) = cell["links"]
        assert link["href"][1:] in anchors
        assert re.search(r"\.json \(NVIDIA H[12]00.*, driver [\d.]+, CUDA [\d.]+, torch [\w.+]+\)", link["data-tip"])
    for key in ("scans", "llm", "frontier"):  # tables whose rows are files: a column links each row's file
        (rows,) = parsed.keyed(key)
        for row in body_texts(rows):
            assert re.fullmatch(r"\[\d+\]", row[-1]), (key, row)
    first = re.search(r'<li id="src-1" value="1"><code>([^<]+)</code>', html)
    assert first and Path(first.group(1)).exists()


def test_every_figure_says_where_it_comes_from(page, parsed):
    html = page.read_text()
    (max_batch,) = parsed.keyed("max_batch")
    published = [c for row in max_batch["rows"] for c in row["cells"] if c["attrs"].get("class") == "o-published"]
    assert published and all("(pub)" in c["text"] for c in published)
    (predicted,) = parsed.keyed("predicted")
    guesses = [c for row in predicted["rows"] for c in row["cells"] if c["attrs"].get("class") == "o-predicted"]
    assert guesses and all("(pred)" in c["text"] for c in guesses)
    for kind in ("measured", "predicted", "emulated"):  # the list of files says what each holds
        assert f'<span class="kind kind-{kind}">{kind}</span>' in html
    assert any("predicted" in row[4:6] or row[6] != "-" for row in body_texts(parsed.keyed("frontier")[0]))
    assert parsed.keyed("breakdown_vs_predicted")


def test_the_page_is_self_contained_and_small(page):
    html = page.read_text()
    assert page.stat().st_size < 5_000_000
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert not re.search(r"<(script|img|link|iframe)[^>]*\s(src|href)=", html)
    outside = {u for u in re.findall(r"https?://[^\s\"'<>)]+", html) if not u.startswith("http://www.w3.org/")}
    assert outside == set()  # SVG namespaces only: nothing to fetch
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))  # several inline charts, no id shared
    for section in SECTIONS:
        assert f'<section id="{section}">' in html


def test_charts_are_inline_svg_with_a_value_on_every_point(page, parsed):
    html = page.read_text()
    for chart in ("max_batch", "throughput_vs_batch", "memory_breakdown", "memory_vs_batch", "frontier"):
        assert f'<figure class="chart" id="chart-{chart}"><svg' in html
    tips = re.findall(r'class="tip" data-tip="([^"]+)"', html)
    assert len(tips) > 200
    resnet = [t for t in tips if t.startswith("resnet50, H200 SXM fp16: batch ")]
    assert any("(b*" in t for t in resnet) and any("max batch B" in t for t in resnet)
    text = report_json()
    b_star = next(r for r in text_rows(text, "best_batch") if r[:3] == ["resnet50", "H200 SXM", "fp16"])
    assert any(f"batch {b_star[4]}, {b_star[6]} images/s (b*" in t for t in resnet)


@pytest.mark.parametrize("command", ["report", "guide"])
def test_guide_and_report_write_the_same_page(run, tmp_path, command):
    out = tmp_path / "sub" / "page.html"
    result = run(command, REPORTS / "h100" / "nvidia-h100-80gb-hbm3_resnet50_train_20261124-003756.json", "--html", out)
    assert result.exit_code == 0, result.output
    html = out.read_text()
    for section in ("max-batch", "throughput", "relative", "scans", "guide", "sources"):
        assert f'<section id="{section}">' in html
    assert "Verdicts" in html and "GPU catalog" in html


def test_multi_gpu_files_get_the_scaling_section(run, tmp_path):
    scan = REPORTS / "h100" / "nvidia-h100-80gb-hbm3_resnet50_train_20261124-003756.json"
    data = json.loads(scan.read_text())
    data["environment"]["distributed"] = {"world_size": 2, "strategy": "ddp"}
    data["settings"]["world_size"] = 2
    for p in data["precisions"].values():
        p["settings"]["scaling"] = {"per_gpu_batch": 256, "units_per_s_1": 2000.0, "units_per_s_n": 3800.0,
                                    "unit": "images", "speedup": 1.9, "efficiency": 0.95}  # fmt: skip
    multi = tmp_path / "2x-h100_resnet50-ddp_train.json"
    multi.write_text(json.dumps(data))
    out = tmp_path / "page.html"
    result = run("report", scan, multi, "--html", out)
    assert result.exit_code == 0, result.output
    tables = Tables()
    tables.feed(out.read_text())
    (scaling,) = tables.keyed("scaling")
    rows = body_texts(scaling)
    assert [row[:5] for row in rows] == [
        ["NVIDIA H100 80GB HBM3", "resnet50", p, "ddp", "2"] for p in data["precisions"]
    ]
    # the multi-GPU file: files are numbered in the order results are read in (core/results.result_order: by GPU,
    # workload, mode, date, then name), whatever the order given; the copy's date is the scan's, its name first
    assert {row[12] for row in rows} == {"95.0%"} and {row[-1] for row in rows} == {"[1]"}
    (max_batch,) = tables.keyed("max_batch")
    assert len(body_texts(max_batch)) == 1  # the single-GPU tables keep the one-GPU file alone


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("Error:")]


def test_a_page_that_cannot_be_written_is_one_error_line(run, tmp_path):
    scan = REPORTS / "h100" / "nvidia-h100-80gb-hbm3_resnet50_train_20261124-003756.json"
    folder = tmp_path / "page.html"
    folder.mkdir()
    for target, reason, code in ((folder, "is a directory", 2), (Path("/proc/memprobe/page.html"), "cannot", 1)):
        result = run("report", scan, "--html", target)
        assert result.exit_code == code and "Traceback" not in result.output
        (line,) = error_lines(result.output)
        assert reason in line and str(target if code == 2 else target.parent) in line


def test_a_failed_page_leaves_the_old_one_whole(run, tmp_path):
    out = tmp_path / "page.html"
    out.write_text("the old page")
    scan = REPORTS / "h100" / "nvidia-h100-80gb-hbm3_resnet50_train_20261124-003756.json"
    result = run("report", scan, "--reference", "no such card", "--html", out)
    assert result.exit_code == 1
    (line,) = error_lines(result.output)
    assert "reference GPU 'no such card'" in line
    assert out.read_text() == "the old page"
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run("report", empty, "--html", out)
    assert (
        result.exit_code == 1 and len(error_lines(result.output)) == 1 and "no memprobe result files" in result.output
    )
    assert out.read_text() == "the old page" and {p.name for p in tmp_path.iterdir()} == {"page.html", "empty"}


def test_bad_files_beside_good_ones_are_one_warning_each(run, tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    scan = REPORTS / "h100" / "nvidia-h100-80gb-hbm3_resnet50_train_20261124-003756.json"
    (folder / scan.name).write_text(scan.read_text())
    (folder / "truncated.json").write_text('{"schema": "memprobe.scan", "schema_version": 1, "status": "comp')
    (folder / "foreign.json").write_text('{"name": "not a memprobe file"}')
    out = tmp_path / "page.html"
    result = run("report", folder, "--html", out)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2 and {"truncated.json", "foreign.json"} == {
        name for w in warnings for name in ("truncated.json", "foreign.json") if name in w
    }
    html = out.read_text()
    assert scan.name in html and "truncated.json" not in html


def test_html_refuses_the_options_that_print_one_table(run, tmp_path):
    result = run("report", REPORTS / "h100", "--scans", "--html", tmp_path / "p.html")
    assert result.exit_code == 2 and "--html writes every section" in result.output
    result = run("report", REPORTS / "h100", "--format", "csv", "--html", tmp_path / "p.html")
    assert result.exit_code == 2 and "--format has no effect with --html" in result.output
    assert not (tmp_path / "p.html").exists()


CHROMIUM, DRIVER, NO_BROWSER = find_browser()
needs_browser = pytest.mark.skipif(bool(NO_BROWSER), reason=NO_BROWSER)


@pytest.fixture(scope="module")
def browser():
    with Browser(str(CHROMIUM), str(DRIVER)) as b:  # a laptop's screen: 1366 x 900
        yield b


VISIBLE_RELATIVE = """
var view = Array.from(document.querySelectorAll('.ref-view')).filter(v => !v.hidden);
return view.map(v => [v.dataset.ref, Array.from(v.querySelectorAll('tbody td')).map(td => td.textContent)]);
"""


@needs_browser
def test_the_page_works_in_a_headless_browser(page, browser, tmp_path):
    browser.open(page.as_uri())
    state = browser.run(
        """
        var visible = el => el.getBoundingClientRect().width > 0 && el.getBoundingClientRect().height > 0;
        return {
          tables: Array.from(document.querySelectorAll('table.data')).filter(visible).length,
          rows: Array.from(document.querySelectorAll('table.data')).filter(visible)
                  .every(t => t.tBodies[0].rows.length > 0),
          charts: Array.from(document.querySelectorAll('figure.chart svg'))
                  .map(s => s.getBoundingClientRect().width),
          fetched: performance.getEntriesByType('resource').length,
          overflow: document.documentElement.scrollWidth - window.innerWidth,
        };
        """
    )
    assert state["tables"] >= 10 and state["rows"]
    assert len(state["charts"]) == 5 and min(state["charts"]) > 300
    assert state["fetched"] == 0  # nothing loaded from anywhere: the page is whole
    assert state["overflow"] <= 0  # fits a laptop's width: wide tables scroll in their own box
    shot = Path(os.environ.get("MEMPROBE_PAGE_SCREENSHOT") or tmp_path / "page.png")
    assert browser.screenshot(shot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    errors = [e for e in browser.console() if e.get("level") == "SEVERE"]
    assert errors == []
    # Printed: the controls are left out and the linked figures carry their file's number (print styles).
    browser.call("POST", "/goog/cdp/execute", {"cmd": "Emulation.setEmulatedMedia", "params": {"media": "print"}})
    printed = browser.run(
        """return [getComputedStyle(document.getElementById('controls')).display,
                   getComputedStyle(document.querySelector('table.data a.src'), '::after').content];"""
    )
    browser.call("POST", "/goog/cdp/execute", {"cmd": "Emulation.setEmulatedMedia", "params": {"media": ""}})
    assert printed[0] == "none" and re.fullmatch(r'" \[\d+\]"', printed[1])


@needs_browser
def test_choosing_the_reference_card_changes_the_numbers(page, browser):
    browser.open(page.as_uri())
    ((first_ref, first),) = browser.run(VISIBLE_RELATIVE)
    assert first_ref == "Quadro RTX 8000"  # the 2020 study's reference, as in the text report
    browser.click(browser.find("#reference"))
    browser.click(browser.find('#reference option[value="H200 SXM"]'))
    ((ref, shown),) = browser.run(VISIBLE_RELATIVE)
    assert ref == "H200 SXM" and shown != first
    expected = text_rows(report_json("--reference", "H200 SXM"), "relative")
    assert shown == [cell for row in expected for cell in row]
    assert [e for e in browser.console() if e.get("level") == "SEVERE"] == []


UNCOVERED_POINT = """
var pts = Array.from(document.querySelectorAll('#chart-throughput_vs_batch .tip'));
var box = pts.map(p => p.getBoundingClientRect());
var i = box.findIndex((b, i) => box.slice(i + 1).every(
    o => o.right <= b.left || o.left >= b.right || o.bottom <= b.top || o.top >= b.bottom));
pts[i].id = 'uncovered-point';
"""


@needs_browser
def test_hover_sort_and_filter(page, browser):
    browser.open(page.as_uri())
    browser.run(UNCOVERED_POINT)  # a point no later one is drawn over: the mouse over it shows its own tip
    point = browser.find("#uncovered-point")
    browser.hover(point)
    tip = browser.run("var t = document.getElementById('tip'); return t.hidden ? null : t.textContent;")
    assert tip == browser.run("return arguments[0].getAttribute('data-tip');", point) and " sequences/s" in tip
    header = browser.find('table[data-table="max_batch"] th[data-precision="fp16"] button')
    browser.click(header)
    values = browser.run(
        """return Array.from(document.querySelectorAll('table[data-table="max_batch"] tbody tr'))
           .map(r => r.cells[6].getAttribute('data-value')).filter(v => v !== null).map(Number);"""
    )
    assert values == sorted(values, reverse=True) and len(values) > 20
    browser.click(browser.find('#precisions input[value="fp32"]'))
    hidden = browser.run(
        """return Array.from(document.querySelectorAll('[data-precision="fp32"]')).every(e => e.hidden)
           && !document.querySelector('table[data-table="max_batch"] th[data-precision="fp16"]').hidden;"""
    )
    assert hidden
    assert [e for e in browser.console() if e.get("level") == "SEVERE"] == []
