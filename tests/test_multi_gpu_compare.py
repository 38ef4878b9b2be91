"""Multi-GPU result files in `guide` and `plan --gpus N`: the scaling table, and the measured per-GPU max batch.

The files are written by the multi-GPU scan against a fake launcher (fakes.FakeGroup) that calls its
GPU an NVIDIA H200, so the catalog knows the card; the single-GPU file is the frozen H200 resnet50 scan.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import RecordingProgress
from fakes import TOY, FakeGroup, fake_group_opts
from memprobe.cli import main
from memprobe.core.estimates.plan import MEASURED, PREDICTED
from memprobe.planning.build import build_plan
from memprobe.probe.distributed.scan import scan_distributed

H200_RESNET = Path(__file__).parent / "data" / "nvidia-h200_resnet50_train_20261124-001712.json"


class H200Group(FakeGroup):
    """FakeGroup whose ranks report an NVIDIA H200."""

    def __call__(self, req):
        result = super().__call__(req)
        result.setup.environment = {"gpu": {"name": "NVIDIA H200"}}
        return result


@pytest.fixture
def multi(tmp_path) -> Path:
    """A 2-GPU ddp scan of the toy workload on an 'NVIDIA H200' (per-GPU B 990, curve timed), and its folder."""
    folder = tmp_path / "2x_h200"
    _result, path = scan_distributed(TOY, fake_group_opts(), 2, "ddp", folder, RecordingProgress(), H200Group())
    return path


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_guide_shows_the_scaling_table_of_multi_gpu_files_beside_the_single_gpu_guide(multi):
    result = run("guide", multi, H200_RESNET, "--wide")  # the whole scaling row on one line
    assert result.exit_code == 0, result.output
    assert "Scaling: per-GPU max batch" in result.output and "memprobe guide: 2 result file(s)" in result.output
    row = next(line for line in result.output.splitlines() if line.startswith("| NVIDIA H200 | toy "))
    assert "| ddp " in row and "| 990 " in row and "990 fits (2 of 2), 991 oom" in row and "90.9%" in row
    assert "Predicted max batch" in result.output or "predicted" in result.output.lower()  # the card guide stays
    alone = run("guide", multi)  # only a multi-GPU file: the catalog and the scaling table, no error
    assert alone.exit_code == 0 and "Scaling: per-GPU max batch" in alone.output
    document = json.loads(run("guide", multi, "--format", "json").output)  # one document, the table in it
    assert "Scaling" in json.dumps(document)


def test_guide_with_bert_large_squad_multi_gpu_files_adds_the_published_multi_gpu_figures(tmp_path):
    from memprobe.core.workload.registry import load_registry

    bert = load_registry()["bert-large-squad"]
    _r, path = scan_distributed(bert, fake_group_opts(), 2, "fsdp", tmp_path, RecordingProgress(), H200Group())
    result = run("guide", path)
    assert result.exit_code == 0, result.output
    assert "Published multi-GPU scaling (figures from elsewhere, not measured here)" in result.output
    assert "source: lambdal/deeplearning-benchmark" in result.output


def test_plan_for_two_gpus_takes_the_measured_per_gpu_max_batch_and_the_groups_throughput(multi):
    plan = build_plan(TOY, "H200", 1980, ["fp32"], results=[multi], gpus=2, strategy="ddp")
    (row,) = plan.rows
    assert row.source == MEASURED and row.max_micro_batch == 990
    # each GPU's share of 1980 is 990: one step of 990 per GPU; the group's 2 x 990 / 0.55 samples/s
    assert (row.micro_batch, row.accumulation_steps, row.global_batch) == (990, 1, 1980)
    assert row.samples_per_s == pytest.approx(2 * 990 / 0.55)
    assert row.seconds_per_global_batch == pytest.approx(0.55)
    assert plan.card == "2x H200 SXM (ddp)"
    assert any("2 GPUs, ddp: the max micro-batch and micro-batch are per GPU" in n for n in plan.notes)
    uneven = build_plan(TOY, "H200", 2001, ["fp32"], results=[multi], gpus=2, strategy="ddp").rows[0]
    assert (uneven.accumulation_steps, uneven.micro_batch, uneven.global_batch) == (2, 501, 2004)
    assert uneven.note.startswith(
        "no micro-batch up to the cap 990 splits 2001 over 2 GPUs exactly (it is not a multiple of 2): the effective "
        "global batch is 2004 = 2 GPUs x 501 x 2 steps"
    )


def test_plan_for_two_gpus_ignores_other_world_sizes_and_strategies_and_predicts_per_gpu(multi, monkeypatch):
    import memprobe.predict.summary as summary

    worlds = []
    real = summary.predict
    monkeypatch.setattr(summary, "predict", lambda *a, **k: worlds.append(k.get("world")) or real(*a, **k))
    one_gpu = build_plan(TOY, "H200", None, ["fp32"], results=[multi], gpus=1)
    assert one_gpu.rows[0].source == PREDICTED  # a 2-GPU file says nothing of one GPU
    fsdp = build_plan(TOY, "H200", None, ["fp32"], results=[multi], gpus=2, strategy="fsdp")
    (row,) = fsdp.rows
    assert row.source == PREDICTED and row.max_micro_batch > 0  # the ddp file says nothing of fsdp
    assert worlds[0] is None and (worlds[1].size, worlds[1].strategy) == (2, "fsdp")  # predicted per GPU of 2
    assert any("per GPU of 2 GPUs, fsdp" in n for n in fsdp.notes)


def test_plan_gpus_and_strategy_mistakes_are_one_line_errors(multi):
    for args, words, code in (
        (["--strategy", "fsdp"], "--strategy applies with --gpus N > 1", 2),
        (["--gpus", "0"], "--gpus", 2),
        (["--gpus", "2", "--model", "toy-pix2pixhd"], "two optimizers", 1),
    ):
        argv = ["plan", "--model", "toy", "--gpu", "H200", "-p", "fp32", "--results", multi, *args]
        if "--model" in args:
            argv = ["plan", "--gpu", "H200", "-p", "fp32", *args]
        result = run(*argv)
        assert result.exit_code == code, result.output
        errors = [line for line in result.output.splitlines() if line.startswith("Error")]
        assert len(errors) == 1 and words in errors[0] and "Traceback" not in result.output
    result = run("plan", "--model", "toy", "--gpu", "H200", "-p", "fp32", "--results", multi, "--gpus", "2")
    assert result.exit_code == 0, result.output
    assert "plan for toy on the 2x " in result.output and "| measured " in result.output
