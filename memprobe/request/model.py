"""The models a command names and the options that shape them (ModelRequest), and the workloads they resolve to.

No torch here: a model given by name is resolved (its module found, its config read), not built.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar, Union

from memprobe.core.records.fieldtypes import MODES  # noqa: F401 - re-exported: the modes scan and predict take
from memprobe.core.text.textlists import comma_items
from memprobe.core.workload import option_bounds as bounds
from memprobe.core.workload.registry import OPTIMIZERS, Workload, load_registry
from memprobe.core.workload.variants import VariantError, VariantRequest, apply_variant
from memprobe.request.checks import RequestError, lora_rank
from memprobe.request.option import REQUIRED, check_bounds, option, take
from memprobe.request.serving import new_tokens_option, prefill_chunk_option, prompt_len_option
from memprobe.workloads.custom import HF_TASKS

Model = Union[str, Callable[..., Any]]  # a name as `--model` takes it, or a build function (the API)
SEARCHES = ("batch", "seq-len", "frontier")
R = TypeVar("R")


@dataclass(frozen=True)
class ModelRequest:
    """The models a command names and the options that shape them: registry names (wildcards, `all`), names outside
    the registry (timm:, hf:, hf-config:, FILE.py:FUNC) or build functions; then the LLM variant settings."""

    models: Sequence[Model] = option(
        REQUIRED,
        "--model",
        "-m",
        listed=True,
        help="Workload name(s), comma-separated; wildcards and 'all' work. Also timm:NAME, hf:NAME, "
        "hf-config:PATH, FILE.py:FUNCTION or package.module:FUNCTION (README: your own model).",
    )
    models_file: str | Path | None = option(
        None, "--models", path="file", help="Registry file (default: the packaged models.yaml)."
    )
    input_size: str | Sequence[int] | None = option(
        None, "--input-size", help="timm: models: input C,H,W (default: the model's pretrained_cfg size)."
    )
    optimizer: str | None = option(
        None,
        "--optimizer",
        choices=OPTIMIZERS,
        help="Models given by name: the optimizer (default: sgd momentum for timm:, adamw otherwise).",
    )
    task: str | None = option(None, "--task", choices=HF_TASKS, help="hf: models: the task head (default: causal-lm).")
    seq_len: int | None = option(
        None,
        bound=bounds.SEQ_LEN,
        help="hf: models: the sequence length (default: the config's maximum, at most 1024); LLM registry workloads "
        "(llama-*): the sequence length of the batch search.",
    )
    search: str = option(
        "batch",
        "--search",
        choices=SEARCHES,
        help="What to find the largest of: the batch, or (LLM workloads) the sequence length at --batch, or (LLM and "
        "hf: workloads) the frontier: the max batch at lengths 512, 1024, ... and the max length at batch 1, 2, 4, "
        "..., each point proven like B.",
    )
    frontier_budget: float | None = option(
        None,
        bound=bounds.FRONTIER_BUDGET,
        metavar="SECONDS",
        help="With --search frontier: seconds the frontier may take per precision; points not reached are recorded "
        "as skipped (default: no limit).",
    )
    checkpointing: bool = option(
        False, "--checkpointing", help="LLM workloads: activation checkpointing per decoder layer."
    )
    lora: str | int | None = option(
        None, "--lora", help="LLM workloads: LoRA adapters of this rank (16 or r=16) on a frozen bf16 base (peft)."
    )
    # --mode generate: P, N and the prefill chunk (core/records/generation.py checks them together)
    prompt_len: int | None = prompt_len_option()
    new_tokens: int | None = new_tokens_option()
    prefill_chunk: int | None = prefill_chunk_option()

    @property
    def lora_rank(self) -> int | None:
        """The LoRA rank asked for (None: no LoRA). Raises RequestError for a bad one."""
        return lora_rank(self.lora)


def modelled(request: type[R], values: dict[str, Any], **given: Any) -> R:
    """A request whose first field is its ModelRequest (ScanRequest, PredictRequest), from `values` keyed by the
    declared names of both (a command's parsed options, the API's keyword arguments) and `given`: the values used
    are taken out of `values`, so what is left is neither's."""
    model = ModelRequest(**take(ModelRequest, values))
    return request(model, **take(request, values), **given)  # type: ignore[call-arg]


