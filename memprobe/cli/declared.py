"""The click options of a request's declared fields (request/option.py): one click option per field, named as it.

The request's field is the declaration (spelling, help, bounds, choices, default); this module only says it in
click's words, so a command's parsed parameters are the request's keyword arguments as they are.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, TypeVar

import click

from memprobe.cli import checks
from memprobe.cli.options import CommaList, bounded
from memprobe.request.option import REQUIRED, Declared, Option, declared, typed_value

F = TypeVar("F", bound=Callable[..., Any])

_PATHS = {  # Option.path -> the click.Path it is
    "dir": checks.Path(file_okay=False),
    "file": checks.Path(dir_okay=False),
    "exists": checks.Path(exists=True),
}


def request_options(request: type, only: Iterable[str] | None = None, skip: Iterable[str] = ()) -> Callable[[F], F]:
    """The click options of `request`'s declared fields, in field order (`only` those, or all but `skip`), as one
    decorator: the options show in --help in that order."""
    chosen = set(only) if only is not None else None
    made = [_click_option(d) for d in declared(request) if (chosen is None or d.name in chosen) and d.name not in skip]

    def apply(command: F) -> F:
        for decorate in reversed(made):
            command = decorate(command)
        return command

    return apply


def _click_option(d: Declared) -> Callable[[F], F]:
    """The click option of one declared field (its parameter named as the field)."""
    opt = d.option
    attrs: dict[str, Any] = {"help": opt.help}
    if opt.pair:
        attrs["default"] = d.default
    elif isinstance(d.default, bool):
        attrs.update(is_flag=True, flag_value=not d.default, default=d.default)
    else:
        attrs.update(_value_attrs(d))
    if opt.metavar:
        attrs["metavar"] = opt.metavar
    return click.option(*opt.flags, d.name, **attrs)


def _value_attrs(d: Declared) -> dict[str, Any]:
    """What click needs to read an option's value: its type, its default as typed (shown in --help where it is a
    value, as the declaration says), required or repeatable."""
    opt = d.option
    attrs: dict[str, Any] = {"type": _type(opt)}
    if d.default is REQUIRED:
        attrs["required"] = True
    elif opt.multiple:
        attrs.update(multiple=True, default=d.default)
    elif d.default is not None:
        typed = typed_value(opt, d.default)
        attrs["default"] = typed if opt.listed and typed else d.default  # a list as typed, so --help shows it so
        shown = opt.shown if opt.shown is not None else typed not in opt.words and d.default != ()
        if shown:
            attrs["show_default"] = shown  # True: the default as click shows it (a list as typed)
    if opt.flag_value is not None:
        attrs.update(is_flag=False, flag_value=opt.flag_value)
    return attrs


def _type(opt: Option) -> click.ParamType | None:
    """The click type of an option that takes a value (None: text)."""
    if opt.listed:
        item = opt.item
        if opt.bound is not None:
            item = _bounded_item(item, opt)
        return CommaList(item=item, check=opt.check, words=opt.words)
    if opt.bound is not None:
        return bounded(opt.bound)
    if opt.choices:
        return click.Choice(list(opt.choices))
    if opt.path:
        return _PATHS[opt.path]
    return None


def _bounded_item(item: Callable[[str], Any] | None, opt: Option) -> Callable[[str], Any]:
    """What reads one item of a list option and refuses it out of the option's bounds (ValueError, one line)."""
    bound = opt.bound
    assert bound is not None

    def read(text: str) -> Any:
        value = item(text) if item is not None else text
        problem = bound.problem(value)
        if problem:
            raise ValueError(problem)
        return value

    return read
