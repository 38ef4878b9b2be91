"""The HTML page of generate result files: its own generation section (concurrent sequences, KV cache bytes per
token, the KV capacity beside vLLM's formula labelled a formula, prefill and decode tokens/s, the decode curve),
generate workloads viewed apart from training ones, and no "Training throughput" for them in text or page."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from memprobe.cli import main
from page_parse import Tables, body_texts
from webdriver import Browser, find_browser

CHROMIUM, DRIVER, NO_BROWSER = find_browser()
needs_browser = pytest.mark.skipif(bool(NO_BROWSER), reason=NO_BROWSER)
REPORTS = Path(__file__).resolve().parents[1] / "reports"
LLAMA_8B = next((REPORTS / "h200_generate" / "llama-8b-p2048-n64").glob("*.json"))
LLAMA_1B = next((REPORTS / "h200_generate" / "llama-1b-p8192-n64").glob("*.json"))
TRAINING = next((REPORTS / "h200").glob("*resnet50*.json"))


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("genpage") / "index.html"
    result = CliRunner().invoke(main, ["report", str(LLAMA_8B), str(LLAMA_1B), str(TRAINING), "--html", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _generation(path: Path) -> dict:
    return json.loads(path.read_text())["precisions"]["bf16"]["generation"]


def test_the_generation_section_holds_each_files_figures_linked_to_it(page):
    html = page.read_text()
    tables = Tables()
    tables.feed(html)
    (table,) = tables.keyed("generation")
    header = [c["text"] for c in table["rows"][0]["cells"]]
    rows = {r[0]: dict(zip(header, r)) for r in body_texts(table)}
    for path in (LLAMA_8B, LLAMA_1B):
        g = _generation(path)
        row = rows[json.loads(path.read_text())["workload"]["name"]]
        assert row["B (sequences)"] == str(g["sequences"])
        assert row["KV KiB/token"] == f"{g['kv_bytes_per_token'] / 1024:g}"
        assert row["vLLM formula tokens (a formula)"] == f"{g['vllm_formula_tokens']:,}"
        assert row["decode tok/s"] == f"{g['decode_tokens_per_s']:,.0f}"
        assert row["prefill tok/s"] == f"{g['prefill_tokens_per_s']:,.0f}"
    assert all(r["cells"][-1]["links"] for r in table["rows"][1:])  # each row names its result file
    section = html[html.index('id="generation"') : html.index("</section>", html.index('id="generation"'))]
    assert "a formula and not a measurement" in section


def test_the_decode_curve_has_a_point_per_timed_generation(page):
    html = page.read_text()
    chart = html[html.index('id="chart-decode_curve"') :]
    chart = chart[: chart.index("</figure>")]
    curve = json.loads(LLAMA_8B.read_text())["precisions"]["bf16"]["curve"]
    timed = {p["batch"] for p in curve if p.get("outcome") == "fit" and p.get("decode_tokens_per_s")}
    panel = chart[chart.index('data-workload="llama-8b+p2048+n64"') :]
    panel = panel[: panel.index("</svg>")]
    shown = {int(m) for m in re.findall(r"(\d+) sequences: [\d,]+ decode tokens/s", panel)}
    assert shown == timed and "B = 180" in panel


def test_a_generate_workload_is_its_own_view_and_never_training_throughput(page):
    html = page.read_text()
    views = re.findall(r'class="view[^"]*" data-workload="([^"]+)"', html)
    assert "llama-8b+p2048+n64" in views and "resnet50" in views
    view = html[html.index('data-workload="llama-8b+p2048+n64"') :]
    view = view[: view.index("</table>")]
    assert "concurrent sequences" in view and "new tokens/s" in view and "images" not in view
    text = CliRunner().invoke(main, ["report", str(LLAMA_8B)])
    assert text.exit_code == 0 and "Training throughput" not in text.output
    assert "Generation throughput" in text.output


@needs_browser
def test_the_generation_section_works_in_a_headless_browser(page):
    with Browser(str(CHROMIUM), str(DRIVER)) as browser:
        browser.open(page.as_uri())
        state = browser.run(
            """var s = document.getElementById('generation');
               var chart = s.querySelector('#chart-decode_curve svg');
               return [s.querySelectorAll('table.data tbody tr').length, chart.getBoundingClientRect().width,
                       s.querySelectorAll('#chart-decode_curve .panel').length];"""
        )
        assert state[0] == 2 and state[1] > 300 and state[2] == 2
        assert [e for e in browser.console() if e.get("level") == "SEVERE"] == []
