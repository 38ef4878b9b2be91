"""The HTML page (`memprobe report --html`, `guide --html`): it holds the text reports' numbers, links every
measured one to its result file, needs no network, writes atomically, and works in a real headless Chromium."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from page_parse import Tables, body_texts
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
SECTIONS = [
    "answer",
    "max-batch",
    "throughput",
    "relative",
    "breakdown",
    "llm",
    "frontier",
    "scans",
    "guide",
    "sources",
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
    tips = dict(re.findall(r'<li id="(src-\d+)" [^>]*data-tip="([^"]+)"', html))
    for cell in measured:
        if cell["attrs"].get("data-value") is None:
            continue  # a status ("interrupted"), not a figure
        (link,) = cell["links"]
        assert link["href"][1:] in anchors  # hovering it shows its entry's text: the file and its environment
        assert re.search(
            r"\.json \(NVIDIA H[12]00.*, driver [\d.]+, CUDA [\d.]+, torch [\w.+]+\)", tips[link["href"][1:]]
        )
    for key in ("scans", "llm", "frontier"):  # tables whose rows are files: a column links each row's file
        (rows,) = parsed.keyed(key)
        for row in body_texts(rows):
            assert re.fullmatch(r"\[\d+\]", row[-1]), (key, row)
    # files are named relative to the folders given (absolute here), never by this machine's path
    names = re.findall(r'<li id="src-\d+" [^>]*><code>([^<]+)</code>', html)
    assert names and all(
        not n.startswith("/") and n.split("/")[0] in {i.name for i in INPUTS} | {i.parent.name for i in INPUTS}
        for n in names
    )
    assert str(REPO) not in html


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


def series_tips(html: str, name: str) -> list[str]:
    """The hover texts of the marks of every chart series named `name` (data-name)."""
    groups = re.findall(rf'<g [^>]*data-name="{re.escape(name)}"[^>]*>(.*?)</g>', html)
    return [t for g in groups for t in re.findall(r'data-tip="([^"]+)"', g)]


def test_charts_are_inline_svg_with_a_value_on_every_point(page, parsed):
    html = page.read_text()
    for chart in ("max_batch", "throughput_vs_batch", "memory_breakdown", "memory_vs_batch", "frontier"):
        assert f'<figure class="chart" id="chart-{chart}"><div class="panels"><div class="panel"' in html
    assert "matplotlib" not in html  # drawn by the page's own SVG writer, a panel per workload
    tips = re.findall(r'data-tip="([^"]+)"', html)
    assert len(tips) > 200
    resnet = series_tips(html, "resnet50, H200 SXM fp16 (measured)")
    assert any("(b*" in t for t in resnet) and any("max batch B" in t for t in resnet)
    text = report_json()
    b_star = next(r for r in text_rows(text, "best_batch") if r[:3] == ["resnet50", "H200 SXM", "fp16"])
    assert any(f"batch {b_star[4]}, {b_star[6]} images/s (b*" in t for t in resnet)
    curves = html[html.index('id="chart-throughput_vs_batch"') :]
    panel = re.search(r'<div class="panel" data-workload="resnet50">(.*?)</div>', curves).group(1)
    assert 'data-card="H200 SXM" data-precision="fp16"' in panel  # what the filters hide


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
          charts: Array.from(document.querySelectorAll('figure.chart .panel > svg'))
                  .map(s => s.getBoundingClientRect().width),
          fetched: performance.getEntriesByType('resource').length,
          overflow: document.documentElement.scrollWidth - window.innerWidth,
        };
        """
    )
    assert state["tables"] >= 10 and state["rows"]
    assert len(state["charts"]) > 20 and min(state["charts"]) > 300  # small panels, a workload or card each
    assert state["fetched"] == 0  # nothing loaded from anywhere: the page is whole
    assert state["overflow"] <= 0  # fits a laptop's width: wide tables scroll in their own box
    shot = Path(os.environ.get("MEMPROBE_PAGE_SCREENSHOT") or tmp_path / "page.png")
    assert browser.screenshot(shot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    errors = [e for e in browser.console() if e.get("level") == "SEVERE"]
    assert errors == []
    # Printed: the controls are left out and the linked figures carry their file's number (print styles).
    browser.call("POST", "/goog/cdp/execute", {"cmd": "Emulation.setEmulatedMedia", "params": {"media": "print"}})
    printed = browser.run(
        """var th = document.querySelector('table[data-table="max_batch"] thead th');
           return [getComputedStyle(document.getElementById('controls')).display,
                   getComputedStyle(document.querySelector('table.data a.src'), '::after').content,
                   getComputedStyle(th.parentNode.parentNode).display, th.textContent,
                   getComputedStyle(th).color, document.querySelectorAll('thead button').length];"""
    )
    browser.call("POST", "/goog/cdp/execute", {"cmd": "Emulation.setEmulatedMedia", "params": {"media": ""}})
    assert printed[0] == "none" and re.fullmatch(r'" \[\d+\]"', printed[1])
    # headers repeat on every printed page of a long table: plain text in the header cells (no controls), inked
    assert printed[2:] == ["table-header-group", "workload", "rgb(27, 27, 27)", 0]


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
var pts = Array.from(document.querySelectorAll('#chart-throughput_vs_batch [data-tip]'));
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
    said = "return arguments[0].closest('[data-name]').dataset.name + ': ' + arguments[0].dataset.tip;"
    assert tip == browser.run(said, point) and " sequences/s" in tip
    header = browser.find('table[data-table="max_batch"] th[data-precision="fp16"]')
    browser.click(header)
    values = browser.run(
        """return Array.from(document.querySelectorAll('table[data-table="max_batch"] tbody tr'))
           .map(r => r.cells[6].getAttribute('data-value')).filter(v => v !== null).map(Number);"""
    )
    assert values == sorted(values, reverse=True) and len(values) > 20
    browser.click(browser.find('#precisions input[value="fp32"]'))
    hidden = browser.run(
        """return Array.from(document.querySelectorAll('[data-precision="fp32"]:not(.view)'))
                 .every(e => e.hasAttribute('hidden'))
           && !document.querySelector('table[data-table="max_batch"] th[data-precision="fp16"]').hidden;"""
    )
    assert hidden
    assert [e for e in browser.console() if e.get("level") == "SEVERE"] == []


def guide_view(model: str) -> dict:
    """`guide --model MODEL --format json` on the page's inputs: its notes (the answer first) and its first table."""
    from click.testing import CliRunner

    from memprobe.cli import main

    result = CliRunner().invoke(main, ["guide", *map(str, INPUTS), "--model", model, "--format", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    return {"answer": document["notes"][0], "rows": document["tables"][0]["rows"]}


VISIBLE_VIEW = """
var view = Array.from(document.querySelectorAll('.view')).filter(v => !v.hidden)[0];
var rows = Array.from(view.querySelectorAll('tbody tr')).filter(r => !r.hidden);
return {workload: view.dataset.workload, precision: view.dataset.precision,
        answer: view.querySelector('.answer').textContent, ref: view.querySelector('.ref-name').textContent,
        rows: rows.map(r => Array.from(r.cells).map(c => c.innerText.trim()))};
"""


@needs_browser
def test_the_page_opens_on_one_workload_with_every_card_ranked(page, browser):
    browser.open(page.as_uri())
    top = browser.run("return document.querySelector('main section').id;")
    assert top == "answer"  # the answer comes first
    shown = browser.run(VISIBLE_VIEW)
    assert (shown["workload"], shown["precision"]) == ("bert-large", "fp16")
    # the same sentence, cards, order and figures as `guide --model bert-large` prints
    expected = guide_view("bert-large")
    assert shown["answer"] == expected["answer"] and shown["answer"].startswith("For bert-large fp16: fastest H200")
    assert [r[1] for r in shown["rows"]] == [r["card"] for r in expected["rows"]]
    assert [r[3] for r in shown["rows"]] == [r["max batch"] for r in expected["rows"]]
    assert [r[5] for r in shown["rows"]] == [r["at b*"] for r in expected["rows"]]
    assert shown["ref"] == "H100 SXM"  # the Quadro RTX 8000 has no bert-large figure: a card that has one
    browser.click(browser.find("#view-workload"))
    browser.click(browser.find('#view-workload option[value="resnet50"]'))
    shown = browser.run(VISIBLE_VIEW)
    assert shown["workload"] == "resnet50" and shown["ref"] == "Quadro RTX 8000"
    assert [r[1] for r in shown["rows"][:2]] == ["H200 SXM", "H100 SXM"]  # at b*, the H200 first
    browser.click(browser.find("#reference"))
    browser.click(browser.find('#reference option[value="H200 SXM"]'))
    shown = browser.run(VISIBLE_VIEW)
    assert shown["ref"] == "H200 SXM" and shown["rows"][0][6] == "1.00"
    browser.click(browser.find('input[name="rank-by"][value="batch"]'))
    shown = browser.run(VISIBLE_VIEW)
    batches = [r["max batch"] for r in guide_view("resnet50")["rows"]]
    assert shown["rows"][0][0] == "1" and shown["rows"][0][3] == max(batches, key=lambda t: float(t.split()[0]))
    assert [e for e in browser.console() if e.get("level") == "SEVERE"] == []


FILTERED = """
var hidden = el => el === null || el.hasAttribute('hidden') || el.closest('[hidden]') !== null;
var col = (key, name) => {
  var table = document.querySelector('table[data-table="' + key + '"]');
  var i = Array.from(table.tHead.rows[0].cells).findIndex(th => th.textContent === name);
  return [hidden(table.tHead.rows[0].cells[i]), Array.from(table.tBodies[0].rows).every(r => hidden(r.cells[i]))];
};
var panel = (chart, w) => hidden(document.querySelector('#chart-' + chart + ' .panel[data-workload="' + w + '"]'));
var cardRow = (key, card) => hidden(Array.from(document.querySelectorAll('table[data-table="' + key + '"] tbody tr'))
    .find(r => r.dataset.card === card));
return {verdicts: col('verdicts', 'resnet50'), predicted: col('predicted', 'resnet50 fp16'),
        curves: panel('throughput_vs_batch', 'resnet50'), batches: panel('max_batch', 'resnet50'),
        other: panel('throughput_vs_batch', 'bert-large'),
        value: Array.from(document.querySelectorAll('table[data-table="value"] tbody tr'))
                 .filter(r => r.dataset.workload === 'resnet50').every(hidden),
        option: document.querySelector('#view-workload option[value="resnet50"]').disabled,
        h200: [cardRow('predicted', 'H200 SXM'), cardRow('catalog', 'H200 SXM'),
               Array.from(document.querySelectorAll('#chart-throughput_vs_batch g[data-card="H200 SXM"]')).every(hidden),
               Array.from(document.querySelectorAll('.view tr[data-card="H200 SXM"]')).every(hidden)],
        h100: cardRow('predicted', 'H100 SXM')};
"""


@needs_browser
def test_filters_apply_to_the_guide_and_the_charts(page, browser):
    browser.open(page.as_uri())
    browser.click(browser.find('#workloads input[value="resnet50"]'))
    browser.click(browser.find("details.cards summary"))
    browser.click(browser.find('#cards input[value="H200 SXM"]'))
    state = browser.run(FILTERED)
    assert state["verdicts"] == [True, True] and state["predicted"] == [True, True]  # the guide's tables
    assert state["curves"] and state["batches"] and not state["other"]  # the charts' resnet50 panels
    assert state["value"] and state["option"]  # the guide's value rows, and the workload view's choice
    assert state["h200"] == [True, True, True, True] and state["h100"] is False  # a card: rows, lines, view rows
    browser.click(browser.find('#workloads button[data-all="1"]'))
    assert browser.run(FILTERED)["curves"] is False
    assert [e for e in browser.console() if e.get("level") == "SEVERE"] == []


def test_the_page_names_files_relative_to_the_folders_given(run, tmp_path, monkeypatch):
    """No absolute path of the machine that wrote the page: each file under the folder given, by that folder's name."""
    folder = tmp_path / "deep" / "results"
    folder.mkdir(parents=True)
    scan = REPORTS / "h100" / "nvidia-h100-80gb-hbm3_resnet50_train_20261124-003756.json"
    (folder / scan.name).write_text(scan.read_text())
    other = tmp_path / "elsewhere" / "h200.json"
    other.parent.mkdir()
    other.write_text((REPORTS / "h200" / "nvidia-h200_resnet50_train_20261124-001712.json").read_text())
    monkeypatch.chdir(tmp_path / "deep")
    out = tmp_path / "page.html"
    result = run("report", folder, other, "--html", out)
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert str(tmp_path) not in html and "/root" not in html and "/home" not in html
    names = re.findall(r'<li id="src-\d+" [^>]*><code>([^<]+)</code>', html)
    assert sorted(names) == sorted([f"results/{scan.name}", "h200.json"])


def test_shown_names_are_relative_and_unique(tmp_path):
    from memprobe.compare.page_html import shown_names

    a, b = tmp_path / "a" / "h100", tmp_path / "b" / "h100"
    files = [a / "x.json", b / "x.json", a / "sub" / "y.json", tmp_path / "z.json"]
    names = shown_names(files, [a, b, tmp_path / "z.json"])
    assert names == {
        str(files[0]): "a/h100/x.json",  # two folders of one name: each takes its parent's name too
        str(files[1]): "b/h100/x.json",
        str(files[2]): "h100/sub/y.json",
        str(files[3]): "z.json",  # a file given itself: its name
    }
    assert shown_names([tmp_path / "q.json"], [tmp_path]) == {str(tmp_path / "q.json"): f"{tmp_path.name}/q.json"}


def synthetic_results(folder: Path, count: int) -> None:
    """`count` SYNTHETIC result files (benchmarks/page_scale.py: copies of the committed H100 scans under made-up
    workload names, on relabelled cards; not measurements)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("page_scale", REPO / "benchmarks" / "page_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write_files(folder, count)


@pytest.mark.slow
def test_a_page_of_300_result_files_is_made_in_seconds_and_under_10_mb(run, tmp_path):
    import time

    folder = tmp_path / "synthetic"
    folder.mkdir()
    synthetic_results(folder, 300)
    out = tmp_path / "page.html"
    start = time.process_time()
    result = run("report", folder, "--with-published", "--html", out)
    spent = time.process_time() - start
    assert result.exit_code == 0, result.output
    assert [line for line in result.output.splitlines() if not line.startswith("wrote ")] == []  # no library warning
    assert spent < 10.0, spent  # CPU seconds (the wall clock on a shared machine says little)
    assert out.stat().st_size < 10_000_000
    if NO_BROWSER:
        return
    with Browser(str(CHROMIUM), str(DRIVER)) as big:
        big.open(out.as_uri())
        loaded = big.run("var t = performance.getEntriesByType('navigation')[0]; return t.loadEventEnd - t.startTime;")
        assert loaded < 20_000  # milliseconds, on a loaded CI machine
        spent = big.run(
            """var t0 = performance.now();
               document.querySelector('#workloads button[data-all="0"]').click();
               return performance.now() - t0;"""
        )
        assert spent < 5_000
        assert big.run("return document.querySelectorAll('.panel:not([hidden])').length;") == 0
        assert [e for e in big.console() if e.get("level") == "SEVERE"] == []
