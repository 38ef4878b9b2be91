"""Rules for one field of a JSON file: its type, range, allowed words, a date; each says what is wrong in one line.

No torch. core/records/result_check.py builds the result file's checks from these. A rule's `problem(value, where)` is None
for a good value, else one line naming the field (`where`) and the value ("precisions.fp16.max_batch must be an
integer >= 0 or null, got 'lots'"). Text shown in a table cell (a GPU or workload name, a unit) is a `label`: one
printable line without '|' (a table's column separator), so no file can break a table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator, Sequence

SHOWN = 40  # characters of a bad value quoted in a message
MAX_DEPTH = 32  # the deepest nesting a result file needs is under 10; a deeper file is not one memprobe wrote
MAX_LABEL = 100  # characters of a name shown in a table cell


def shown(value: Any) -> str:
    """`value` as a message quotes it: its repr, cut at SHOWN characters."""
    text = repr(value)
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _bound(value: float) -> str:
    """A bound as a message gives it: 1048576, not 1.04858e+06; 1e+12 for a float."""
    return str(value) if isinstance(value, int) else f"{value:g}"


class Rule:
    """A field's rule: `problem(value, where)` is None when the value is good, else one line saying why not."""

    def problem(self, value: Any, where: str) -> str | None:  # pragma: no cover - every rule overrides it
        raise NotImplementedError


@dataclass(frozen=True)
class Simple(Rule):
    """A value that passes `ok`, described as `what`; None allowed when `null`."""

    what: str
    ok: Callable[[Any], bool]
    null: bool = True

    def problem(self, value: Any, where: str) -> str | None:
        if (value is None and self.null) or (value is not None and self.ok(value)):
            return None
        return f"{where} must be {self.what}{' or null' if self.null else ''}, got {shown(value)}"


@dataclass(frozen=True)
class Bounded(Rule):
    """An integer (or, with `real`, a finite number) from `low` up to `high` (None: no bound that side); `above`:
    greater than `low`."""

    low: float | None = 0
    high: float | None = None
    null: bool = True
    real: bool = False
    above: bool = False

    def problem(self, value: Any, where: str) -> str | None:
        if value is None and self.null:
            return None
        kind = "a number" if self.real else "an integer"
        low = "" if self.low is None else f" {'>' if self.above else '>='} {_bound(self.low)}"
        wrong = f"{where} must be {kind}{low}{' or null' if self.null else ''}, got {shown(value)}"
        if not (_is_num(value) if self.real else _is_int(value)):
            return wrong
        if self.low is not None and (value <= self.low if self.above else value < self.low):
            return wrong
        if self.high is not None and value > self.high:
            return f"{where} must be at most {_bound(self.high)}, got {shown(value)}"
        return None


def INT(low: int | None = 0, high: int | None = None, null: bool = True) -> Rule:
    """An integer in [low, high]."""
    return Bounded(low, high, null)


def _is_label(v: Any) -> bool:
    return isinstance(v, str) and 0 < len(v) <= MAX_LABEL and v.isprintable() and "|" not in v and v == v.strip()


def LABEL(null: bool = False) -> Rule:
    """A name shown in a table cell: 1 to MAX_LABEL printable characters on one line, no '|', no outer spaces."""
    return Simple(f"a name of 1 to {MAX_LABEL} printable characters without '|'", _is_label, null)


def TEXT(null: bool = False) -> Rule:
    """Any string (a message, an error with its traceback)."""
    return Simple("a string", lambda v: isinstance(v, str), null)


def BOOL(null: bool = True) -> Rule:
    return Simple("true or false", lambda v: isinstance(v, bool), null)


@dataclass(frozen=True)
class OneOf(Rule):
    """One of a few words."""

    words: Sequence[Any]
    null: bool = True

    def problem(self, value: Any, where: str) -> str | None:
        if (value is None and self.null) or (isinstance(value, (str, int)) and value in self.words):
            return None
        known = ", ".join(str(w) if w != "" else "''" for w in self.words)
        return f"{where} must be one of {known}{' or null' if self.null else ''}, got {shown(value)}"


