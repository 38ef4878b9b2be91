"""An output path checked against what the user meant and what the command reads, before any work. No torch.

`report in.json --html in.json` replaced the only result file with the page; `--html newdir/` wrote a file named
`newdir`. So an output file is refused (one OutputError line) when it is one of the command's input files (by any
path or link to it) or an existing memprobe result file, and when its name ends in '/' (a folder, where a file is
asked for). `-` is standard output where a command can write there (`--html -`), and refused by name elsewhere.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Iterable

from memprobe.core.files.outputs import STDOUT, OutputError


def check_output_name(text: str, example: str, stdout_ok: bool = False) -> None:
    """Refuse an output file name that is a folder's, or `-` where standard output cannot be written (`stdout_ok`
    False): `example` is a file name to suggest (page.html). Raises OutputError (its message names `text`)."""
    if text == STDOUT and not stdout_ok:
        raise OutputError("-: standard output carries this command's tables; give a file (./- for a file named '-')")
    if text.endswith(("/", os.sep)) and not os.path.isdir(text):
        raise OutputError(f"{text} ends in '/', so it names a folder; give the file to write, e.g. {text}{example}")


def refuse_clobber(output: str | Path, inputs: Iterable[str | Path]) -> None:
    """Refuse writing `output` where it would destroy something this command or another reads: one of `inputs`
    (the same file, by any path or symbolic link), or an existing memprobe result file. Raises OutputError."""
    if str(output) == STDOUT:
        return
    try:
        found = os.stat(output)
    except OSError:
        return  # not there yet (or unreadable: writing it says why): nothing to lose
    if not stat.S_ISREG(found.st_mode):
        return
    for given in inputs:
        try:
            same = os.path.samestat(found, os.stat(given))
        except OSError:
            continue
        if same:
            also = "" if str(given) == str(output) else f" ({given})"
            raise OutputError(
                f"{output} is a file this command reads{also}: writing it would replace it; give another file"
            )
    if _is_result_file(output):
        raise OutputError(f"{output} is a memprobe result file: writing it would replace the scan; give another file")


def _is_result_file(path: str | Path) -> bool:
    """Whether `path` holds a memprobe scan result (its schema field says so), however else it is broken."""
    from memprobe.core.files.inputs import read_text
    from memprobe.core.records.results import SCHEMA

    try:
        data = json.loads(read_text(path))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("schema") == SCHEMA


def model_files(names: Iterable[object]) -> list[str]:
    """The files a --model names (`FILE.py:FUNC`, `hf-config:PATH`): inputs an output must not replace."""
    found = []
    for name in names:
        if not isinstance(name, str):  # a build function given to the API
            continue
        if name.startswith("hf-config:"):
            found.append(name[len("hf-config:") :])
        elif ".py:" in name:
            found.append(name.rpartition(":")[0])
    return found
