"""Output paths (issue 37, item 3): a symlink is followed, a named pipe or /dev/stdout is written to (not replaced),
a full disk or a closed pipe is one `Error:` line, and nothing half-written is left."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from memprobe.core.files.outputs import OutputError, atomic_write, check_output_file, output_target

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _write_text(path, text: str = "new\n"):
    return atomic_write(path, lambda handle: handle.write(text))


def test_a_symlink_is_followed_and_stays_a_link(tmp_path):
    (tmp_path / "real.json").write_text("old\n")
    (tmp_path / "link.json").symlink_to("real.json")
    _write_text(tmp_path / "link.json")
    assert (tmp_path / "link.json").is_symlink() and (tmp_path / "real.json").read_text() == "new\n"
    (tmp_path / "dangling.json").symlink_to("made.json")  # a link to a file not there yet: the file is made
    _write_text(tmp_path / "dangling.json")
    assert (tmp_path / "dangling.json").is_symlink() and (tmp_path / "made.json").read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling.json", "link.json", "made.json", "real.json"]


@contextmanager
def _read_fifo(fifo: Path) -> Iterator[list[str]]:
    """Make the named pipe `fifo` and read it in a thread while the block runs; yields the list its text goes into
    (once the writer closes it, and the block is over)."""
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    try:
        yield got
    finally:
        reader.join(timeout=10)


def test_a_named_pipe_is_written_to_not_replaced(tmp_path):
    fifo = tmp_path / "out.fifo"
    with _read_fifo(fifo) as got:
        _write_text(fifo, "through the pipe\n")
    assert got == ["through the pipe\n"] and fifo.is_fifo()
    assert output_target(fifo) == (fifo, False)


@pytest.mark.parametrize("into", ["file", "pipe"])
def test_dev_stdout_is_written_to_after_what_was_printed(tmp_path, into):
    code = (
        "from memprobe.core.files.outputs import atomic_write\n"
        "print('table', flush=False)\n"
        "atomic_write('/dev/stdout', lambda h: h.write('breakdown\\n'))\n"
        "print('after')\n"
    )
    out = tmp_path / "out.txt"
    if into == "file":
        with open(out, "w") as handle:
            subprocess.run([sys.executable, "-c", code], stdout=handle, env=ENV, check=True, timeout=60)
        text = out.read_text()
    else:
        text = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=60).stdout
    assert text == "table\nbreakdown\nafter\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == (["out.txt"] if into == "file" else [])


def test_a_full_disk_is_one_error_naming_the_file_and_leaves_nothing_behind(tmp_path):
    with pytest.raises(OutputError, match=r"^cannot write /dev/full \(No space left on device\)$"):
        _write_text("/dev/full")
    (tmp_path / "kept.json").write_text("the old file\n")

    def full(handle):
        handle.write("half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OutputError, match="cannot write .*kept.json \\(No space left on device\\)"):
        atomic_write(tmp_path / "kept.json", full)
    assert [p.name for p in tmp_path.iterdir()] == ["kept.json"]  # no temporary file left
    assert (tmp_path / "kept.json").read_text() == "the old file\n"


def test_a_folder_or_a_folder_that_cannot_be_made_is_refused_before_work(tmp_path):
    with pytest.raises(OutputError, match="is a folder, not a file"):
        check_output_file(tmp_path)
    with pytest.raises(OutputError, match="cannot make the folder /proc/memprobe-x"):
        check_output_file("/proc/memprobe-x/b.json")
    assert check_output_file("/dev/stdout") == Path("/dev/stdout")
    assert check_output_file(tmp_path / "new" / "b.json") == (tmp_path / "new" / "b.json").resolve()


def _memprobe(*args: str, stdout=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "memprobe", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        timeout=120,
    )


@pytest.mark.parametrize("argv", [["list"], ["report", str(REPO / "reports" / "h100")], ["guide"]], ids=" ".join)
def test_printing_to_a_full_disk_is_one_error_line(argv):
    with open("/dev/full", "w") as full:
        done = _memprobe(*argv, stdout=full)
    assert done.returncode == 1
    assert done.stderr.splitlines() == ["Error: cannot write the output (No space left on device)"]


def test_printing_into_a_closed_pipe_is_one_error_line():
    read, write = os.pipe()
    os.close(read)  # the reader has gone, as `memprobe list | true` leaves it
    try:
        done = _memprobe("list", stdout=write)
    finally:
        os.close(write)
    assert done.returncode == 1 and done.stderr.splitlines() == ["Error: cannot write the output (Broken pipe)"]


def test_predict_breakdown_out_writes_into_a_named_pipe(tmp_path):
    fifo = tmp_path / "breakdowns.fifo"
    argv = ["predict", "--model", "toy", "-p", "fp32", "--memory", "4GiB", "--breakdown", "--breakdown-out", str(fifo)]
    with _read_fifo(fifo) as got:
        done = _memprobe(*argv, stdout=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert fifo.is_fifo() and got and '"schema": "memprobe.breakdown"' in got[0]
