"""`memprobe report`: comparison tables on small known inputs, normalization, definition mismatches,
published figures, the catalog, output formats, the CLI, and that none of these modules imports torch."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from fakes import A100, H100, GiB, loaded, make_result
from memprobe.cli import main
from memprobe.compare import scan_table as report
from memprobe.compare.comparison import ReportError, build_comparison
from memprobe.compare.published import comparable, load_published
from memprobe.compare.relative import relative_table, relative_throughput
from memprobe.compare.report import render
from memprobe.compare.tables import gains_table, max_batch_table, throughput_table, utilization_table
from memprobe.core.cards.catalog import find_card, load_catalog, peak_tflops
from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.records.records import Check, Pair
from memprobe.core.records.results import ScanResult, write_result

RTX8000 = "Quadro RTX 8000"


def rows(table) -> list[list[str]]:
    return [[str(c) for c in row] for row in table.rows]


@pytest.fixture
def two_cards(tmp_path):
    a100 = make_result(A100, precisions={"fp32": {"batch": 40, "speed": 50.0}, "fp16": {"batch": 60, "speed": 150.0}})
    h100 = make_result(H100, precisions={"fp32": {"batch": 42, "speed": 100.0}, "fp16": {"batch": 63, "speed": 400.0}})
    return loaded(a100, h100, tmp_path=tmp_path)


# --- tables on known inputs -------------------------------------------------------------------------


def test_max_batch_table_has_exact_cells_per_workload_gpu_and_precision(two_cards):
    table = max_batch_table(build_comparison(two_cards))
    assert table.columns == ["workload", "GPU", "source", "batch unit", "fp32", "fp16"]
    assert rows(table) == [
        ["toy", "A100 80GB SXM4", "measured", "samples", "40", "60"],
        ["toy", "H100 SXM", "measured", "samples", "42", "63"],
    ]


def test_throughput_table_gives_unit_and_explains_missing_mfu(two_cards):
    table = throughput_table(build_comparison(two_cards))
    assert table.columns == ["workload", "GPU", "source", "unit", "fp32", "fp32 MFU", "fp16", "fp16 MFU"]
    assert rows(table)[1] == ["toy", "H100 SXM", "measured", "samples/s", "100", "-", "400", "-"]
    assert any("records no FLOPs per sample" in n for n in table.notes)


def test_mfu_comes_from_flops_and_the_catalog_peak(tmp_path):
    # 9.89 TFLOP per sample x 50 samples/s on an H100 SXM (989 TFLOP/s bf16 dense) = 50% MFU
    r = make_result(H100, precisions={"bf16": {"batch": 8, "speed": 50.0, "flops": 9.89e12}})
    table = throughput_table(build_comparison(loaded(r, tmp_path=tmp_path)))
    assert rows(table) == [["toy", "H100 SXM", "measured", "samples/s", "50", "50.0%"]]
    assert not table.notes


def test_gains_table_divides_by_fp32_of_the_same_card(two_cards):
    table = gains_table(build_comparison(two_cards))
    assert rows(table) == [
        ["toy", "A100 80GB SXM4", "measured", "1.50x", "3.00x", "-", "-"],
        ["toy", "H100 SXM", "measured", "1.50x", "4.00x", "-", "-"],
    ]


def test_gain_over_an_oom_fp32_is_not_a_number(tmp_path):
    r = make_result(precisions={"fp32": {"batch": 0, "speed": None}, "bf16": {"batch": 2, "speed": 10.0}})
    assert rows(gains_table(build_comparison(loaded(r))))[0][5:] == ["n/a (fp32 OOM)", "n/a (fp32 OOM)"]


def test_utilization_table_shows_means_and_power(tmp_path):
    util = {
        "gpu_util_pct": {"mean": 97.4},
        "mem_util_pct": {"mean": 40.2},
        "power_w": {"mean": 301.6, "max": 350.2},
        "mem_used_bytes": {"max": 10 * GiB},
        "sm_clock_mhz": {"mean": 1800},
    }
    r = make_result(precisions={"fp16": {"batch": 5, "speed": 9.0, "util": util}})
    assert rows(utilization_table(build_comparison(loaded(r)))) == [
        ["H100 SXM", "toy", "fp16", "5", "97", "40", "302 / 350", "10.0", "1800"]
    ]


def test_precision_filter_and_an_empty_result_is_a_clear_error(two_cards):
    comparison = build_comparison(two_cards, precisions=["fp16"])
    assert comparison.precisions() == ["fp16"]
    with pytest.raises(ReportError, match="nothing to report"):
        build_comparison(two_cards, precisions=["bf16"])


def test_a_card_measured_twice_keeps_the_newer_file():
    old = make_result(precisions={"fp32": {"batch": 5, "speed": 1.0}}, created="2026-01-01T00:00:00+00:00")
    new = make_result(precisions={"fp32": {"batch": 7, "speed": 2.0}}, created="2026-02-01T00:00:00+00:00")
    comparison = build_comparison(loaded(old, new))
    assert [p.max_batch for p in comparison.points] == [7]
    assert any("using the newer r1.json" in n for n in comparison.notes)


# --- normalization ---------------------------------------------------------------------------------


def test_default_reference_is_the_first_gpu_given_and_oom_counts_as_zero():
    first = make_result(A100, precisions={"fp32": {"batch": 4, "speed": 20.0}, "fp16": {"batch": 8, "speed": 40.0}})
    second = make_result(H100, precisions={"fp32": {"batch": 6, "speed": 50.0}, "fp16": {"batch": 0, "speed": None}})
    relative = relative_throughput(build_comparison(loaded(first, second)))
    assert relative.reference == "A100 80GB SXM4"
    table = relative_table(relative)
    assert table.columns == ["GPU", "source", "toy fp32", "toy fp16", "mean"]
    assert rows(table) == [
        ["H100 SXM", "measured", "2.50", "0 (OOM)", "1.25"],  # (2.5 + 0) / 2
        ["A100 80GB SXM4", "measured", "1.00", "1.00", "1.00"],
    ]


def test_quadro_rtx_8000_is_the_default_reference_where_present():
    others = make_result(H100, precisions={"fp32": {"batch": 6, "speed": 30.0}})
    rtx = make_result(RTX8000, precisions={"fp32": {"batch": 3, "speed": 10.0}})
    relative = relative_throughput(build_comparison(loaded(others, rtx)))
    assert relative.reference == "Quadro RTX 8000"
    assert rows(relative_table(relative))[0][:3] == ["H100 SXM", "measured", "3.00"]


@pytest.mark.parametrize("name", ["H100 SXM", "h100 sxm", H100, "H100"])
def test_reference_can_be_named_by_catalog_or_device_name(two_cards, name):
    assert relative_throughput(build_comparison(two_cards), name).reference == "H100 SXM"


def test_missing_reference_is_a_clear_error(two_cards):
    with pytest.raises(ReportError) as err:
        relative_throughput(build_comparison(two_cards), "Quadro RTX 8000")
    message = str(err.value)
    assert "reference GPU 'Quadro RTX 8000' is not among the results" in message
    assert "A100 80GB SXM4, H100 SXM" in message and "\n" not in message


def test_columns_the_reference_lacks_are_not_normalized_and_the_mean_says_how_many():
    ref = make_result(A100, precisions={"fp32": {"batch": 4, "speed": 20.0}})
    other = make_result(H100, precisions={"fp32": {"batch": 6, "speed": 40.0}, "fp16": {"batch": 9, "speed": 90.0}})
    relative = relative_throughput(build_comparison(loaded(ref, other)))
    assert relative.columns == [("toy", "fp32")]
    assert any("Not normalized" in n and "toy fp16" in n for n in relative.notes)


# --- workload definitions that differ ---------------------------------------------------------------


def test_same_name_other_params_are_labelled_apart_and_never_normalized_together():
    seq512 = make_result(
        A100, workload="bert-large", params={"seq_len": 512}, precisions={"fp32": {"batch": 4, "speed": 20.0}}
    )
    seq128 = make_result(
        H100, workload="bert-large", params={"seq_len": 128}, precisions={"fp32": {"batch": 30, "speed": 400.0}}
    )
    comparison = build_comparison(loaded(seq512, seq128))
    labels = comparison.workloads()
    assert len(labels) == 2 and all(label.startswith("bert-large@v1#") for label in labels)
    assert any("2 different workload definitions" in n and "params seq_len" in n for n in comparison.notes)
    relative = relative_throughput(comparison)  # reference = the A100, which only has the seq 512 definition
    assert relative.columns == [(labels[0], "fp32")]
    assert [r.gpu for r in relative.rows] == ["A100 80GB SXM4"]


def test_other_versions_are_labelled_by_version():
    v1 = make_result(A100, precisions={"fp32": {"batch": 4, "speed": 20.0}}, version=1)
    v2 = make_result(H100, precisions={"fp32": {"batch": 5, "speed": 30.0}}, version=2)
    comparison = build_comparison(loaded(v1, v2))
    assert comparison.workloads() == ["toy@v1", "toy@v2"]
    assert [r[0] for r in rows(max_batch_table(comparison))] == ["toy@v1", "toy@v2"]


# --- published figures -------------------------------------------------------------------------------


def test_published_transcription_matches_the_reference_tables():
    figures = load_published()
    assert all(f.source in ("lambda-2020", "lambda-2019-sweeps", "lambda-bench") for f in figures)

    def one(source, gpu, workload, precision, metric):
        found = [
            f
            for f in figures
            if (f.source, f.gpu, f.workload, f.precision, f.metric) == (source, gpu, workload, precision, metric)
        ]
        assert len(found) == 1, found
        return found[0]

    assert one("lambda-bench", "Quadro RTX 8000", "bert_large_squad", "fp16", "throughput").value == 50
    assert one("lambda-bench", "Quadro RTX 8000", "bert_large_squad", "fp16", "max_batch").value == 64
    assert one("lambda-bench", "LambdaCloud 1x H100 80GB SXM5", "bert_large_squad", "fp16", "throughput").value == 311
    assert one("lambda-bench", "LambdaCloud 1x B200 192GB SXM5", "resnet50", "fp16", "max_batch").value == 3328
    # the catalog's "FP32" file is TF32 on Ampere and newer, true FP32 on Turing
    assert one("lambda-bench", "A100 80GB SXM4", "resnet50", "tf32", "throughput").value == 1066
    assert one("lambda-bench", "Quadro RTX 8000", "resnet50", "fp32", "throughput").value == 274
    assert one("lambda-2020", "Quadro RTX 8000", "Pix2PixHD", "fp32", "max_batch").value == 2
    assert one("lambda-2020", "GeForce RTX 2080 Ti", "Pix2PixHD", "fp32", "max_batch").value == 0
    assert one("lambda-2020", "TITAN RTX", "NasNet Large", "fp32", "throughput").value == 16.3
    tb = one("lambda-2019-sweeps", "Quadro RTX 8000", "Transformer Big", "fp16", "max_batch")
    assert (tb.value, tb.unit) == (16000, "tokens")
    assert not any(f.gpu.startswith(("2x", "4x", "8x")) or "LambdaCloud 2x" in f.gpu for f in figures)
    assert {f.memprobe_workload for f in comparable(figures)} == {
        "bert-large-squad",
        "resnet50",
        "nasnet-large",
        "pix2pixhd",
        "transformer-big",
    }


def test_every_published_card_is_in_the_catalog():
    catalog = load_catalog()
    unknown = sorted({f.gpu for f in load_published() if catalog.find(f.gpu) is None})
    assert unknown == []


def test_with_published_puts_a_measured_card_among_published_ones_normalized_to_the_rtx_8000():
    mine = make_result(
        H100, workload="bert-large-squad", unit="sequences", precisions={"fp16": {"batch": 120, "speed": 100.0}}
    )
    comparison = build_comparison(loaded(mine), with_published=True)
    relative = relative_throughput(comparison)
    assert relative.reference == "Quadro RTX 8000"
    by_row = {(r[0], r[1]): r for r in rows(relative_table(relative))}
    column = relative_table(relative).columns.index("bert-large-squad fp16")
    assert by_row[("H100 SXM", "measured")][column] == "2.00 (vs pub)"  # 100 / 50 published
    assert by_row[("H100 SXM", "published")][column] == "6.22 (pub)"  # 311 / 50
    batches = {(r[1], r[2]): r for r in rows(max_batch_table(comparison)) if r[0] == "bert-large-squad"}
    assert batches[("H100 SXM", "measured")][-1] == "120"
    assert batches[("Quadro RTX 8000", "lambda-bench")][-1] == ">=64 (pub)"


def test_translation_batches_are_also_shown_in_tokens_beside_the_published_token_batches():
    task = {"units_per_sample": 128.0, "tokens_per_sample": 128, "target_tokens_per_sample": 128}
    mine = make_result(
        H100,
        workload="transformer-big",
        unit="tokens",
        precisions={"fp16": {"batch": 100, "speed": 90000.0, "task": task}},
    )
    table = max_batch_table(build_comparison(loaded(mine), with_published=True))
    by = {(r[1], r[2]): r for r in rows(table) if r[0] == "transformer-big"}
    fp16 = table.columns.index("fp16")
    mine_row, published_row = by[("H100 SXM", "measured")], by[("Quadro RTX 8000", "lambda-2019-sweeps")]
    assert (mine_row[3], mine_row[fp16]) == ("samples of 128 tokens", "100 (12800 tok)")
    assert (published_row[3], published_row[fp16]) == ("tokens", ">=16000 (pub)")


def test_published_oom_rows_count_as_zero():
    comparison = build_comparison([], with_published=True)
    relative = relative_throughput(comparison)
    by_row = {(r[0], r[1]): r for r in rows(relative_table(relative))}
    column = relative_table(relative).columns.index("pix2pixhd fp32")
    assert by_row[("GeForce RTX 2080 Ti", "published")][column] == "0 (OOM) (pub)"


# --- the catalog ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "device, precision, expected",
    [
        (H100, "bf16", 989),
        (H100, "tf32", 495),
        (H100, "fp32", 67),
        ("NVIDIA H100 PCIe", "fp16", 756),
        ("NVIDIA H100 PCIe", "tf32", 378),
        (A100, "fp32", 19.5),
        ("NVIDIA A100-PCIE-40GB", "tf32", 156),
        ("NVIDIA H200", "bf16", 989),
        ("Quadro RTX 8000", "bf16", None),
        ("Quadro RTX 8000", "tf32", None),
        ("Some Future GPU", "fp16", None),
        (H100, "fp8", None),
    ],
)
def test_peak_tflops(device, precision, expected):
    assert peak_tflops(device, precision) == expected


@pytest.mark.parametrize(
    "device, card",
    [
        ("NVIDIA GeForce RTX 2080 Ti", "GeForce RTX 2080 Ti"),
        ("NVIDIA GeForce RTX 2080", "GeForce RTX 2080"),
        ("NVIDIA GeForce RTX 2080 SUPER", None),
        ("NVIDIA A10", "A10"),
        ("NVIDIA A10G", None),
        ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
        ("Quadro RTX 6000", "Quadro RTX 6000"),
        ("Tesla V100-SXM2-32GB", "V100 SXM2 32GB"),
        ("NVIDIA GeForce RTX 3090 Ti", None),
    ],
)
def test_device_names_match_the_right_card(device, card):
    found = find_card(device)
    assert (found.name if found else None) == card


def test_every_catalog_row_names_its_sources():
    catalog = load_catalog()
    names = {c.name for c in catalog.cards}
    for required in (
        "GeForce RTX 2060",
        "GeForce RTX 2070",
        "GeForce RTX 2080",
        "GeForce GTX 1080 Ti",
        "GeForce RTX 2080 Ti",
        "TITAN RTX",
        "Quadro RTX 6000",
        "Quadro RTX 8000",
        "V100 SXM2 16GB",
        "A100 40GB PCIe",
        "A100 80GB SXM4",
        "A10",
        "RTX A6000",
        "L4",
        "L40S",
        "GeForce RTX 3090",
        "GeForce RTX 4090",
        "H100 SXM",
        "H100 PCIe",
        "H200 SXM",
    ):
        assert required in names
    for card in catalog.cards:
        assert card.spec_source and card.peak_source and card.memory_bytes > 0
        for price in card.prices:
            assert price.usd > 0 and price.date and price.source in catalog.sources


# --- formats and the command line -------------------------------------------------------------------


def test_csv_and_json_formats_parse(two_cards):
    comparison = build_comparison(two_cards)
    tables = [max_batch_table(comparison), relative_table(relative_throughput(comparison))]
    data = json.loads(render(tables, "json", "t", ["a note"]))
    assert data["tables"][0]["rows"][1]["fp16"] == {"text": "63", "value": 63.0, "origin": "measured"}
    assert data["notes"] == ["a note"]
    lines = [line for line in render(tables, "csv").splitlines() if line and not line.startswith("#")]
    parsed = list(csv.reader(io.StringIO("\n".join(lines))))
    assert parsed[0] == ["workload", "GPU", "source", "batch unit", "fp32", "fp16"]
    assert parsed[2] == ["toy", "H100 SXM", "measured", "samples", "42", "63"]
    plain = render(tables, "plain").splitlines()
    assert "Max batch per workload, GPU and precision" in plain and "|" not in "".join(plain)
    with pytest.raises(ValueError, match="unknown format"):
        render(tables, "xml")


@pytest.fixture
def run():
    runner = CliRunner()
    return lambda *args: runner.invoke(main, [str(a) for a in args])


def _one_line_error(result):
    assert result.exit_code != 0, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1, result.output
    return errors[0]


def test_cli_report_on_a_folder_skips_other_json_with_a_warning(run, tmp_path):
    write_result(make_result(precisions={"fp32": {"batch": 3, "speed": 7.5}}), tmp_path / "a" / "r.json")
    (tmp_path / "a" / "bench.json").write_text('{"rows": []}')
    result = run("report", tmp_path, "--format", "plain")
    assert result.exit_code == 0, result.output
    assert "warning: skipped" in result.stderr and "bench.json" in result.stderr
    assert "H100 SXM" in result.stdout and "7.50" in result.stdout


def test_cli_report_json_output(run, tmp_path):
    write_result(make_result(precisions={"fp32": {"batch": 3, "speed": 7.5}}), tmp_path / "r.json")
    data = json.loads(run("report", tmp_path / "r.json", "--format", "json").stdout)
    assert [t["key"] for t in data["tables"]][:3] == ["max_batch", "throughput", "relative"]


def test_cli_report_unreadable_file_is_a_one_line_error(run, tmp_path):
    bad = tmp_path / "bench.json"
    bad.write_text('{"rows": []}')
    assert "not a memprobe result file" in _one_line_error(run("report", bad))
    assert "cannot read" in _one_line_error(run("report", tmp_path / "missing.json"))


def test_cli_report_missing_reference_and_bad_precision(run, tmp_path):
    write_result(make_result(), tmp_path / "r.json")
    assert "is not among the results" in _one_line_error(run("report", tmp_path, "--reference", "RTX 8000"))
    assert "unknown precision" in _one_line_error(run("report", tmp_path, "--precision", "fp8"))


def test_cli_report_on_a_folder_without_results(run, tmp_path):
    (tmp_path / "bench.json").write_text("[]")
    assert "no memprobe result files" in _one_line_error(run("report", tmp_path))


@pytest.mark.parametrize("command", ["report", "guide"])
def test_cli_help(run, command):
    result = run(command, "--help")
    assert result.exit_code == 0 and "Usage:" in result.output
    assert command in run("--help").output


def test_report_modules_do_not_import_torch():
    code = (
        "import sys, memprobe.compare.report, memprobe.compare.guide, memprobe.compare.charts, memprobe.core.cards.catalog, memprobe.compare.published; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_scan_rows_count_fresh_trials_once_and_show_mfu():
    result = make_result(precisions={"fp16": {"batch": 108, "speed": 266.0}, "bf16": {"batch": 107, "speed": None}})
    fp16 = result.precisions["fp16"]
    # the search's fresh trials at 109 and 108 served as the proof: nothing was re-run
    fp16.attempts = [
        Attempt(b, o, fresh=f)
        for b, o, f in [
            (1, "fit", False),
            (2, "fit", False),
            (16, "fit", False),
            (105, "fit", True),
            (108, "fit", True),
            (109, "oom", True),
        ]
    ]
    fp16.proof.checks, fp16.proof.reused_from_search = [Check(109, "oom"), Check(108, "fit")], [109, 108]
    fp16.proof.search = Pair(108, 109)
    fp16.throughput.mfu, fp16.throughput.step_time = 0.321, {"median_s": 0.402}
    bf16 = result.precisions["bf16"]  # a file from before fresh search trials: two re-checks
    bf16.attempts = [Attempt(1, "fit"), Attempt(108, "oom")]
    bf16.proof.checks = [Check(108, "oom"), Check(107, "fit")]
    by = {r["precision"]: r for r in report.scan_rows([result])}
    assert by["fp16"]["trials (fresh)"] == "6 (3)"
    assert by["fp16"]["MFU %"] == "32.1"
    assert by["fp16"]["step ms (median)"] == "402"
    assert by["bf16"]["trials (fresh)"] == "4 (2)"
    assert by["bf16"]["MFU %"] == "-"


def test_report_module_exposes_the_scan_table_still():
    assert callable(report.scan_table) and callable(report.scan_rows)


def test_scan_rows_newest_only_keeps_the_newest_finished_precision_per_card():
    # an interrupted fp16 in the first file; a rerun finished fp16 and bf16; fp32 only in the first
    first = make_result(
        precisions={"fp32": {"batch": 10, "speed": 1.0}, "fp16": {"batch": 0, "status": "interrupted"}},
        created="2026-01-01T00:00:00+00:00",
    )
    rerun = make_result(
        precisions={"fp16": {"batch": 20, "speed": 2.0}, "bf16": {"batch": 21, "speed": 2.0}},
        created="2026-01-02T00:00:00+00:00",
    )
    older_done = make_result(precisions={"bf16": {"batch": 19, "speed": 2.0}}, created="2025-12-31T00:00:00+00:00")
    other_card = make_result(gpu=A100, precisions={"fp16": {"batch": 5, "speed": 1.0}})
    got = [
        (r["gpu"], r["precision"], r["max batch"])
        for r in report.scan_rows([rerun, first, older_done, other_card], newest_only=True)
    ]
    assert got == [(A100, "fp16", 5), (H100, "fp32", 10), (H100, "fp16", 20), (H100, "bf16", 21)]
    assert len(report.scan_rows([first, rerun])) == 4  # without newest_only every precision of every file
    only = report.scan_rows([first, rerun], newest_only=True, precisions=["bf16"])
    assert [r["precision"] for r in only] == ["bf16"]


def test_report_scans_prints_the_scan_table_in_each_format(tmp_path):
    pairs = loaded(
        make_result(precisions={"fp32": {"batch": 10, "speed": 1.0}, "fp16": {"batch": 20, "speed": 2.0}}),
        tmp_path=tmp_path,
    )
    runner = CliRunner()
    done = runner.invoke(main, ["report", "--scans", str(tmp_path)])
    assert done.exit_code == 0, done.output
    assert done.output.startswith("| gpu") and "| 20 " in done.output
    as_json = json.loads(
        runner.invoke(main, ["report", "--scans", "--format", "json", "-p", "fp16", str(tmp_path)]).output
    )
    assert [(r["precision"], r["max batch"]) for r in as_json] == [("fp16", 20)]
    as_csv = list(
        csv.DictReader(io.StringIO(runner.invoke(main, ["report", "--scans", "--format", "csv", str(tmp_path)]).output))
    )
    assert [r["max batch"] for r in as_csv] == ["10", "20"]
    empty = runner.invoke(main, ["report", "--scans", str(tmp_path / "nothing-here")])
    assert empty.exit_code != 0 and "Traceback" not in empty.output
    assert pairs


def test_report_scans_says_under_the_table_where_an_edge_was_not_monotone(tmp_path):
    result = make_result(precisions={"fp32": {"batch": 10, "speed": 1.0}, "fp16": {"batch": 9405, "speed": 2.0}})
    note = (
        "edge not monotone: 9412 fitted in the search's own trials (not fresh checks), at or above it (fresh failures "
        "at 9406, 9407, 9409, 9411, 9412); B = 9405 fits fresh and 9406 fails fresh"
    )
    result.precisions["fp16"].proof.non_monotone = {"fits": [], "search_fits": [9412], "fails": [9406], "note": note}
    loaded(result, tmp_path=tmp_path)
    runner = CliRunner()
    done = runner.invoke(main, ["report", "--scans", "--wide", str(tmp_path)])
    assert done.exit_code == 0, done.output
    assert done.output.rstrip("\n").splitlines()[-1] == f"{H100} toy fp16: {note}"
    assert done.output.count("edge not monotone") == 1  # fp32's edge was monotone
    assert "not monotone" not in runner.invoke(main, ["report", "--scans", "-p", "fp32", str(tmp_path)]).output
    as_json = json.loads(runner.invoke(main, ["report", "--scans", "--format", "json", str(tmp_path)]).output)
    assert len(as_json) == 2  # json and csv keep the rows only: the note is in the result file's proof


def test_an_inference_scan_is_never_a_row_of_training():
    # one card, one workload, one precision: trained and inferred are two questions, two rows, no "two files" note
    train = make_result(precisions={"fp16": {"batch": 354, "speed": 478.0}})
    infer = make_result(precisions={"fp16": {"batch": 9406, "speed": 1524.0}}, created="2026-01-02T00:00:00+00:00")
    infer.settings.mode = "infer"
    comparison = build_comparison(loaded(train, infer))
    rows = {(p.workload, p.precision): p.max_batch for p in comparison.points}
    assert rows == {("toy", "fp16"): 354, ("toy (inference)", "fp16"): 9406}
    assert not any("two files" in note for note in comparison.notes)


def test_report_scans_keeps_an_inference_scan_apart_from_training():
    # the newer inference file must not replace the training row of the same workload and precision
    train = make_result(precisions={"fp16": {"batch": 354, "speed": 478.0}})
    infer = make_result(precisions={"fp16": {"batch": 9406, "speed": 1524.0}}, created="2026-01-02T00:00:00+00:00")
    infer.settings.mode = "infer"
    got = [(r["model"], r["max batch"]) for r in report.scan_rows([train, infer], newest_only=True)]
    assert got == [("toy", 354), ("toy (inference)", 9406)]


def test_report_says_when_results_ran_other_library_versions():
    from memprobe.compare.report import library_notes

    def result(transformers):
        return ScanResult.from_dict(
            {
                "schema": "memprobe.probe.scan",
                "schema_version": 2,
                "status": "complete",
                "created": "2026-11-27T00:00:00",
                "workload": {"name": "t5"},
                "environment": {"versions": {"torch": "2.11.0", "transformers": transformers, "timm": "1.0.29"}},
                "settings": {},
                "precisions": {},
            }
        )

    assert library_notes([result("5.17.0"), result("5.17.0")]) == []
    (note,) = library_notes([result("5.17.0"), result("5.24.0"), result("5.24.0")])
    assert "transformers 5.17.0, timm 1.0.29 (1 file); torch 2.11.0, transformers 5.24.0, timm 1.0.29 (2 files)" in note
    assert "compare like with like" in note
