"""The click types the commands share: the comma-separated list (CommaList) and a numeric option made from its
bounds (core/workload/option_bounds.py, which the API's requests read too); and the few options of the commands that have no
request (report, guide, list), declared here once. scan, predict and plan take theirs from their requests' declared
fields (cli/declared.py)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence, TypeVar

import click

from memprobe.core.text.textlists import comma_items
from memprobe.core.workload import option_bounds as bounds
from memprobe.request import RequestError, precision_list

F = TypeVar("F", bound=Callable[..., Any])


def request_error(exc: RequestError) -> click.ClickException:
    """The click error for a RequestError: a bad option value names the option (exit 2), a combination of options
    is bad usage (exit 2), a name that names nothing is one line with exit 1 (as an unknown model)."""
    if not exc.usage:
        return click.ClickException(str(exc))
    if exc.option:
        return click.BadParameter(exc.message, param_hint=exc.option)
    return click.UsageError(exc.message)


class CommaList(click.ParamType):
    """A comma-separated option read into a list (core.textlists.comma_items: items stripped, empty ones left out).

    `item` converts each item, raising ValueError with the one line to show; `choices` are the items it may hold
    (`unknown` formats the error: {items} the bad ones, {choices} the known); `check` takes the whole list and may
    raise RequestError or ValueError; `words` are values taken whole, as typed, and what each means (scan's
    `--curve auto`: the default ladder, no sizes). Every error is one `Error:` line naming the option and the bad
    item."""

    name = "text"  # the metavar help shows (TEXT): what is typed is text, as before the type read it into a list

    def __init__(
        self,
        item: Callable[[str], Any] | None = None,
        choices: Sequence[str] | None = None,
        unknown: str = "unknown {items}; choose from {choices}",
        check: Callable[[list[Any]], list[Any]] | None = None,
        words: Mapping[str, Any] | None = None,
    ) -> None:
        self.item, self.choices, self.unknown, self.check = item, choices, unknown, check
        self.words = dict(words or {})

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):  # already a list (a default given as one, or a value converted before)
            return value
        if value.strip() in self.words:
            return self.words[value.strip()]
        hint = _hint(param)
        items = comma_items(value)
        try:
            if self.choices is not None:
                bad = [i for i in items if i not in self.choices]
                if bad:
                    raise ValueError(self.unknown.format(items=", ".join(bad), choices=", ".join(self.choices)))
            if self.item is not None:
                items = [self.item(i) for i in items]
            return self.check(items) if self.check is not None else items
        except RequestError as exc:
            raise click.BadParameter(exc.message, ctx, param, exc.option or hint) from None
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param, hint) from None


def _hint(param: click.Parameter | None) -> str | None:
    """The option as errors name it: its longest spelling (`--precision`, not `-p`)."""
    names = getattr(param, "opts", None) or []
    return max(names, key=len) if names else None


class _Bounded(click.ParamType):
    """What makes click.IntRange / FloatRange check a Bound: the number read as click reads it, then refused in the
    Bound's words (the words the API's RequestError has); the range shown in --help is click's, from the same Bound."""

    bound: bounds.Bound

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = (click.INT if self.bound.kind is int else click.FLOAT).convert(value, param, ctx)
        problem = self.bound.problem(number)
        if problem:
            self.fail(problem, param, ctx)
        return number


class _BoundedInt(_Bounded, click.IntRange):
    pass


class _BoundedFloat(_Bounded, click.FloatRange):
    pass


def bounded(bound: bounds.Bound) -> click.ParamType:
    """The click type of a numeric option, from its Bound: one declaration for the command and the API."""
    made: _BoundedInt | _BoundedFloat
    if bound.kind is int:
        made = _BoundedInt(int(bound.least), None if bound.most is None else int(bound.most), min_open=bound.above)
    else:
        made = _BoundedFloat(bound.least, bound.most, min_open=bound.above)
    made.bound = bound
    return made


def number_option(bound: bounds.Bound, help: str, *names: str, **attrs: Any) -> Callable[[F], F]:
    """A numeric option named, typed and bounded by its Bound (core/workload/option_bounds.py), with `names` (e.g. the
    parameter's name) after the option's and `attrs` for click; a default, when it has one, is shown in --help."""
    if attrs.get("default") is not None:
        attrs.setdefault("show_default", True)
    return click.option(bound.option, *names, type=bounded(bound), help=help, **attrs)


def precision_option(help: str) -> Callable[[F], F]:
    """--precision / -p of a command with no request (report): comma-separated precisions, checked as the requests
    check theirs; none given: all."""
    return click.option("--precision", "-p", "precision", type=CommaList(check=precision_list), help=help)


def format_option(choices: Sequence[str], help: str) -> Callable[[F], F]:
    """--format: how a table is printed (report, guide, plan)."""
    return click.option(
        "--format", "fmt", type=click.Choice(list(choices)), default="github", show_default=True, help=help
    )
