"""Output paths that would lose data, hang or lose their reason, and the streams and folders a command is given (issue
51, items 1, 2, 4 and 6): each is one `Error` line and nothing is overwritten, or the output goes where the user meant
and says so (harness: tests/bad_input.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from bad_input import H100_SCAN, check, workdir  # noqa: F401  (workdir is a fixture)
from memprobe.cli import main
from memprobe.core.files import outputs
from memprobe.core.files.outputs import OutputError, atomic_write

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
P = ["predict", "--model", "toy", "-p", "fp32", "--memory", "8GiB", "--breakdown"]


@pytest.fixture
def inputs(workdir):  # noqa: F811
    """The working folder with a result file `in.json` and a folder `results/` holding another (`r.json`)."""
    (workdir / "in.json").write_text(H100_SCAN.read_text())
    (workdir / "results").mkdir()
    (workdir / "results" / "r.json").write_text(H100_SCAN.read_text())
    return workdir


# (id, argv, a fragment the one-line error must contain): every one exits 2 (a bad output path, as a folder is)
REFUSED = [
    ("html-is-the-input", ["report", "in.json", "--html", "in.json"], "in.json is a file this command reads"),
    ("html-is-the-input-by-another-path", ["guide", "in.json", "--html", "./in.json"], "(in.json): writing it"),
    ("html-is-a-result-in-a-folder", ["report", "results", "--html", "results/r.json"], "is a memprobe result file"),
    ("html-is-another-result-file", ["report", "results", "--html", "in.json"], "is a memprobe result file"),
    ("html-a-new-folder", ["report", "in.json", "--html", "newdir/"], "newdir/ ends in '/', so it names a folder"),
    ("charts-standard-output", ["report", "in.json", "--charts", "-"], "- is standard output, not a folder"),
    ("breakdown-out-is-compared", ["predict", "--model", "resnet50", "--breakdown", "--compare", "in.json",
                                   "--breakdown-out", "in.json"], "in.json is a file this command reads"),
    ("breakdown-out-is-the-model", ["predict", "--model", "{exits.py}:build", "--breakdown", "--breakdown-out",
                                    "{exits.py}"], "exits.py is a file this command reads"),
    ("breakdown-out-standard-output", P + ["--breakdown-out", "-"], "-: standard output carries this command's"),
    ("breakdown-out-a-new-folder", P + ["--breakdown-out", "bd/"], "bd/ ends in '/', so it names a folder"),
]  # fmt: skip


@pytest.mark.parametrize("argv, fragment", [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_an_output_that_would_replace_an_input_or_names_a_folder_is_refused(inputs, argv, fragment):
    before = {p: p.read_bytes() for p in inputs.rglob("*") if p.is_file()}
    check(inputs, argv, fragment, code=2)
    assert {p: p.read_bytes() for p in inputs.rglob("*") if p.is_file()} == before  # nothing written or replaced
    assert not (inputs / "newdir").exists() and not (inputs / "bd").exists()


def test_html_dash_writes_the_page_to_standard_output_and_says_so(inputs):
    result = CliRunner().invoke(main, ["guide", "--html", "-"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("<!DOCTYPE html>") and result.stdout.rstrip().endswith("</html>")
    assert "wrote the page to standard output" in result.stderr and not (inputs / "-").exists()


@pytest.mark.parametrize(
    "target, reason",
    [("/dev/full", "cannot write /dev/full (No space left on device)"), ("loop.html", "Too many levels of symbolic")],
    ids=["full-disk", "link-loop"],
)
def test_a_page_that_cannot_be_written_keeps_its_reason(inputs, target, reason):
    (inputs / "loop.html").symlink_to("loop.html")
    check(inputs, ["guide", "--html", target], reason, code=1)


def test_a_named_pipe_nobody_reads_is_one_line_not_a_hang(inputs, monkeypatch):
    monkeypatch.setattr(outputs, "READER_WAIT_S", 0.3)
    os.mkfifo(inputs / "page.fifo")
    started = time.monotonic()
    with pytest.raises(OutputError, match="a named pipe no process reads: start its reader first"):
        atomic_write(inputs / "page.fifo", lambda handle: handle.write("x"))
    check(inputs, ["guide", "--html", "page.fifo"], "page.fifo (a named pipe no process reads", code=1)
    assert time.monotonic() - started < 30


def test_a_result_file_whose_name_is_not_utf8_is_on_the_page(inputs):
    name = os.fsencode(inputs / "results") + b"/r\xe9sultat.json"
    with open(name, "wb") as handle:
        handle.write(H100_SCAN.read_bytes())
    result = CliRunner().invoke(main, ["report", "results", "--html", "page.html"])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert "r\ufffdsultat.json" in (inputs / "page.html").read_text(encoding="utf-8")


def test_a_symbolic_link_loop_among_results_is_skipped_with_its_reason(inputs):
    (inputs / "results" / "a.json").symlink_to("b.json")
    (inputs / "results" / "b.json").symlink_to("a.json")
    for argv in (["report"], ["guide"], ["report", "--scans"]):
        result = CliRunner().invoke(main, [*argv, "results"])
        assert result.exit_code == 0 and "Traceback" not in result.output, result.output
        skipped = [line for line in result.stderr.splitlines() if line.startswith("warning: skipped")]
        assert len(skipped) == 2 and all("Too many levels of symbolic links" in line for line in skipped), skipped
    check(
        inputs, ["report", "results/a.json"], "results/a.json: cannot read (Too many levels of symbolic links)", code=1
    )
    check(inputs, ["predict", "-m", "resnet50", "--compare", "results/a.json"], "a symbolic link that cannot be")


@pytest.mark.parametrize(
    "shell, stderr",
    [(">&-", ["Error: cannot write the output (standard output is closed): give memprobe a standard output "
              "(`> out.txt`, or `> /dev/null` to drop it)"]), ("2>&- <&-", None)],
    ids=["stdout-closed", "stderr-and-stdin-closed"],
)  # fmt: skip
def test_a_closed_stream_is_one_line_not_a_traceback(shell, stderr):
    done = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -m memprobe list {shell}'],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
    )
    if stderr is None:  # nothing to say an error on: the list is printed as ever
        assert done.returncode == 0 and "bert-large" in done.stdout
    else:
        assert done.returncode == 1 and done.stderr.splitlines() == stderr
