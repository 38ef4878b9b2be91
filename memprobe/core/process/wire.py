"""Typed messages across a process boundary: a dataclass to a JSON mapping and back, every field's type checked.

No torch. A message is a dataclass; `to_wire` gives the mapping json.dumps writes (a field that is a record with
its own `to_dict`, such as a Workload, written by it; another dataclass field, field by field), `from_wire` reads one
back. Reading checks what the annotations say (int, float, str, bool, None, list, dict, records, unions of them)
and refuses anything else with one MessageError naming the message and the field, so a process never reads a
message by key and finds a field missing, or of another type, halfway through its work. Keys the message does not
have are ignored: a newer sender's extra fields do not break an older reader.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from typing import Any, TypeVar, Union

T = TypeVar("T")


class MessageError(ValueError):
    """A message that is not one of the kind expected: not JSON, not a mapping, a field missing that has no default,
    or a field of another type."""


def to_wire(message: Any) -> dict[str, Any]:
    """`message` (a dataclass) as a JSON-ready mapping: every field, records within written as they write
    themselves (`to_dict`) or field by field."""
    return {f.name: _written(getattr(message, f.name)) for f in fields(message)}


def _written(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        write = getattr(value, "to_dict", None)
        return write() if write is not None else to_wire(value)
    if isinstance(value, (list, tuple)):
        return [_written(v) for v in value]
    if isinstance(value, dict):
        return {k: _written(v) for k, v in value.items()}
    return value


def to_json(message: Any) -> str:
    """`message` as one line of JSON (no newline)."""
    return json.dumps(to_wire(message))


def from_json(kind: type[T], text: str | bytes) -> T:
    """The message of type `kind` in `text`. Raises MessageError where `text` is not JSON or not such a message."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise MessageError(f"not a {kind.__name__}: not JSON: {_clip(text)}") from exc
    return from_wire(kind, data)


def from_wire(kind: type[T], data: Any) -> T:
    """The message of type `kind` (a dataclass) from its mapping `data`, every field checked against its annotation.
    Raises MessageError naming the field where one is missing (and has no default) or of another type."""
    if not isinstance(data, dict):
        raise MessageError(f"not a {kind.__name__}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(kind)
    values: dict[str, Any] = {}
    for f in fields(kind):  # type: ignore[arg-type]  # `kind` is a dataclass; typeshed says so only privately
        if not f.init:
            continue
        if f.name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise MessageError(f"not a {kind.__name__}: no {f.name!r}")
            continue
        try:
            values[f.name] = _read(hints[f.name], data[f.name])
        except (MessageError, TypeError, ValueError, KeyError) as exc:
            raise MessageError(f"not a {kind.__name__}: {f.name!r}: {exc}") from exc
    return kind(**values)


def _read(hint: Any, value: Any) -> Any:
    """`value` as the annotation `hint` says, or MessageError saying what it is instead."""
    if hint is Any:
        return value
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return _read_union(typing.get_args(hint), value)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise MessageError(f"expected a list, got {_what(value)}")
        args = typing.get_args(hint)
        inner = args[0] if args else Any
        read = [_read(inner, v) for v in value]
        return read if origin is list else tuple(read)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise MessageError(f"expected a mapping, got {_what(value)}")
        return dict(value)
    if origin is not None:
        return value  # a parametrised type this reader does not check (Callable, Literal): taken as it is
    return _read_plain(hint, value)


def _read_union(options: tuple[Any, ...], value: Any) -> Any:
    if value is None:
        if type(None) in options:
            return None
        raise MessageError("expected a value, got null")
    errors = []
    for option in options:
        if option is type(None):
            continue
        try:
            return _read(option, value)
        except MessageError as exc:
            errors.append(str(exc))
    raise MessageError("; ".join(errors))


def _read_plain(hint: Any, value: Any) -> Any:
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    elif isinstance(hint, type) and is_dataclass(hint):
        if not isinstance(value, dict):
            raise MessageError(f"expected a {hint.__name__} mapping, got {_what(value)}")
        reader = getattr(hint, "from_dict", None)
        return reader(value) if reader is not None else from_wire(hint, value)
    else:
        return value  # a type this reader does not know: taken as it is
    raise MessageError(f"expected {hint.__name__}, got {_what(value)}")


def _what(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {_clip(value)}"


def _clip(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
