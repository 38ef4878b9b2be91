"""Published multi-GPU figures: the transcription, the loader's checks, the derived efficiency, the report."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from click.testing import CliRunner

from memprobe.cli import main
from memprobe.compare.published import PublishedDataError, default_published_multi_gpu_path, load_published
from memprobe.compare.published_scaling import published_scaling_rows

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "lambda-pytorch-benchmark"


def test_every_multi_gpu_figure_is_the_reference_cell_verbatim():
    if not REFERENCE.exists():
        pytest.skip("../shared/reference is not beside this checkout")
    cells = {}
    for metric, name in (("throughput", "throughput-fp16.csv"), ("max_batch", "batch-fp16.csv")):
        for row in csv.DictReader(open(REFERENCE / name)):
            for workload in ("bert_large_squad", "resnet50"):
                cells[(metric, row["name_gpu"], workload)] = row[workload]
    figures = load_published(multi_gpu=True)
    assert len(figures) == 76 and all(f.num_gpu > 1 for f in figures)
    for f in figures:
        assert cells[(f.metric, f.gpu_as_published, f.workload)] == str(int(f.value))


def test_the_multi_gpu_loader_refuses_single_gpu_rows_and_the_other_way_round(tmp_path):
    text = default_published_multi_gpu_path().read_text()
    one = tmp_path / "one.csv"
    one.write_text(text.replace(",LambdaCloud 2x V100 16GB,2,", ",LambdaCloud 2x V100 16GB,1,", 1))
    with pytest.raises(PublishedDataError, match="num_gpu '1': only GPU counts above 1"):
        load_published(one, multi_gpu=True)
    with pytest.raises(PublishedDataError, match="only single-GPU rows"):
        load_published(default_published_multi_gpu_path())


def test_efficiency_is_n_gpu_throughput_over_n_times_the_same_cards_one_gpu_figure():
    rows = {(r[0], r[1]): r for r in published_scaling_rows(["bert-large-squad", "resnet50"])}
    h100 = rows[("LambdaCloud 2x H100 80GB SXM5", "bert-large-squad")]
    assert h100[3:] == [2, 224, "112", "311 sequences/s @ 112", "603 sequences/s", "1.94x", f"{100 * 603 / 622:.1f}%"]
    assert {r[1] for r in rows.values()} == {"bert-large-squad", "resnet50"}
    assert all(r[1] == "resnet50" for r in published_scaling_rows(["resnet50"]))


def test_report_with_published_adds_the_published_scaling_for_the_scanned_workloads(tmp_path):
    import json

    from conftest import RecordingProgress
    from fakes import TOY, FakeGroup, fake_group_opts
    from memprobe.probe.distributed.scan import scan_distributed

    _result, path = scan_distributed(TOY, fake_group_opts(), 2, "ddp", tmp_path, RecordingProgress(), FakeGroup())
    toy = CliRunner().invoke(main, ["report", str(path), "--with-published"])
    assert toy.exit_code == 0 and "Published multi-GPU scaling" not in toy.output  # nothing published for toy
    data = json.loads(path.read_text())
    data["workload"]["name"] = "resnet50"  # the same file as if it were a resnet50 scan
    path.write_text(json.dumps(data))
    plain = CliRunner().invoke(main, ["report", str(path)])
    assert plain.exit_code == 0 and "Published multi-GPU scaling" not in plain.output
    result = CliRunner().invoke(main, ["report", str(path), "--with-published"])
    assert result.exit_code == 0, result.output
    assert "Published multi-GPU scaling (figures from elsewhere, not measured here)" in result.output
    section = result.output.split("### Published multi-GPU scaling")[1]
    table = section[: section.index("\n\n- ")]  # the rows, up to the notes
    assert "LambdaCloud 2x H100 80GB SXM5" in table and "bert-large-squad" not in table
