"""What the CLI prints fits a terminal: `memprobe list` within 120 columns (a workload's whole entry on request),
error lines cut to what a terminal shows; and the API's exceptions have names a user can catch."""

from __future__ import annotations

import warnings

import click
import pytest
from click.testing import CliRunner

import memprobe
from memprobe.cli import main
from memprobe.cli.helpers import MAX_ERROR_CHARS, one_line


@pytest.mark.parametrize("argv", [["list"], ["list", "--all"], ["list", "llama-*", "bert-large"], ["list", "*"]])
def test_list_fits_120_columns(argv):
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 120, result.output


def test_list_shows_a_workloads_whole_entry():
    table = CliRunner().invoke(main, ["list"]).output
    assert "bert-large" in table and "`memprobe list NAME`" in table and "params" not in table.splitlines()[0]
    detail = CliRunner().invoke(main, ["list", "llama-8b"]).output
    assert "params:" in detail and "kv_heads=8" in detail and "rope_theta=500000.0" in detail
    assert detail.startswith("name:        llama-8b\n")


def test_one_line_keeps_the_first_line_and_cuts_at_the_limit():
    assert one_line("short") == "short"
    assert one_line("first\nsecond") == "first ... (7 more characters not shown)"
    cut = one_line("x" * 12000)
    assert cut.startswith("x" * MAX_ERROR_CHARS) and cut.endswith("(11600 more characters not shown)")


def test_every_commands_error_line_is_cut(monkeypatch):
    def long_error(*_args, **_kwargs):
        raise click.ClickException("y" * 12000 + "\nand a second line")

    monkeypatch.setattr("memprobe.compare.guide.guide_report", long_error)
    result = CliRunner().invoke(main, ["guide"])
    assert result.exit_code == 1
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(line) < MAX_ERROR_CHARS + 60 and "more characters not shown" in line


def test_find_max_batch_without_cuda_raises_a_named_error(monkeypatch):
    from memprobe.probe.scan import NoCudaError

    def no_cuda(*_args, **_kwargs):
        raise NoCudaError("torch was built without CUDA")

    monkeypatch.setattr("memprobe.probe.scan.scan_workload", no_cuda)
    with pytest.raises(memprobe.NoGPUError, match="predict_max_batch predicts the max batch without one"):
        memprobe.find_max_batch("toy", precision="fp32", device=0)
    assert issubclass(memprobe.NoGPUError, RuntimeError)
    assert memprobe.CustomModelError and memprobe.RegistryError and memprobe.UserCodeError


def test_find_max_batch_with_every_gpu_hidden_raises_the_named_error(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(memprobe.NoGPUError, match="CUDA_VISIBLE_DEVICES is empty"):
        memprobe.find_max_batch("toy", precision="fp32", device=0)


def test_fsdp2s_view_warning_is_not_repeated_per_traced_step():
    pytest.importorskip("torch")
    from memprobe.predict.data_parallel import World, fake_world, notes

    message = (
        "FSDP2-wrapped module (FSDPBertForPreTraining) returned a view tensor. An in-place op on this view "
        "will silently drop the pre-backward hook"
    )
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with fake_world(World(2, "fsdp")):
            for _ in range(9):
                warnings.warn(message, UserWarning, stacklevel=1)
            warnings.warn("another warning", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["another warning"]
    assert any("returned a view tensor" in n for n in notes(World(2, "fsdp")))
