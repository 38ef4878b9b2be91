"""Tables and notes that fit a terminal: 120 columns by default, a table split by columns (its longest cells moved
under it when even a part is too wide) and a note wrapped; `--wide` lifts the limit and the machine formats (csv, json)
never have one. No torch.

A command sets the limit for what it prints (`limit(WIDTH)`, or none under --wide); every renderer (compare/report.py's
render, compare/tables.py's rows_text, predict's and plan's tables) asks `width()`. A table too wide is printed as
several tables, each repeating its first `keep` columns (what names a row); where a part is still too wide, its longest
cells are written in full under it, each as a numbered note ("[1] ...") that the cell names: nothing is cut.
"""

from __future__ import annotations

import textwrap
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator, Sequence

import tabulate as tabulate_module
from tabulate import tabulate

WIDTH = 120  # columns: what a laptop terminal shows beside nothing else, and what a code review page shows
# No limit unless a command sets one (cli/width.py: every command that prints a table, WIDTH unless --wide): text
# made through the Python API stays whole.
_LIMIT: ContextVar[int | None] = ContextVar("memprobe_width", default=None)
MOVED = "[{n}]"  # what a cell too long for the width shows; its text is under the table, after the same mark


def width() -> int | None:
    """The most columns a line of a table or note may take now (None: no limit)."""
    return _LIMIT.get()


@contextmanager
def limit(columns: int | None) -> Iterator[None]:
    """Within it, tables and notes fit `columns` (None: no limit, as under --wide)."""
    token = _LIMIT.set(columns)
    try:
        yield
    finally:
        _LIMIT.reset(token)


def widest(text: str) -> int:
    """The longest line of `text`."""
    return max((len(line) for line in text.splitlines()), default=0)


def wrap(text: str, first: str = "- ", rest: str = "  ", columns: int | None = None) -> str:
    """`text` as lines of at most `columns` (default: width()), the first starting with `first` and the others with
    `rest` (a markdown list item's continuation); unwrapped, just `first` + text, without a limit. Words longer than a
    line (a long path) are broken."""
    columns = width() if columns is None else columns
    if columns is None or len(first) + len(text) <= columns:
        return first + text
    return textwrap.fill(
        text, columns, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False, break_long_words=True
    )


def notes_text(notes: Sequence[str], first: str = "- ", rest: str = "  ") -> str:
    """Notes as wrapped list items, one per note (a note's own line breaks kept)."""
    return "\n".join(wrap(line, first, rest) for note in notes for line in (note.splitlines() or [""]))


def _render(headers: Sequence[str], rows: Sequence[Sequence[str]], fmt: str, compact: bool = True) -> str:
    # tabulate widens every column to its header + 2 (room for alignment colons memprobe never asks for): a table
    # that does not fit loses that room first (a table of ten columns gains 20) before it is split.
    before = tabulate_module.MIN_PADDING
    tabulate_module.MIN_PADDING = 0 if compact else before
    try:
        return tabulate([list(r) for r in rows], headers=list(headers), tablefmt=fmt, disable_numparse=True)
    finally:
        tabulate_module.MIN_PADDING = before


def _pick(items: Sequence[Any], indexes: Sequence[int]) -> list[Any]:
    return [items[i] for i in indexes]


def _moved(cell: str, most: int, moved: dict[int, str]) -> str:
    """A cell as a part shows it: itself when at most `most` long and not moved before, else the mark of its note
    (a new note in `moved` for a text not seen before)."""
    for n, text in moved.items():
        if text == cell:
            return MOVED.format(n=n)
    if len(cell) <= most:
        return cell
    moved[len(moved) + 1] = cell
    return MOVED.format(n=len(moved))


