"""How a request's values are read and refused: RequestError, and the readers the options and the jobs share.

No torch here.
"""

from __future__ import annotations

from typing import Any, Sequence

from memprobe.core.cards.catalog import PRECISIONS
from memprobe.core.workload.option_bounds import SCAN_GPUS, Bound
from memprobe.core.workload.variants import VariantError, parse_lora


class RequestError(ValueError):
    """An option, or a combination of options, that the command cannot take. `option` names the option as the
    command line spells it (`--precision`), or is None for a combination; the message is one line. `usage` False:
    not a misused option but a name that names nothing (a card), which the CLI exits 1 for, as for a model."""

    def __init__(self, message: str, option: str | None = None, usage: bool = True) -> None:
        self.message, self.option, self.usage = message, option, usage
        super().__init__(message if option is None or message.startswith(option) else f"{option}: {message}")


def within(bound: Bound, value: Any) -> Any:
    """`value` when it is within the option's bounds (core/workload/option_bounds.py: the table the CLI's types read too), or
    None for an option that may be left out. Raises RequestError naming the option, in the words the command prints."""
    problem = bound.problem(value)
    if problem:
        raise RequestError(problem, bound.option)
    return value


def whole_number(text: str) -> int:
    """One item of a list of whole numbers (--batch, --curve) as typed. Raises ValueError for anything else."""
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected comma-separated integers, got '{text}'") from None


def precision_list(items: Sequence[str]) -> list[str]:
    """The precisions asked for, checked against catalog.PRECISIONS. Raises RequestError for none or an unknown one."""
    chosen = list(items)
    if not chosen:
        raise RequestError("give at least one precision (e.g. fp16,bf16)", "--precision")
    unknown = [p for p in chosen if p not in PRECISIONS]
    if unknown:
        raise RequestError(f"unknown precision(s) {', '.join(unknown)} (known: {', '.join(PRECISIONS)})", "--precision")
    return chosen


def strategy_list(items: Sequence[str]) -> list[str]:
    """The data-parallel strategies asked for, each once. Raises RequestError for none or an unknown one."""
    from memprobe.probe.multi import parse_strategies

    try:
        return parse_strategies(list(items))
    except ValueError as exc:
        raise RequestError(str(exc), "--strategy") from None


def world_size(item: str | int) -> str:
    """One item of scan's --gpus: a number of GPUs (1 or more) or 'all', as typed. Raises RequestError otherwise."""
    text = str(item).strip()
    if text == "all":
        return text
    try:
        value = int(text)
    except ValueError:
        raise RequestError(f"expected numbers of GPUs or 'all', got '{item}'", "--gpus") from None
    within(SCAN_GPUS, value)
    return text


def world_sizes(items: Sequence[str | int]) -> list[str]:
    """scan's --gpus: each item a world size (world_size). Raises RequestError for a bad one."""
    return [world_size(i) for i in items]


def positive_size(text: str | int, option: str) -> int:
    """Bytes of a size option (`24GiB`, or a number of bytes). Raises RequestError for garbage or a size not above 0."""
    from memprobe.core.text.units import parse_size

    try:
        nbytes = text if isinstance(text, int) else parse_size(text)
    except ValueError as exc:
        raise RequestError(str(exc), option) from None
    if nbytes <= 0:
        raise RequestError(f"{option} must be larger than 0, got '{text}'", option)
    return nbytes


def lora_rank(lora: str | int | None) -> int | None:
    """The LoRA rank of --lora (16 or r=16; the API's int as it is), None for no LoRA: one reading for scan,
    predict, plan and their API calls. Raises RequestError (a combination's: the message names --lora) otherwise."""
    try:
        return parse_lora(None if lora is None else str(lora))
    except VariantError as exc:
        raise RequestError(str(exc)) from None


def strategies_option() -> Any:
    """--strategy, as scan and predict declare it (request/option.py): comma-separated strategies, checked."""
    from memprobe.request.option import option

    return option(
        ("ddp",),
        "--strategy",
        listed=True,
        check=strategy_list,
        help="With --gpus N > 1, comma-separated: ddp (DistributedDataParallel), fsdp (FSDP2 fully_shard per block).",
    )
