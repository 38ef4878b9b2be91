"""core.inputs.read_text: a file a user names is read only when it is a regular file of a sane size."""

from __future__ import annotations

import os

import pytest

from memprobe.core.files.inputs import read_text


def test_a_regular_file_is_read(tmp_path):
    (tmp_path / "a.json").write_text('{"é": 1}', encoding="utf-8")
    assert read_text(tmp_path / "a.json") == '{"é": 1}'


def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)  # no writer: reading it would block for ever
    with pytest.raises(OSError) as err:
        read_text(fifo)
    assert err.value.strerror == "not a regular file: a pipe or a device"


def test_a_device_that_never_ends_is_refused():
    with pytest.raises(OSError, match="not a regular file"):
        read_text("/dev/zero")


def test_a_folder_and_a_missing_file_say_so(tmp_path):
    with pytest.raises(OSError) as err:
        read_text(tmp_path)
    assert err.value.strerror == "Is a directory"
    with pytest.raises(FileNotFoundError):
        read_text(tmp_path / "gone.json")


def test_a_file_over_the_limit_is_refused(tmp_path):
    (tmp_path / "big.json").write_bytes(b" " * 2048)
    assert read_text(tmp_path / "big.json", limit=2048) == " " * 2048
    with pytest.raises(OSError, match="larger than"):
        read_text(tmp_path / "big.json", limit=2047)


def test_text_that_is_not_utf8_is_a_decode_error(tmp_path):
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UnicodeDecodeError):
        read_text(tmp_path / "bin.json")