def workloads_of(
    request: ModelRequest, precisions: Sequence[str], variants: bool = True, batch: int = 1
) -> list[Workload]:
    """The workloads `request` names, each once and in order, made the variants its settings ask (unless not
    `variants`: a frontier walks lengths itself; `batch`: the batch a --search seq-len runs at). --seq-len shapes a
    model given by name as it is resolved, and is a variant setting of a registry LLM. Raises RegistryError
    (CustomModelError) for a model that cannot be named or resolved, RequestError for an option the models cannot
    take."""
    from memprobe.workloads.custom import CustomOptions, is_custom_name, parse_input_size, resolve, target_of

    check_bounds(request)  # as click refuses them, before any other check
    size = request.input_size
    if size is not None:  # the API's sequence read as the command's text, so its bounds and errors are the same
        try:
            size = parse_input_size(size if isinstance(size, str) else ",".join(str(v) for v in size))
        except ValueError as exc:
            raise RequestError(str(exc), "--input-size") from None
    shape = CustomOptions(tuple(size) if size else None, request.optimizer, request.task)  # type: ignore[arg-type]
    registry: dict[str, Workload] | None = None
    chosen: list[Workload] = []
    items = [i for m in request.models for i in ([m] if callable(m) else comma_items(str(m)))]
    for item in items or [""]:  # no item: select_models says so in one line
        named = callable(item) or is_custom_name(str(item))
        options = replace(shape, seq_len=request.seq_len) if named else shape
        if callable(item):
            found = [resolve(target_of(item), options)]
        else:
            from memprobe.workloads.custom import select_models

            registry = registry if registry is not None else load_registry(request.models_file)
            found = select_models(registry, str(item), options)
        chosen += [w for w in found if w.name not in {c.name for c in chosen}]
    return _variants(chosen, request, precisions, batch) if variants else chosen


def _variants(
    workloads: list[Workload], request: ModelRequest, precisions: Sequence[str], batch: int
) -> list[Workload]:
    """The workloads as the variant settings ask. Raises RequestError for a variant they cannot have."""
    from memprobe.workloads.custom import CUSTOM_FAMILIES

    rank = request.lora_rank
    try:
        asked = VariantRequest(request.search, batch, request.seq_len, request.checkpointing, rank)
        # a model given by name took --seq-len when it was resolved: not a variant setting
        named = replace(asked, seq_len=None)
        chosen = tuple(precisions)
        return [apply_variant(w, named if w.family in CUSTOM_FAMILIES else asked, chosen) for w in workloads]
    except VariantError as exc:
        raise RequestError(str(exc)) from None


def generating(
    workloads: list[Workload], request: ModelRequest, mode: str, frontier: bool, batch: int = 1
) -> list[Workload]:
    """The workloads as `mode` runs them (core/generation.generation_workloads). Raises RequestError."""
    from memprobe.core.records.generation import GenerationError, generation_workloads

    try:
        return generation_workloads(workloads, request, mode, frontier, batch)
    except GenerationError as exc:
        raise RequestError(exc.message, exc.option) from None


def is_frontier(model: ModelRequest, batches: bool) -> bool:
    """Whether this is a frontier run; refuses what a frontier does not take (it walks lengths and batches itself:
    `batches`, the command's --batch given) and a frontier budget without one."""
    if model.search not in SEARCHES:
        raise RequestError(f"must be one of {', '.join(SEARCHES)}, got '{model.search}'", "--search")
    if model.search != "frontier":
        if model.frontier_budget is not None:
            raise RequestError("--frontier-budget has no effect without --search frontier")
        return False
    if model.seq_len is not None:
        raise RequestError("--search frontier walks the sequence lengths itself: drop --seq-len")
    if batches:
        raise RequestError("--search frontier walks the batches itself: drop --batch")
    return True
