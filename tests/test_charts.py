"""Charts: the PNG and SVG files are written, are real images, tell measured, published and predicted apart,
and are read at screen size: at most about 1600 x 1000 pixels, panels in a grid, no label outside the figure."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from fakes import A100, H100, GiB, clipped, loaded, make_result, pixels, with_curve
from memprobe.cli import main
from memprobe.compare.card_predictions import memory_models, predictions
from memprobe.compare.chart_layout import DPI, MAX_HEIGHT_PX, MAX_WIDTH_PX, figure_size, grid_shape
from memprobe.compare.charts import relative_heat, value_heat, write_charts
from memprobe.compare.comparison import MEASURED, PREDICTED, PUBLISHED, build_comparison
from memprobe.compare.curve_chart import curve_figure, curve_series
from memprobe.compare.heatmap import Heat, HeatCell, draw_heat, heat_figure
from memprobe.compare.max_batch_chart import batch_panels, draw_max_batch, max_batch_figure
from memprobe.compare.relative import relative_throughput
from memprobe.core.cards.catalog import load_catalog
from memprobe.core.records.results import load_results, write_result

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
COMMITTED = Path(__file__).resolve().parents[1] / "reports" / "h100"


def squad_results():
    """A measured bert-large-squad on two cards, with a memory model, so every chart has something to draw."""
    h100 = make_result(
        H100,
        workload="bert-large-squad",
        unit="sequences",
        precisions={
            "fp16": {"batch": 120, "speed": 300.0, "static": 4 * GiB, "per_sample": 0.6 * GiB, "capacity": 78 * GiB}
        },
    )
    a100 = make_result(
        A100, workload="bert-large-squad", unit="sequences", precisions={"fp16": {"batch": 0, "speed": None}}
    )
    return loaded(h100, a100)


def test_heat_and_panels_keep_origins_apart():
    pairs = squad_results()
    comparison = build_comparison(pairs, with_published=True)
    heat = relative_heat(relative_throughput(comparison))
    column = next(i for i, (group, label) in enumerate(heat.columns) if group == "bert-large-squad" and "fp16" in label)
    origins = {heat.rows[r]: cell for (r, c), cell in heat.cells.items() if c == column}
    assert origins[("H100 SXM", MEASURED)].origin == MEASURED
    assert any(origin == PUBLISHED for _label, origin in origins)
    oom = [cell for cell in origins.values() if cell.text == "OOM"]
    assert oom and oom[0].oom and oom[0].value == 0.0  # the A100 OOM counts as 0
    assert heat.columns[-1][0] == "mean"

    catalog = load_catalog()
    models, _ = memory_models(pairs, catalog)
    panel = next(
        p
        for p in batch_panels(comparison, predictions(models, catalog.cards), catalog)
        if p.workload == "bert-large-squad"
    )
    assert {p.origin for p in panel.points if p.precision == "fp16"} == {MEASURED, PREDICTED, PUBLISHED}
    assert panel.unit == "sequences"
    assert any(p.card == "H100 SXM" and p.origin == MEASURED and p.batch == 120 for p in panel.points)
    assert not any(p.card == "H100 SXM" and p.origin == PREDICTED for p in panel.points)  # measured, not predicted
    h200 = next(p for p in panel.points if p.card == "H200 SXM" and p.precision == "fp16")
    assert h200.memory_gib == pytest.approx(catalog.find("H200 SXM").memory_bytes / GiB)

    value, units = value_heat(comparison, catalog)
    assert units["bert-large-squad"] == "sequences/s"
    row = value.rows.index(("H100 SXM", MEASURED))
    cell = next(cell for (r, _c), cell in value.cells.items() if r == row)
    assert cell.text == f"{300 / 36718.75 * 1000:.3g}"
    assert 0 < cell.value <= 1  # the color is the share of the column's best


def test_write_charts_writes_non_empty_png_and_svg(tmp_path):
    pairs = squad_results()
    # One workload and precision keeps the test fast; measured, published and predicted values are all still there.
    comparison = build_comparison(pairs, with_published=True, precisions=["fp16"])
    comparison.points = [p for p in comparison.points if p.workload == "bert-large-squad"]
    written = write_charts(comparison, relative_throughput(comparison), pairs, tmp_path / "charts")
    names = sorted(p.name for p in written)
    assert names == sorted(
        f"{n}.{e}" for n in ("relative_throughput", "max_batch", "throughput_per_1000usd") for e in ("png", "svg")
    )
    for path in written:
        data = path.read_bytes()
        assert len(data) > 5000, path
        if path.suffix == ".png":
            assert data.startswith(PNG_MAGIC)
        else:
            text = data.decode()
            assert "<svg" in text and "measured by memprobe" in text and "published (other implementation)" in text
    assert "predicted (memory model)" in (tmp_path / "charts" / "max_batch.svg").read_text()
    assert "relative to Quadro RTX 8000 (= 1.0)" in (tmp_path / "charts" / "relative_throughput.svg").read_text()


def test_nothing_to_draw_is_refused(tmp_path):
    with pytest.raises(ValueError, match="nothing to draw"):
        draw_heat(Heat([("w", "fp32")], [("H100", MEASURED)]), "t", "f", tmp_path / "x")
    with pytest.raises(ValueError, match="nothing to draw"):
        draw_max_batch([], "f", tmp_path / "y")
    heat = Heat([("w", "fp32")], [("H100", MEASURED)], {(0, 0): HeatCell(1.0, "1.00", MEASURED)})
    assert [p.suffix for p in draw_heat(heat, "t", "f", tmp_path / "x")] == [".png", ".svg"]


@pytest.mark.parametrize(
    "panels, shape",
    [(1, (1, 1)), (3, (1, 3)), (4, (2, 2)), (6, (2, 3)), (7, (3, 3)), (9, (3, 3)), (12, (3, 4)), (13, (4, 4))],
)
def test_grids_are_at_most_four_wide(panels, shape):
    assert grid_shape(panels) == shape
    rows, columns = shape
    width, height = figure_size(rows, columns)
    assert round(width * DPI) <= MAX_WIDTH_PX
    assert (
        round(height * DPI) <= MAX_HEIGHT_PX or rows > 3
    )  # past 3 rows the figure grows rather than the panels shrink


def test_the_committed_results_chart_at_screen_size():
    pairs = load_results([COMMITTED], strict_files=False)
    comparison = build_comparison(pairs, with_published=True)
    catalog = load_catalog()
    models, _ = memory_models(pairs, catalog)
    panels = batch_panels(comparison, predictions(models, catalog.cards), catalog)
    assert len(panels) == len(comparison.workloads()) >= 6
    batch = max_batch_figure(panels, "footer")
    assert len([ax for ax in batch.axes if ax.get_visible()]) == len(panels)  # a panel per workload
    assert batch.axes[0].get_subplotspec().get_gridspec().get_geometry() == grid_shape(len(panels))
    relative = relative_throughput(comparison)
    heat = relative_heat(relative)
    value, _units = value_heat(comparison, catalog)
    figures = {
        "max_batch": batch,
        "relative": heat_figure(heat, "relative", "footer"),
        "value": heat_figure(value, "value", "footer"),
    }
    assert len(heat.rows) == len(relative.rows) > 20  # every card in one chart, one row each
    for name, fig in figures.items():
        width, height = pixels(fig)
        assert width <= MAX_WIDTH_PX and height <= MAX_HEIGHT_PX, (name, width, height)
        assert clipped(fig) == [], name


def test_the_curve_chart_is_a_grid_with_one_legend():
    results = []
    for workload in ("resnet50", "bert-large", "transformer-big", "nasnet-large", "pix2pixhd", "llama-1b", "toy"):
        result = make_result(H100, workload, {p: {"batch": 512, "speed": 1000.0} for p in ("fp32", "bf16")})
        for p in ("fp32", "bf16"):
            with_curve(result, p, {16: 400.0, 128: 900.0, 512: 1000.0})
        results.append(result)
    series = curve_series(build_comparison(loaded(*results)))
    fig = curve_figure(series)
    assert len([ax for ax in fig.axes if ax.get_visible()]) == 7
    assert fig.axes[0].get_subplotspec().get_gridspec().get_geometry() == (3, 3)
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1
    width, height = pixels(fig)
    assert width <= MAX_WIDTH_PX and height <= MAX_HEIGHT_PX
    assert clipped(fig) == []


def test_cli_report_charts(tmp_path):
    write_result(
        make_result(
            precisions={
                "fp32": {"batch": 3, "speed": 7.5, "static": GiB, "per_sample": 0.1 * GiB, "capacity": 78 * GiB}
            }
        ),
        tmp_path / "r.json",
    )
    result = CliRunner().invoke(main, ["report", str(tmp_path / "r.json"), "--charts", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert "max_batch.png" in files and "relative_throughput.svg" in files
    assert all((tmp_path / "out" / f).stat().st_size > 0 for f in files)
    assert "wrote" in result.stderr
