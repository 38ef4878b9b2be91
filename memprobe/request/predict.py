"""What `memprobe predict` and memprobe.predict_max_batch are asked (PredictRequest, its options declared once), and
the one function that turns it into what runs (predict_job: the workloads, sizes, worlds and steps).

No torch here: predict's torch is imported where the sizes become allocator capacities and where it traces.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from memprobe.core.workload import option_bounds as bounds
from memprobe.core.workload.registry import Workload
from memprobe.request.checks import RequestError, precision_list, strategies_option, strategy_list, within
from memprobe.request.model import MODES, ModelRequest, generating, is_frontier, workloads_of
from memprobe.request.option import check_bounds, option

if TYPE_CHECKING:
    from memprobe.core.cards.cardsize import Sizes
    from memprobe.core.cards.overhead import Override

log = logging.getLogger(__name__)

# Card sizes predict (and a scan with no GPU) predicts for when none is given: 11 GB (GTX 1080 Ti / RTX 2080 Ti
# class), 24 GB (RTX 3090/4090), 48 GB (RTX A6000 / L40S), 80 GB (A100 / H100).
COMMON_CARD_SIZES = "11GiB,24GiB,48GiB,80GiB"


@dataclass(frozen=True)
class PredictRequest:
    """What `memprobe predict` (and memprobe.predict_max_batch) is asked, as typed values: each field after `model`
    one of the command's options (request/option.py). `memory` and `cards` are comma-separated (sizes, card names);
    neither given: COMMON_CARD_SIZES (a frontier needs one of them)."""

    model: ModelRequest
    precisions: Sequence[str] = option(
        ("fp32", "fp16", "bf16"),
        "--precision",
        "-p",
        listed=True,
        check=precision_list,
        help="Comma-separated: fp32, tf32, fp16, bf16 (as in scan).",
    )
    memory: str | None = option(
        None,
        "--memory",
        help=f"Comma-separated memory sizes to predict for (24GiB, 11GB = decimal; default without --gpu: "
        f"{COMMON_CARD_SIZES}).",
    )
    gpus: int = option(
        1,
        bound=bounds.PREDICT_GPUS,
        help="Predict per GPU for N GPUs training data-parallel (rank 0 of N, under each --strategy).",
    )
    strategies: Sequence[str] = strategies_option()
    cards: str | None = option(
        None,
        "--gpu",
        help='Comma-separated cards by name, alias or short name ("H200", "H100 SXM", "a100 80gb", 4090): predicts '
        "at the total memory the card's driver reports (see `memprobe guide` for the catalog).",
    )
    overhead_from: Sequence[str | Path] = option(
        (),
        "--overhead-from",
        path="exists",
        multiple=True,
        help="Scan result file(s) or folder(s) to take the memory a real card's allocator could not use (CUDA "
        "context, driver) from, subtracted from every size. Default: the figures memprobe ships "
        "(memprobe/data/overhead.yaml: measured per scanned card, carried over to the others).",
    )
    overhead: str | int | None = option(
        None,
        "--overhead",
        help="The memory the allocator cannot use, given directly (e.g. 1.5GiB; 0 subtracts nothing); replaces the "
        "shipped figures.",
    )

    steps: int | None = option(  # None: 3 in training, 2 forward passes in inference
        None,
        bound=bounds.PREDICT_STEPS,
        help="Steps per trial, as the scan's: 1 warm-up + K >= 2 in training (default 3); forward passes in "
        "inference (default 2).",
    )
    mode: str = option(
        "train",
        "--mode",
        choices=MODES,
        help="infer: predict the max batch of forward passes under inference_mode (as `scan --mode infer`). generate: "
        "the most concurrent sequences of a greedy generation with a static KV cache (as `scan --mode generate`).",
    )
    batch: int = option(
        1, bound=bounds.SEQ_BATCH, help="With --search seq-len: the batch the sequence length is predicted at."
    )


@dataclass
class PredictJob:
    """What a predict request runs: its workloads, precisions, the sizes asked (read, not yet made allocator
    capacities: that needs predict's torch), the overhead override, the data-parallel worlds, the steps."""

    workloads: list[Workload]
    precisions: list[str]
    asked: Sizes
    override: Override | None
    worlds: list | None  # predict.data_parallel.World per strategy; None for one GPU
    steps: int
    mode: str
    frontier: bool
    lora_rank: int | None

    def memory_sizes(self) -> list:
        """predict.summary.MemorySize per size asked: the allocator capacity of each (imports torch). Raises
        RequestError for a size not larger than the overhead."""
        from memprobe.predict.summary import memory_sizes

        try:
            return memory_sizes(self.asked.labels, self.asked.cards, self.override)
        except ValueError as exc:
            raise RequestError(str(exc), "--gpu" if self.asked.cards else "--memory") from None

    def predict(self, workload: Workload, sizes: list, world: Any = None, progress: Any = None, compare_with=None):
        """Predict `workload`'s max batch for `sizes` (memory_sizes()) per GPU of `world`, tracing in the job's
        precisions, steps and mode on every core this process may use: the one call the command and the API make.
        Raises as memprobe.predict.summary.predict does."""
        from memprobe.predict.parallel import cores
        from memprobe.predict.summary import predict

        given = {"compare_with": compare_with, "world": world, "mode": self.mode, "progress": progress}
        return predict(workload, self.precisions, sizes, steps=self.steps, workers=cores(), **given)


def predict_job(request: PredictRequest) -> PredictJob:
    """The workloads, sizes and settings of a predict request. Raises RequestError for an option the prediction
    cannot take (among them a request no card asked can answer: every precision one it cannot train in),
    RegistryError (CustomModelError) for a model that cannot be named or resolved."""
    from memprobe.core.cards.cardsize import SizeError, read_sizes
    from memprobe.core.cards.overhead import OverheadError, choose_override

    check_bounds(request)  # every number within its bounds, before any other check (as the command's click types)
    check_bounds(request.model)
    model = request.model
    precisions = precision_list(request.precisions)
    strategies = strategy_list(request.strategies)
    frontier = is_frontier(model, False)
    if request.mode not in MODES:
        raise RequestError(f"must be one of {', '.join(MODES)}, got '{request.mode}'", "--mode")
    workloads = workloads_of(
        model, precisions, variants=not frontier and request.mode != "generate", batch=request.batch
    )
    workloads = generating(workloads, model, request.mode, frontier, request.batch)
    if request.gpus > 1 and request.mode != "train":
        raise RequestError("--gpus N predicts data-parallel training: leave --mode at train", "--mode")
    steps = predict_steps(request.steps, request.mode)
    if frontier and (request.gpus > 1 or request.mode == "infer"):
        raise RequestError("--search frontier predicts one GPU's training or generation: drop --gpus, --mode infer")
    memory, hints = request.memory, True
    if memory is None and request.cards is None:
        if frontier:
            raise RequestError("--search frontier predicts for one card or size: give --gpu or --memory")
        memory, hints = COMMON_CARD_SIZES, False  # no hints about memprobe's own default
    try:
        asked = read_sizes(memory, request.cards, hints=hints)
        override = choose_override(list(request.overhead_from or ()), request.overhead)
    except SizeError as exc:  # a card name that names no card: a bad name (exit 1), as an unknown model
        raise RequestError(str(exc), exc.option, usage=exc.option != "--gpu") from None
    except OverheadError as exc:
        raise RequestError(str(exc)) from None
    for note in asked.notes:
        log.info(note)
    _check_trainable(asked, precisions)
    worlds = _worlds(request.gpus, strategies)
    return PredictJob(workloads, precisions, asked, override, worlds, steps, request.mode, frontier, model.lora_rank)


def predict_steps(steps: int | None, mode: str = "train") -> int:
    """The steps of a predicted trial: `steps`, or with None 3 in training, 2 forward passes in inference, 3 whole
    generations in generation (a fit's). Raises RequestError out of bounds, or below 3 in training."""
    within(bounds.PREDICT_STEPS, steps)
    chosen = steps if steps is not None else (2 if mode == "infer" else 3)
    if mode == "train" and chosen < 3:
        raise RequestError("a training trial is 1 warm-up step + K >= 2 steps (3 or more)", "--steps")
    return chosen


def _worlds(count: int, strategies: list[str]) -> list | None:
    """The data-parallel worlds of `count` GPUs, one per strategy; None for one GPU."""
    if count == 1:
        return None
    from memprobe.predict.data_parallel import World

    return [World(count, s) for s in dict.fromkeys(strategies)]


def _check_trainable(asked: Sizes, precisions: list[str]) -> None:
    """Refuse a request whose every card asked cannot train in any precision asked: nothing would be predicted
    (a card that can train some of them gets "-" for the others, with a line saying why)."""
    if asked.labels and len(asked.cards) == len(asked.labels):
        cards = list(asked.cards.values())
        if not any(card.supports(p) for card in cards for p in precisions):
            names = " and the ".join(dict.fromkeys(c.name for c in cards))
            levels = ", ".join(dict.fromkeys(c.compute_capability for c in cards))
            raise RequestError(
                f"the {names} cannot train in {', '.join(precisions)} (compute capability {levels}; tf32 and bf16 "
                "need 8.0 or newer): nothing to predict; give another --precision or --gpu"
            )
