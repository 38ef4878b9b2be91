"""Read a file a user names, bounded: what is not a regular file, or is larger than any file memprobe reads, is
refused before it is read. A FIFO would block the command for ever and /dev/zero would fill the memory."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

MAX_INPUT_BYTES = 256 * 2**20  # a result file with every curve is a few MB; a registry or config, kilobytes


def read_text(path: str | Path, limit: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of `path`. Raises OSError as open() does, with `strerror` saying why for what is refused: a
    folder ("Is a directory"), anything else that is not a regular file (a FIFO, a device), a file over `limit`
    bytes; UnicodeDecodeError for text that is not UTF-8."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO opens without waiting for a writer
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise OSError(errno.EISDIR, "Is a directory", str(path))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file: a pipe or a device", str(path))
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB, more than memprobe reads", str(path))
    return b"".join(chunks).decode("utf-8")
