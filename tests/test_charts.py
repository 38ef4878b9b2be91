"""Charts: the PNG and SVG files are written, are real images, and tell measured, published and predicted apart."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from memprobe.compare.charts import Bar, Panel, draw, max_batch_panels, relative_panels, value_panels, write_charts
from memprobe.cli import main
from memprobe.compare.guide import memory_models, predictions
from memprobe.catalog import load_catalog
from memprobe.compare.comparison import MEASURED, build_comparison
from memprobe.compare.comparison import PREDICTED, PUBLISHED
from memprobe.compare.relative import relative_throughput
from memprobe.results import write_result

from test_report import A100, H100, GiB, loaded, make_result

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def squad_results():
    """A measured bert-large-squad on two cards, with a memory model, so every chart has something to draw."""
    h100 = make_result(H100, workload="bert-large-squad", unit="sequences", precisions={"fp16": {
        "batch": 120, "speed": 300.0, "static": 4 * GiB, "per_sample": 0.6 * GiB, "capacity": 78 * GiB}})
    a100 = make_result(A100, workload="bert-large-squad", unit="sequences", precisions={"fp16": {"batch": 0, "speed": None}})
    return loaded(h100, a100)


def test_panels_keep_origins_apart():
    pairs = squad_results()
    comparison = build_comparison(pairs, with_published=True)
    relative = relative_throughput(comparison)
    panel = next(p for p in relative_panels(relative) if p.title.startswith("bert-large-squad fp16"))
    assert panel.hline == 1.0
    origins = {b.label: b.origin for b in panel.bars}
    assert origins["H100 SXM"] in (MEASURED, PUBLISHED)
    assert {MEASURED, PUBLISHED} <= set(origins.values()) | {b.origin for b in panel.bars}
    oom = [b for b in panel.bars if b.text == "OOM"]
    assert oom and oom[0].value == 0.0  # the A100 OOM counts as 0

    catalog = load_catalog()
    models, _ = memory_models(pairs, catalog)
    batches = max_batch_panels(comparison, predictions(models, catalog.cards), catalog)
    fp16 = next(p for p in batches if p.title == "bert-large-squad fp16")
    kinds = {b.origin for b in fp16.bars}
    assert kinds == {MEASURED, PREDICTED, PUBLISHED}
    assert fp16.ylabel == "max batch (sequences per step)"
    assert any(b.label == "H100 SXM" and b.origin == MEASURED and b.value == 120 for b in fp16.bars)

    value = next(p for p in value_panels(comparison, catalog) if p.title == "bert-large-squad fp16")
    assert value.ylabel == "sequences/s per 1000 USD"
    h100 = next(b for b in value.bars if b.label == "H100 SXM")
    assert h100.value == pytest.approx(300 / 36718.75 * 1000)


def test_write_charts_writes_non_empty_png_and_svg(tmp_path):
    pairs = squad_results()
    # One workload and precision keeps the test fast; measured, published and predicted bars are all still there.
    comparison = build_comparison(pairs, with_published=True, precisions=["fp16"])
    comparison.points = [p for p in comparison.points if p.workload == "bert-large-squad"]
    written = write_charts(comparison, relative_throughput(comparison), pairs, tmp_path / "charts")
    names = sorted(p.name for p in written)
    assert names == sorted(f"{n}.{e}" for n in ("relative_throughput", "max_batch", "throughput_per_1000usd")
                           for e in ("png", "svg"))
    for path in written:
        data = path.read_bytes()
        assert len(data) > 5000, path
        if path.suffix == ".png":
            assert data.startswith(PNG_MAGIC)
        else:
            text = data.decode()
            assert "<svg" in text and "measured by memprobe" in text and "published (other implementation)" in text
    assert "predicted from the memory model" in (tmp_path / "charts" / "max_batch.svg").read_text()
    assert "Quadro RTX 8000 = 1.0" in (tmp_path / "charts" / "relative_throughput.svg").read_text()


def test_draw_refuses_an_empty_chart(tmp_path):
    with pytest.raises(ValueError, match="nothing to draw"):
        draw([], "t", "f", tmp_path / "x")
    written = draw([Panel("p", "samples/s", [Bar("a", 1.0, MEASURED, "1")])], "t", "f", tmp_path / "x")
    assert [p.suffix for p in written] == [".png", ".svg"]


def test_cli_report_charts(tmp_path):
    write_result(make_result(precisions={"fp32": {"batch": 3, "speed": 7.5, "static": GiB, "per_sample": 0.1 * GiB,
                                                  "capacity": 78 * GiB}}), tmp_path / "r.json")
    result = CliRunner().invoke(main, ["report", str(tmp_path / "r.json"), "--charts", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert "max_batch.png" in files and "relative_throughput.svg" in files
    assert all((tmp_path / "out" / f).stat().st_size > 0 for f in files)
    assert "wrote" in result.stderr
