"""What `memprobe plan` and memprobe.plan are asked (PlanRequest, its options declared once), and the one function
that turns it into what runs (plan_job: the workload, the card, the levers asked).

No torch here: the plan's predicted rows trace (planning/predicted.py), imported when the plan is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from memprobe.core.workload import option_bounds as bounds
from memprobe.core.workload.registry import Workload
from memprobe.request.checks import RequestError, lora_rank, precision_list
from memprobe.request.model import Model, ModelRequest, generating, workloads_of
from memprobe.request.option import REQUIRED, check_bounds, option
from memprobe.request.serving import (
    ServingRequest,
    new_tokens_option,
    prefill_chunk_option,
    prompt_len_option,
    serving_mode_option,
)

STRATEGIES = ("ddp", "fsdp")


@dataclass(frozen=True)
class PlanRequest:
    """What `memprobe plan` (and memprobe.plan) is asked, as typed values: each field one of the command's options
    (request/option.py)."""

    models: Sequence[Model] = option(
        REQUIRED,
        "--model",
        "-m",
        listed=True,
        help="One workload: a registry name, or timm:NAME, hf:NAME, hf-config:PATH, FILE.py:FUNCTION.",
    )
    card: str = option(REQUIRED, "--gpu", help='The card to plan for, by name ("H200", "H100 SXM", 4090).')
    global_batch: int | None = option(
        None,
        bound=bounds.GLOBAL_BATCH,
        help="The global batch to reach by accumulation (default: none, one micro-batch per optimizer step).",
    )
    seq_len: int | None = option(None, bound=bounds.SEQ_LEN, help="LLM workloads and hf: models: the sequence length.")
    precisions: Sequence[str] = option(
        ("fp32", "fp16", "bf16"),
        "--precision",
        "-p",
        listed=True,
        check=precision_list,
        help="Comma-separated precisions to plan: fp32, tf32, fp16, bf16.",
    )
    lora: str | int | None = option(
        None, "--lora", help="LLM workloads: also plan LoRA adapters of this rank (16 or r=16), in fp16/bf16."
    )
    optimizers: Sequence[str] = option(
        (),
        "--optimizer",
        listed=True,
        help="Models given by name: comma-separated optimizers to plan (sgd, adam, adamw; default: the model's own).",
    )
    results: Sequence[str | Path] = option(
        (),
        "--results",
        path="exists",
        multiple=True,
        help="Result files or folders to take measured rows from (repeatable). Default: none (memprobe ships no "
        "measurements), so every row is predicted.",
    )
    models_file: str | Path | None = option(
        None, "--models", path="file", help="Registry file (default: the packaged models.yaml)."
    )
    gpus: int = option(
        1,
        bound=bounds.PLAN_GPUS,
        help="Plan for this many cards training data-parallel: the micro-batch is per GPU, measured where --results "
        "holds a `scan --gpus N` of the card under --strategy, else predicted per GPU.",
    )
    strategy: str | None = option(
        None, "--strategy", choices=STRATEGIES, help="With --gpus N > 1: ddp (default) or fsdp."
    )
    mode: str = serving_mode_option()
    prompt_len: int | None = prompt_len_option()
    new_tokens: int | None = new_tokens_option()
    prefill_chunk: int | None = prefill_chunk_option()


@dataclass
class PlanJob:
    """What a plan request runs: its one workload, the card, and the levers and results asked."""

    request: PlanRequest
    workload: Workload
    precisions: list[str]
    seq_len: int | None  # a registry LLM's length (a model given by name took it when it was resolved)
    lora_rank: int | None

    def plan(self, workers: int, progress: Any = None, on_skip: Callable[[Exception], None] | None = None) -> Any:
        """The plan (memprobe.core.estimates.plan.Plan; with --mode generate memprobe.core.estimates.serving.ServingPlan), tracing the
        predicted rows on `workers` cores: the one call the command and the API make. Raises as
        memprobe.planning.build.build_plan (build_serving) does."""
        from memprobe.planning.build import build_plan

        request = self.request
        if request.mode == "generate":
            from memprobe.planning.serving import build_serving

            return build_serving(
                self.workload, request.card, self.precisions, list(request.results), workers, progress, on_skip
            )
        return build_plan(
            self.workload,
            request.card,
            request.global_batch,
            self.precisions,
            self.seq_len,
            self.lora_rank,
            list(request.optimizers or ()),
            list(request.results),
            workers=workers,
            progress=progress,
            gpus=request.gpus,
            strategy=request.strategy or "ddp",
            on_skip=on_skip,
        )


def plan_job(request: PlanRequest) -> PlanJob:
    """The workload and levers of a plan request, checked in the order the command reads its options: the numbers'
    bounds, the card (before the model is resolved, as predict and guide read --gpu first), --strategy, the model,
    --lora. Raises RequestError (usage=False for a card name that names no card), RegistryError (CustomModelError)
    for a model that cannot be named or resolved."""
    from memprobe.core.cards.cardnames import CardNameError, resolve_cards
    from memprobe.workloads.custom import is_custom_name

    check_bounds(request)
    try:
        if len(resolve_cards(request.card)) > 1:
            raise RequestError(f"--gpu '{request.card}' names several cards; plan one at a time")
    except CardNameError as exc:
        raise RequestError(str(exc), "--gpu", usage=False) from None
    if request.strategy is not None and request.gpus == 1:
        raise RequestError("--strategy applies with --gpus N > 1")
    precisions = precision_list(request.precisions)
    if _serving(request).mode == "generate":
        return _generate_job(request, precisions)
    named = any(callable(m) or is_custom_name(str(m)) for m in request.models)
    model = ModelRequest(request.models, request.models_file, seq_len=request.seq_len if named else None)
    workloads = workloads_of(model, precisions)
    if len(workloads) != 1:
        shown = ",".join(str(m) for m in request.models)
        raise RequestError(f"--model '{shown}' names {len(workloads)} workloads; plan one at a time")
    rank = lora_rank(request.lora)
    return PlanJob(request, workloads[0], precisions, None if named else request.seq_len, rank)


def _serving(request: PlanRequest) -> ServingRequest:
    """The plan's serving options, checked: a mode plan takes, generation options only with --mode generate.
    Raises RequestError."""
    serving = ServingRequest(request.mode, request.prompt_len, request.new_tokens, request.prefill_chunk)
    serving.check()
    return serving


def _generate_job(request: PlanRequest, precisions: list[str]) -> PlanJob:
    """The plan job of `plan --mode generate`: the model's generation variant (P, N and C asked), refusing the
    training levers. Raises RequestError for a lever of training, a model that is not a causal LM or settings past
    its positions."""
    given = [
        flag
        for flag, on in (
            ("--global-batch", request.global_batch is not None),
            ("--optimizer", bool(request.optimizers)),
            ("--gpus", request.gpus != 1),
        )
        if on
    ]
    if given:
        raise RequestError(f"{' and '.join(given)}: training settings; --mode generate plans one card's serving")
    model = ModelRequest(
        request.models,
        request.models_file,
        seq_len=request.seq_len,
        lora=request.lora,
        prompt_len=request.prompt_len,
        new_tokens=request.new_tokens,
        prefill_chunk=request.prefill_chunk,
    )
    workloads = generating(workloads_of(model, precisions, variants=False), model, "generate", False)
    if len(workloads) != 1:
        shown = ",".join(str(m) for m in request.models)
        raise RequestError(f"--model '{shown}' names {len(workloads)} workloads; plan one at a time")
    return PlanJob(request, workloads[0], precisions, None, None)
