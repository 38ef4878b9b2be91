"""A record's field types as the check of its JSON (rule_of) and the reading of its nested records (read_value).

No torch. The types are those core/records/fieldtypes.py gives the records: int, float, bool, str, lists, mappings, records
(dataclasses) and shapes (TypedDicts), optional with `| None`, marked with Range, Words, Label, Date or LabelKeys.
`rule_of(T)` is the field_rules rule a value of type T must pass, so a result file is checked against the records
themselves, never against a second table of its fields; a type it cannot check raises TypeError (a record
declared a field it has no rule for: a bug, found by the first test that reads a file).
"""

from __future__ import annotations

import dataclasses
import functools
import types
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints, is_typeddict

from memprobe.core.records.field_rules import BOOL, LABEL, TEXT, Bounded, List, Map, OneOf, Rule
from memprobe.core.records.field_rules import Date as DateRule
from memprobe.core.records.fieldtypes import Date, Label, LabelKeys, Range, Words


class _Any(Rule):
    """Any value (a field typed Any: kept as read, never checked)."""

    def problem(self, value: Any, where: str) -> str | None:
        return None


def split(tp: Any) -> tuple[Any, list[Any], bool]:
    """(the plain type, its Annotated marks, whether None is allowed) of a field type."""
    marks: list[Any] = []
    null = False
    while True:
        if get_origin(tp) is Annotated:
            tp, *more = get_args(tp)
            marks += more
        elif get_origin(tp) in (Union, types.UnionType):
            args = [a for a in get_args(tp) if a is not type(None)]
            if len(args) != 1:
                raise TypeError(f"a record field is one type or None, not {tp!r}")
            null, tp = null or len(args) < len(get_args(tp)), args[0]
        else:
            return tp, marks, null


_HINTS: dict[type, dict[str, Any]] = {}


def hints_of(cls: type) -> dict[str, Any]:
    """A record's field types by name, Annotated marks kept (read once per record)."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = get_type_hints(cls, include_extras=True)
    return hints


def named_fields(cls: type) -> list[str]:
    """A record's fields as its JSON names them (a dataclass's `extra`, the keys it does not name, left out)."""
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls) if f.name != "extra"]
    return list(hints_of(cls))


def _required(cls: type) -> tuple[str, ...]:
    if dataclasses.is_dataclass(cls):
        missing = dataclasses.MISSING
        return tuple(
            f.name
            for f in dataclasses.fields(cls)
            if f.name != "extra" and f.default is missing and f.default_factory is missing
        )
    return tuple(k for k in hints_of(cls) if k in cls.__required_keys__)  # type: ignore[attr-defined]


def _text(marks: list[Any], null: bool) -> Rule:
    for mark in marks:
        if isinstance(mark, Words):
            return OneOf(mark.words, null)
        if isinstance(mark, Label):
            return LABEL(null)
        if isinstance(mark, Date):
            return DateRule(null)
    return TEXT(null)


def _key(tp: Any) -> Rule | None:
    base, marks, _null = split(tp)
    return _text(marks, False) if marks and base is str else None


@functools.cache
def rule_of(tp: Any) -> Rule:
    """The rule a JSON value of field type `tp` must pass. Raises TypeError for a type with no rule."""
    base, marks, null = split(tp)
    bounds = next((m for m in marks if isinstance(m, Range)), Range(None, None))
    if base is Any:
        return _Any()
    if base is bool:
        return BOOL(null)
    if base in (int, float):
        return Bounded(bounds.low, bounds.high, null, real=base is float, above=bounds.above)
    if base is str:
        return _text(marks, null)
    origin, args = get_origin(base), get_args(base)
    if origin is list:
        return List(None if args[0] is Any else rule_of(args[0]), null)
    keys = LABEL() if any(isinstance(m, LabelKeys) for m in marks) else None
    if origin is dict:
        return Map(values=None if args[1] is Any else rule_of(args[1]), keys=keys or _key(args[0]), null=null)
    if dataclasses.is_dataclass(base) or is_typeddict(base):
        hints = hints_of(base)
        fields = {name: rule_of(hints[name]) for name in named_fields(base)}
        return Map(fields, null, _required(base), keys=keys)
    raise TypeError(f"no rule for a field of type {tp!r}")


def read_value(tp: Any, value: Any) -> Any:
    """A JSON value as a field of type `tp` holds it: a mapping read by its record's from_dict, lists and mappings of
    records item by item; anything else as it is."""
    if value is None:
        return None
    base, _marks, _null = split(tp)
    origin, args = get_origin(base), get_args(base)
    if origin is list and isinstance(value, list) and args and args[0] is not Any:
        return [read_value(args[0], v) for v in value]
    if origin is dict and isinstance(value, dict) and args and args[1] is not Any:
        return {k: read_value(args[1], v) for k, v in value.items()}
    if isinstance(value, dict) and isinstance(base, type) and hasattr(base, "from_dict"):
        return base.from_dict(value)
    return value


def plain(value: Any) -> Any:
    """A field's value as JSON holds it: a record by its to_dict, lists and mappings item by item."""
    if hasattr(value, "to_dict") and not isinstance(value, type):
        return value.to_dict()
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value
