"""An option declared once, as a field of the typed request that holds it: its spelling, help, bounds and choices.

A request's fields (ScanRequest, PredictRequest, PlanRequest, ModelRequest) are its options: `option()` gives a
field its default and an Option (the metadata below). From that one declaration come the command's click options
(cli/declared.py: the click parameter's name is the field's name), the API's keyword arguments (the same names),
the checks of a value against its bounds (`check_bounds`), the ScanOptions fields a scan request passes on as they
are (`settings_of`), and the command line that asks a request again (`command_line`: the no-GPU suggestion).

No click and no torch here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING, dataclass, field
from typing import Any, Callable, Iterable, Mapping

from memprobe.core.workload.option_bounds import Bound

REQUIRED: Any = MISSING  # option(REQUIRED, ...): a field without a default, an option the command requires


@dataclass(frozen=True)
class Option:
    """How a request field is typed on the command line.

    `flags`: the spellings, the long one first ("--precision", "-p"); "--x/--no-x" for an on/off pair whose field
    may be None (not given); "--no-x" alone for a field that is True unless the flag turns it off. A bool field with
    one flag is a flag; any other field takes a value: a number within `bound` (its spelling is the flag when `flags`
    gives none), one of `choices`, a path (`path`: "dir" a folder to write in, "file" a file, "exists" a file or
    folder that exists), or a comma-separated list (`listed`: each item read by `item` (str -> value, raising
    ValueError with the line to show) and within `bound`, then the whole by `check`, which may raise RequestError;
    `words`: values taken whole, as typed, and what they mean: {"auto": ()}). `multiple`: the option may be repeated
    (a tuple). `flag_value`: what the option given without its value means (the value then may be left out).
    `shown`: the default --help shows (False: none; None: the default itself, when it is a value). `setting`: the
    ScanOptions field (and so the recorded setting) a scan request passes the value to as it is."""

    flags: tuple[str, ...]
    help: str
    bound: Bound | None = None
    choices: tuple[str, ...] = ()
    path: str = ""
    listed: bool = False
    item: Callable[[str], Any] | None = None
    check: Callable[[list[Any]], list[Any]] | None = None
    words: Mapping[str, Any] = field(default_factory=dict)
    multiple: bool = False
    flag_value: Any = None
    metavar: str | None = None
    shown: str | bool | None = None
    setting: str | None = None

    @property
    def flag(self) -> str:
        """The option as errors and a written command line spell it: its long spelling ("--breakdown" of a pair)."""
        return self.flags[0].split("/")[0]

    @property
    def pair(self) -> tuple[str, str] | None:
        """An on/off pair's two spellings ("--breakdown", "--no-breakdown"), None for any other option."""
        on, _slash, off = self.flags[0].partition("/")
        return (on, off) if off else None


def option(default: Any, *flags: str, help: str, **how: Any) -> Any:
    """A request field that is an option: its default (REQUIRED: none), its spellings and help, and how it is
    typed (Option's fields). A number's spelling may come from its `bound` alone. Returns the dataclass field."""
    bound = how.get("bound")
    spelled = flags or ((bound.option,) if bound is not None else ())
    if not spelled:
        raise TypeError("an option needs its spelling: give its flags or a bound")
    return field(default=default, metadata={"option": Option(tuple(spelled), help, **how)})


@dataclass(frozen=True)
class Declared:
    """One declared option of a request: the field's name (click's parameter, the API's keyword), its default (or
    REQUIRED) and its Option."""

    name: str
    default: Any
    option: Option


def declared(request: Any) -> list[Declared]:
    """The declared options of a request class (or instance), in field order: the fields that are options."""
    return [
        Declared(f.name, f.default, f.metadata["option"]) for f in dataclasses.fields(request) if "option" in f.metadata
    ]


def option_names(request: Any) -> set[str]:
    """The names of a request's declared options (the keywords a request built from the API's takes)."""
    return {d.name for d in declared(request)}


def take(request: Any, values: dict[str, Any]) -> dict[str, Any]:
    """The values of `request`'s declared options among `values` (keyed by their names), taken out of `values`."""
    return {name: values.pop(name) for name in option_names(request) if name in values}


def check_bounds(request: Any) -> None:
    """Refuse a value out of its option's bounds, each item of a list too, in field order: what the command's click
    types refuse while parsing, refused in the same words for a request built otherwise (the API's). Raises
    RequestError naming the option."""
    from memprobe.request.checks import within

    for d in declared(request):
        if d.option.bound is None:
            continue
        value = getattr(request, d.name)
        for one in value if d.option.listed and value is not None else [value]:
            within(d.option.bound, one)


def settings_of(request: Any) -> dict[str, Any]:
    """The ScanOptions fields a request passes on as they are (each option's `setting`), a list as a list."""
    given = {}
    for d in declared(request):
        if d.option.setting is not None:
            value = getattr(request, d.name)
            given[d.option.setting] = list(value) if isinstance(value, (list, tuple)) else value
    return given


def typed_value(option: Option, value: Any) -> str:
    """A value as it would be typed after its option: a list comma-separated (a word for what it means, where it is
    one), anything else as text."""
    for word, meaning in option.words.items():
        if value == meaning:
            return word
    return ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)


def command_line(request: Any, only: Iterable[str] | None = None, skip: Iterable[str] = ()) -> list[str]:
    """The options that ask `request` again: each declared option whose value is not its default (or is required),
    in field order, as typed (a flag alone; a repeatable option once per value). `only`: those options alone;
    `skip`: all but those."""
    argv: list[str] = []
    for d in declared(request):
        value = getattr(request, d.name)
        if (only is not None and d.name not in only) or d.name in skip:
            continue
        if d.default is not REQUIRED and _same(value, d.default):
            continue
        opt = d.option
        if opt.pair:
            argv.append(opt.pair[0] if value else opt.pair[1])
        elif isinstance(d.default, bool):
            argv.append(opt.flag)  # a flag, given: it is the default's opposite
        elif opt.multiple:
            argv += [part for v in value for part in (opt.flag, str(v))]
        else:
            argv += [opt.flag, typed_value(opt, value)]
    return argv


def _same(value: Any, default: Any) -> bool:
    """A value equal to its default (a list to a tuple too)."""
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return list(value) == list(default)
    return bool(value == default)
