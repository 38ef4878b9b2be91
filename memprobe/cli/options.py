"""Options that several commands declare the same way, declared once; the comma-list parameter type they share, and
the click type of a numeric option made from its bounds (core/option_bounds.py, which the API's requests read too)."""

from __future__ import annotations

from typing import Any, Callable, Sequence, TypeVar

import click

from memprobe.cli import checks
from memprobe.core import option_bounds as bounds
from memprobe.core.fieldtypes import MODES
from memprobe.core.textlists import comma_items
from memprobe.request import RequestError, precision_list, strategy_list, world_size

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
    raise RequestError or ValueError; `keep` are values taken whole, as typed (scan's `--curve auto`). Every error is
    one `Error:` line naming the option and the bad item."""

    name = "text"  # the metavar help shows (TEXT): what is typed is text, as before the type read it into a list

    def __init__(
        self,
        item: Callable[[str], Any] | None = None,
        choices: Sequence[str] | None = None,
        unknown: str = "unknown {items}; choose from {choices}",
        check: Callable[[list[Any]], list[Any]] | None = None,
        keep: Sequence[str] = (),
    ) -> None:
        self.item, self.choices, self.unknown, self.check, self.keep = item, choices, unknown, check, tuple(keep)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):  # already a list (a default given as one, or a value converted before)
            return value
        if value.strip() in self.keep:
            return value.strip()
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
    """A numeric option named, typed and bounded by its Bound (core/option_bounds.py), with `names` (e.g. the
    parameter's name) after the option's and `attrs` for click; a default, when it has one, is shown in --help."""
    if attrs.get("default") is not None:
        attrs.setdefault("show_default", True)
    return click.option(bound.option, *names, type=bounded(bound), help=help, **attrs)


def batch_sizes(bound: bounds.Bound) -> Callable[[str], int]:
    """What reads one batch size of a list option (--batch, --curve) within `bound`; it raises ValueError for
    garbage or a size out of bounds."""

    def batch_size(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"expected comma-separated integers, got '{text}'") from None
        problem = bound.problem(value)
        if problem:
            raise ValueError(problem)
        return value

    return batch_size


PRECISIONS = CommaList(check=precision_list)
STRATEGIES = CommaList(check=strategy_list)
BATCHES = CommaList(item=batch_sizes(bounds.SCAN_BATCH))
CURVE_BATCHES = CommaList(item=batch_sizes(bounds.CURVE_BATCH), keep=("auto",))
WORLD_SIZES = CommaList(item=world_size)


def model_option(help: str) -> Callable[[F], F]:
    """--model / -m: the workloads a command runs, comma-separated (scan, predict, plan; each says what it takes)."""
    return click.option("--model", "-m", "model", required=True, type=CommaList(), help=help)


def precision_option(help: str, default: str | None = "fp32,fp16,bf16") -> Callable[[F], F]:
    """--precision / -p: comma-separated precisions, checked as every command and the API check them."""
    return click.option(
        "--precision", "-p", "precision", default=default, show_default=default is not None, type=PRECISIONS, help=help
    )


def mode_option(help: str) -> Callable[[F], F]:
    """--mode train|infer|generate (scan and predict)."""
    return click.option("--mode", type=click.Choice(list(MODES)), default="train", show_default=True, help=help)


def format_option(choices: Sequence[str], help: str) -> Callable[[F], F]:
    """--format: how a table is printed (report, guide, plan)."""
    return click.option(
        "--format", "fmt", type=click.Choice(list(choices)), default="github", show_default=True, help=help
    )


# --models FILE: scan, predict, plan and list read workloads from another registry file
models_file_option = click.option(
    "--models",
    "models_file",
    type=checks.Path(dir_okay=False),
    help="Registry file (default: the packaged models.yaml).",
)

# --strategy for the commands that take several (scan and predict, with --gpus N > 1)
strategies_option = click.option(
    "--strategy",
    "strategy",
    default="ddp",
    show_default=True,
    type=STRATEGIES,
    help="With --gpus N > 1, comma-separated: ddp (DistributedDataParallel), fsdp (FSDP2 fully_shard per block).",
)


def joined(value: Any) -> str:
    """An option's value as it would be typed again: a list comma-separated, anything else as text."""
    return ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)