def parse_date(text: str) -> datetime:
    """An ISO 8601 date and time as an aware datetime (a time without a zone is taken as UTC). ValueError."""
    when = datetime.fromisoformat(text)
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


# No result can be older than this (memprobe needs torch 2.11, of 2026; any date before 2020 is an edited file), nor
# newer than the reading machine's clock, give or take a day of clocks set wrong and time zones.
EARLIEST = datetime(2020, 1, 1, tzinfo=timezone.utc)
CLOCK_SLACK = timedelta(days=1)


@dataclass(frozen=True)
class Date(Rule):
    """An ISO 8601 date and time at which a file can have been written: from EARLIEST to now (CLOCK_SLACK)."""

    null: bool = False
    what: str = "a date and time (ISO 8601, e.g. 2026-11-24T00:42:16+00:00)"

    def problem(self, value: Any, where: str) -> str | None:
        if value is None and self.null:
            return None
        try:
            when = parse_date(value)
        except (TypeError, ValueError):
            return f"{where} must be {self.what}{' or null' if self.null else ''}, got {shown(value)}"
        if when > datetime.now(timezone.utc) + CLOCK_SLACK:
            return f"{where} is {shown(value)}, a date still to come: no file was written then"
        if when < EARLIEST:
            return f"{where} is {shown(value)}, before {EARLIEST.year}: no memprobe file was written then"
        return None


@dataclass(frozen=True)
class Map(Rule):
    """A mapping: the named `fields` each checked when present (`required` ones must be), every value by `values`,
    every key by `keys`."""

    fields: dict[str, Rule] = field(default_factory=dict)
    null: bool = True
    required: tuple[str, ...] = ()
    values: Rule | None = None
    keys: Rule | None = None

    def problem(self, value: Any, where: str) -> str | None:
        if value is None and self.null:
            return None
        if not isinstance(value, dict):
            return f"{where} must be a mapping{' or null' if self.null else ''}, got {shown(value)}"
        inside = f"{where}." if where else ""
        for key in self.required:
            if key not in value:
                return f"{inside}{key} is missing"
        for key, item in value.items():
            found = (self.keys.problem(key, f"a key of {where or 'the file'}") if self.keys else None) or (
                self.values.problem(item, f"{inside}{key}") if self.values else None
            )
            if found:
                return found
        for key, rule in self.fields.items():
            found = rule.problem(value[key], f"{inside}{key}") if key in value else None
            if found:
                return found
        return None


@dataclass(frozen=True)
class List(Rule):
    """A list whose every item passes `item`."""

    item: Rule | None = None
    null: bool = False

    def problem(self, value: Any, where: str) -> str | None:
        if value is None and self.null:
            return None
        if not isinstance(value, list):
            return f"{where} must be a list{' or null' if self.null else ''}, got {shown(value)}"
        for i, one in enumerate(value):
            found = self.item.problem(one, f"{where}[{i}]") if self.item else None
            if found:
                return found
        return None


def _walk(data: Any) -> Iterator[tuple[str, Any, int]]:
    """(dotted path, value, depth) of every value in `data`, without recursion (a file may nest very deeply)."""
    stack: list[tuple[str, Any, int]] = [("", data, 0)]
    while stack:
        where, value, depth = stack.pop()
        yield where, value, depth
        if isinstance(value, dict):
            stack.extend((f"{where}.{k}" if where else str(k), v, depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", v, depth + 1) for i, v in enumerate(value))


def shape_problem(data: Any) -> str | None:
    """What makes a JSON document unsafe to read anywhere in it (checked before its fields): nesting deeper than
    MAX_DEPTH, or a number that is not finite (JSON's NaN and Infinity, which Python reads). None when neither."""
    for where, value, depth in _walk(data):
        if depth > MAX_DEPTH:
            return f"{where[:60] + ('...' if len(where) > 60 else '')} nests deeper than {MAX_DEPTH} levels"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{where} must be a number, got {value}"
    return None