def _fitted(headers: list[str], rows: list[list[str]], fmt: str, columns: int) -> tuple[str, list[str]]:
    """The table with its longest cells moved under it, until it fits `columns` (or no cell is long enough to move):
    each moved text becomes a mark ("[1]", the same for the same text) and a note "[1] text". Returns the table and
    the notes."""
    text, moved = _render(headers, rows, fmt), dict[int, str]()
    while widest(text) > columns:
        sizes = [max([len(headers[i])] + [len(r[i]) for r in rows]) for i in range(len(headers))]
        col = max(range(len(sizes)), key=lambda i: sizes[i])
        most = max(sizes[col] - (widest(text) - columns), len(MOVED.format(n=len(moved) + 1)) + 1)
        if most >= sizes[col]:
            break
        headers = [_moved(h, most, moved) if i == col else h for i, h in enumerate(headers)]
        rows = [[_moved(c, most, moved) if i == col else c for i, c in enumerate(r)] for r in rows]
        text = _render(headers, rows, fmt)
    notes = [
        wrap(cell, MOVED.format(n=n) + " ", " " * (len(MOVED.format(n=n)) + 1), columns) for n, cell in moved.items()
    ]
    return text, notes


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str = "github", keep: int = 1) -> str:
    """A tabulate table (github, plain, ...) that fits width(): as tabulate makes it where it fits; else without the
    room tabulate leaves beside each header; else split by columns into tables that each repeat the first `keep`
    columns, and where one part is still too wide its longest cells written in full under it (_fitted)."""
    headers = [str(h) for h in headers]
    text_rows = [[str(c) for c in r] for r in rows]
    whole = _render(headers, text_rows, fmt, compact=False)
    columns = width()
    if columns is None or widest(whole) <= columns or not headers:
        return whole
    compact = _render(headers, text_rows, fmt)
    if widest(compact) <= columns:
        return compact
    keep = max(0, min(keep, len(headers) - 1))
    key = list(range(keep))
    parts: list[list[int]] = []
    current: list[int] = []
    for i in range(keep, len(headers)):
        trial = key + current + [i]
        if current and widest(_render(_pick(headers, trial), [_pick(r, trial) for r in text_rows], fmt)) > columns:
            parts.append(current)
            current = []
        current.append(i)
    parts.append(current)
    shown = []
    for part in parts:
        chosen = key + part
        text, moved = _fitted(_pick(headers, chosen), [_pick(r, chosen) for r in text_rows], fmt, columns)
        shown.append("\n\n".join([text, "\n".join(moved)]) if moved else text)
    return "\n\n".join(shown)


def _compacted(lines: list[str]) -> list[str]:
    """A github table already rendered, each column only as wide as its widest text (tabulate leaves room beside a
    header), a right-aligned cell kept right-aligned. Unchanged where its lines do not line up at the separator's '|'."""
    bars = [i for i, ch in enumerate(lines[1]) if ch == "|"]
    if len(bars) < 2 or any(len(line) != len(lines[1]) or any(line[i] != "|" for i in bars) for line in lines):
        return lines
    out = [""] * len(lines)
    for a, b in zip(bars, bars[1:]):
        cells = [line[a + 1 : b] for line in lines]
        size = max(len(c.strip()) for n, c in enumerate(cells) if n != 1)
        for n, cell in enumerate(cells):
            text = cell.strip()
            right = n > 1 and cell.startswith("  ") and cell.endswith(text + " ")
            shown = "-" * (size + 2) if n == 1 else " " + (text.rjust(size) if right else text.ljust(size)) + " "
            out[n] += "|" + shown
    return [line + "|" for line in out]


def _rendered_parts(lines: list[str], columns: int, keep: int) -> list[str]:
    """A github table already rendered (`lines`), split by its columns into tables of at most `columns` characters
    that each repeat the first `keep` columns; cut at the '|' of its separator line, so every cell keeps its
    alignment. Unchanged where a line does not have its '|' there (a cell holding '|')."""
    bars = [i for i, ch in enumerate(lines[1]) if ch == "|"]
    if len(bars) < 3 or any(len(line) != len(lines[1]) or any(line[i] != "|" for i in bars) for line in lines):
        return lines
    cells = [[line[a:b] for a, b in zip(bars, bars[1:])] for line in lines]
    count = len(bars) - 1
    key = list(range(min(keep, count - 1)))
    size = [len(cells[0][i]) for i in range(count)]
    parts: list[list[int]] = []
    current: list[int] = []
    for i in range(len(key), count):
        if current and sum(size[j] for j in key + current) + size[i] + 1 > columns:
            parts.append(current)
            current = []
        current.append(i)
    parts.append(current)
    out: list[str] = []
    for n, part in enumerate(parts):
        out += [""] if n else []
        out += ["".join(row[j] for j in key + part) + "|" for row in cells]
    return out


def fit_text(text: str, keep: int = 1) -> str:
    """Text already rendered (predict's answer: lines of prose and github tables) fitted to width(): a table too
    wide compacted (_compacted), then split by its columns (each part repeating the first `keep`), a longer line wrapped (a list item's or an
    indented line's continuation indented like it)."""
    columns = width()
    if columns is None:
        return text
    lines, out = text.split("\n"), []
    i = 0
    while i < len(lines):
        if lines[i].startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            block = lines[i:j]
            if len(block) >= 2 and widest("\n".join(block)) > columns:
                block = _compacted(block)
            too_wide = len(block) >= 2 and widest("\n".join(block)) > columns
            out += _rendered_parts(block, columns, keep) if too_wide else block
            i = j
            continue
        line = lines[i]
        indent = line[: len(line) - len(line.lstrip(" "))]
        first, rest = ("- ", indent + "  ") if line.lstrip().startswith("- ") else (indent, indent)
        body = line[len(indent) + (2 if first == "- " else 0) :]
        out.append(wrap(body, indent + first if first == "- " else first, rest) if len(line) > columns else line)
        i += 1
    return "\n".join(out)
