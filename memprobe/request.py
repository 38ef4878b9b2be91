"""The typed requests of `memprobe scan` and `memprobe predict`, each turned into what runs by one function that the
command line and the Python API both call: the same options give the same workloads and settings, or the same error.

No torch here (the CLI imports this module to read its options); what needs it is imported where it is used.
Notes on how an option was read (a card name taken as one of several, a size read as decimal GB) go to this
module's logger at INFO: the CLI prints them as `note: ...` lines, an API caller's logging configuration decides.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, Union

from memprobe.core import option_bounds as bounds
from memprobe.core.catalog import PRECISIONS
from memprobe.core.registry import Workload, load_registry
from memprobe.core.run_length import TIMED_STEPS, TRIAL_STEPS, WARMUP_STEPS
from memprobe.core.textlists import comma_items
from memprobe.core.variants import VariantError, VariantRequest, apply_variant, parse_lora

if TYPE_CHECKING:
    from memprobe.core.cardsize import Sizes
    from memprobe.core.overhead import Override
    from memprobe.probe.options import ScanOptions

log = logging.getLogger(__name__)

Model = Union[str, Callable[..., Any]]  # a name as `--model` takes it, or a build function (the API)

# Card sizes predict (and a scan with no GPU) predicts for when none is given: 11 GB (GTX 1080 Ti / RTX 2080 Ti
# class), 24 GB (RTX 3090/4090), 48 GB (RTX A6000 / L40S), 80 GB (A100 / H100).
COMMON_CARD_SIZES = "11GiB,24GiB,48GiB,80GiB"
SEARCHES = ("batch", "seq-len", "frontier")
MODES = ("train", "infer")


class RequestError(ValueError):
    """An option, or a combination of options, that the command cannot take. `option` names the option as the
    command line spells it (`--precision`), or is None for a combination; the message is one line. `usage` False:
    not a misused option but a name that names nothing (a card), which the CLI exits 1 for, as for a model."""

    def __init__(self, message: str, option: str | None = None, usage: bool = True) -> None:
        self.message, self.option, self.usage = message, option, usage
        super().__init__(message if option is None or message.startswith(option) else f"{option}: {message}")


def within(bound: bounds.Bound, value: Any) -> Any:
    """`value` when it is within the option's bounds (core/option_bounds.py: the table the CLI's types read too), or
    None for an option that may be left out. Raises RequestError naming the option, in the words the command prints."""
    problem = bound.problem(value)
    if problem:
        raise RequestError(problem, bound.option)
    return value


def precision_list(items: Sequence[str]) -> list[str]:
    """The precisions asked for, checked against catalog.PRECISIONS. Raises RequestError for none or an unknown one."""
    chosen = list(items)
    if not chosen:
        raise RequestError("give at least one precision (e.g. fp16,bf16)", "--precision")
    unknown = [p for p in chosen if p not in PRECISIONS]
    if unknown:
        raise RequestError(f"unknown precision(s) {', '.join(unknown)} (known: {', '.join(PRECISIONS)})", "--precision")
    return chosen


def positive_size(text: str | int, option: str) -> int:
    """Bytes of a size option (`24GiB`, or a number of bytes). Raises RequestError for garbage or a size not above 0."""
    from memprobe.core.units import parse_size

    try:
        nbytes = text if isinstance(text, int) else parse_size(text)
    except ValueError as exc:
        raise RequestError(str(exc), option) from None
    if nbytes <= 0:
        raise RequestError(f"{option} must be larger than 0, got '{text}'", option)
    return nbytes


@dataclass(frozen=True)
class ModelRequest:
    """The models a command names and the options that shape them: registry names (wildcards, `all`), names outside
    the registry (timm:, hf:, hf-config:, FILE.py:FUNC) or build functions; then the LLM variant settings."""

    models: Sequence[Model]
    models_file: str | Path | None = None
    input_size: str | Sequence[int] | None = None
    optimizer: str | None = None
    task: str | None = None
    seq_len: int | None = None
    search: str = "batch"
    batch: int = 1  # with search seq-len: the batch the length is searched at
    checkpointing: bool = False
    lora: str | int | None = None

    @property
    def lora_rank(self) -> int | None:
        """The LoRA rank asked for (None: no LoRA). Raises RequestError for a bad one."""
        return lora_rank(self.lora)


def lora_rank(lora: str | int | None) -> int | None:
    """The LoRA rank of --lora (16 or r=16; the API's int as it is), None for no LoRA: one reading for scan,
    predict, plan and their API calls. Raises RequestError (a combination's: the message names --lora) otherwise."""
    try:
        return parse_lora(None if lora is None else str(lora))
    except VariantError as exc:
        raise RequestError(str(exc)) from None


def workloads_of(request: ModelRequest, precisions: Sequence[str], variants: bool = True) -> list[Workload]:
    """The workloads `request` names, each once and in order, made the variants its settings ask (unless not
    `variants`: a frontier walks lengths itself). --seq-len shapes a model given by name as it is resolved, and is a
    variant setting of a registry LLM. Raises RegistryError (CustomModelError) for a model that cannot be named or
    resolved, RequestError for an option the models cannot take."""
    from memprobe.workloads.custom import CustomOptions, is_custom_name, parse_input_size, resolve, target_of

    _model_bounds(request)
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
    return _variants(chosen, request, precisions) if variants else chosen


def _model_bounds(request: ModelRequest) -> None:
    """Refuse a --seq-len out of bounds (as click does, before any other check). Raises RequestError."""
    within(bounds.SEQ_LEN, request.seq_len)


def _variants(workloads: list[Workload], request: ModelRequest, precisions: Sequence[str]) -> list[Workload]:
    """The workloads as the variant settings ask. Raises RequestError for a variant they cannot have."""
    from memprobe.workloads.custom import CUSTOM_FAMILIES

    rank = request.lora_rank
    try:
        asked = VariantRequest(request.search, request.batch, request.seq_len, request.checkpointing, rank)
        # a model given by name took --seq-len when it was resolved: not a variant setting
        named = replace(asked, seq_len=None)
        chosen = tuple(precisions)
        return [apply_variant(w, named if w.family in CUSTOM_FAMILIES else asked, chosen) for w in workloads]
    except VariantError as exc:
        raise RequestError(str(exc)) from None


def _frontier(search: str, seq_len: int | None, batches: bool, budget: float | None) -> bool:
    """Whether this is a frontier run; refuses what a frontier does not take (it walks lengths and batches itself)
    and a frontier budget without one."""
    if search not in SEARCHES:
        raise RequestError(f"must be one of {', '.join(SEARCHES)}, got '{search}'", "--search")
    if search != "frontier":
        if budget is not None:
            raise RequestError("--frontier-budget has no effect without --search frontier")
        return False
    if seq_len is not None:
        raise RequestError("--search frontier walks the sequence lengths itself: drop --seq-len")
    if batches:
        raise RequestError("--search frontier walks the batches itself: drop --batch")
    return True


@dataclass(frozen=True)
class ScanRequest:
    """What `memprobe scan` (and memprobe.find_max_batch) is asked, as typed values: the options of the command,
    its flags unchanged. `options` passes other ScanOptions fields through (the API's **scan_options)."""

    model: ModelRequest
    precisions: Sequence[str] = ("fp32", "fp16", "bf16")
    mode: str = "train"
    batches: Sequence[int] = ()
    frontier_budget: float | None = None
    out_dir: str | None = "reports"
    steps: int = TRIAL_STEPS
    warmup: int = WARMUP_STEPS
    timed_steps: int = TIMED_STEPS
    max_batch: int = 65536
    max_trials: int = 40
    throughput: bool = True
    soak: int = 0
    repeat: int = bounds.REPEAT
    curve: bool = True
    curve_batches: Sequence[int] = ()  # empty: the default ladder
    curve_budget: float | None = None
    predicted_start: bool | None = None
    breakdown: bool | None = None
    cudnn_benchmark: bool = False
    compile: bool = False
    device: str = "cuda"
    cpu_memory_budget: str | None = None
    memory_cap: str | None = None
    gpus: Sequence[str] | None = None  # world sizes as typed (numbers, 'all'); None: one GPU
    strategies: Sequence[str] = ("ddp",)
    parallel: bool = False
    predict_if_no_gpu: bool = False
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class ScanJob:
    """What a scan request runs: its workloads, the ScanOptions, and whether it walks a frontier."""

    workloads: list[Workload]
    options: ScanOptions
    frontier: bool
    lora_rank: int | None


def scan_job(request: ScanRequest) -> ScanJob:
    """The workloads and ScanOptions of a scan request. Raises RequestError for an option the scan cannot take,
    RegistryError (CustomModelError) for a model that cannot be named or resolved."""
    from memprobe.probe.options import ScanOptions

    _scan_bounds(request)
    model = request.model
    precisions = precision_list(request.precisions)
    frontier = _frontier(model.search, model.seq_len, bool(request.batches), request.frontier_budget)
    batches = list(request.batches)
    timed = batches
    if model.search == "seq-len":  # --batch is then the one batch the length is searched at
        if len(batches) > 1:
            raise RequestError("with --search seq-len give one batch to search the length at", "--batch")
        model, timed = replace(model, batch=(batches or [1])[0]), []
    workloads = workloads_of(model, precisions, variants=not frontier)
    budget = None
    if request.device == "cpu":
        if not request.cpu_memory_budget:
            raise RequestError("--device cpu needs --cpu-memory-budget (the CPU has no allocator limit to find)")
        budget = positive_size(request.cpu_memory_budget, "--cpu-memory-budget")
    elif request.device != "cuda":
        raise RequestError(f"must be cuda or cpu, got '{request.device}'", "--device")
    cap = positive_size(request.memory_cap, "--memory-cap") if request.memory_cap else None
    try:
        opts = ScanOptions(
            precisions=precisions,
            mode=request.mode,
            steps=request.steps,
            warmup=request.warmup,
            timed_steps=request.timed_steps,
            batches=timed,
            max_batch=request.max_batch,
            max_trials=request.max_trials,
            measure=request.throughput,
            device=request.device,
            cpu_budget_bytes=budget,
            cudnn_benchmark=request.cudnn_benchmark,
            memory_cap_bytes=cap,
            compile=request.compile,
            soak=request.soak,
            repeat=request.repeat,
            curve=request.curve,
            predicted_start=request.predicted_start,
            curve_batches=list(request.curve_batches),
            curve_budget_s=request.curve_budget,
            breakdown=request.breakdown,
            **request.options,
        )
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    return ScanJob(workloads, opts, frontier, model.lora_rank if frontier else None)


def _scan_bounds(request: ScanRequest) -> None:
    """Refuse a numeric scan option out of its bounds, each item of a list too, before any other check (as the
    command's click types do while parsing). Raises RequestError."""
    given: list[tuple[bounds.Bound, Any]] = [(bounds.SCAN_STEPS, request.steps), (bounds.WARMUP, request.warmup)]
    given += [(bounds.TIMED_STEPS, request.timed_steps), (bounds.MAX_BATCH_OPTION, request.max_batch)]
    given += [(bounds.MAX_TRIALS_OPTION, request.max_trials), (bounds.SOAK, request.soak)]
    given += [(bounds.REPEAT_OPTION, request.repeat)]
    given += [(bounds.SCAN_BATCH, b) for b in request.batches]
    given += [(bounds.CURVE_BATCH, b) for b in request.curve_batches]
    given += [(bounds.CURVE_BUDGET, request.curve_budget), (bounds.FRONTIER_BUDGET, request.frontier_budget)]
    for bound, value in given:
        within(bound, value)
    for size in request.gpus or ():
        world_size(size)
    _model_bounds(request.model)


def world_size(item: str | int) -> str:
    """One item of scan's --gpus: a number of GPUs (1 or more) or 'all', as typed. Raises RequestError otherwise."""
    text = str(item).strip()
    if text == "all":
        return text
    try:
        value = int(text)
    except ValueError:
        raise RequestError(f"expected numbers of GPUs or 'all', got '{item}'", "--gpus") from None
    within(bounds.SCAN_GPUS, value)
    return text


@dataclass(frozen=True)
class PredictRequest:
    """What `memprobe predict` (and memprobe.predict_max_batch) is asked, as typed values. `memory` and `cards`
    are comma-separated (sizes, card names); neither given: COMMON_CARD_SIZES (a frontier needs one of them)."""

    model: ModelRequest
    precisions: Sequence[str] = ("fp32", "fp16", "bf16")
    memory: str | None = None
    cards: str | None = None
    gpus: int = 1
    strategies: Sequence[str] = ("ddp",)
    mode: str = "train"
    steps: int | None = None  # None: 3 in training, 2 forward passes in inference
    overhead_from: Sequence[str | Path] = ()
    overhead: str | int | None = None
    frontier_budget: float | None = None


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
        """predict.summary.MemorySize per size asked: the allocator capacity of each, on a rank of a data-parallel
        group where the job predicts for several GPUs (imports torch). Raises RequestError for a size not larger than
        the overhead."""
        from memprobe.predict.summary import memory_sizes

        try:
            return memory_sizes(self.asked.labels, self.asked.cards, self.override, group=self.worlds is not None)
        except ValueError as exc:
            raise RequestError(str(exc), "--gpu" if self.asked.cards else "--memory") from None

    def predict(self, workload: Workload, sizes: list, world: Any = None, progress: Any = None, compare_with=None):
        """Predict `workload`'s max batch for `sizes` (memory_sizes()) per GPU of `world`, tracing in the job's
        precisions, steps and mode on every core this process may use: the one call the command and the API make.
        Raises as memprobe.predict.summary.predict does."""
        from memprobe.predict.parallel import cores
        from memprobe.predict.summary import predict

        given = {"compare_with": compare_with, "world": world, "mode": self.mode, "progress": progress}
        return predict(workload, self.precisions, sizes, None, "", steps=self.steps, workers=cores(), **given)


def predict_job(request: PredictRequest) -> PredictJob:
    """The workloads, sizes and settings of a predict request. Raises RequestError for an option the prediction
    cannot take (among them a request no card asked can answer: every precision one it cannot train in),
    RegistryError (CustomModelError) for a model that cannot be named or resolved."""
    from memprobe.core.cardsize import SizeError, read_sizes
    from memprobe.core.overhead import OverheadError, choose_override

    model = request.model
    for bound, value in [(bounds.PREDICT_GPUS, request.gpus), (bounds.PREDICT_STEPS, request.steps)]:
        within(bound, value)
    within(bounds.SEQ_BATCH, model.batch)
    within(bounds.FRONTIER_BUDGET, request.frontier_budget)
    _model_bounds(model)
    precisions = precision_list(request.precisions)
    strategies = strategy_list(request.strategies)
    frontier = _frontier(model.search, model.seq_len, False, request.frontier_budget)
    if request.mode not in MODES:
        raise RequestError(f"must be train or infer, got '{request.mode}'", "--mode")
    workloads = workloads_of(model, precisions, variants=not frontier)
    if request.gpus > 1 and request.mode != "train":
        raise RequestError("--gpus N predicts data-parallel training: leave --mode at train", "--mode")
    steps = predict_steps(request.steps, request.mode)
    if frontier and (request.gpus > 1 or request.mode != "train"):
        raise RequestError("--search frontier predicts one-GPU training: drop --gpus, --mode infer and --compare")
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
    """The steps of a predicted trial: `steps`, or with None 3 in training and 2 forward passes in inference.
    Raises RequestError out of bounds, or below 3 in training (1 warm-up step + K >= 2)."""
    within(bounds.PREDICT_STEPS, steps)
    chosen = steps if steps is not None else (3 if mode == "train" else 2)
    if mode == "train" and chosen < 3:
        raise RequestError("a training trial is 1 warm-up step + K >= 2 steps (3 or more)", "--steps")
    return chosen


def strategy_list(items: Sequence[str]) -> list[str]:
    """The data-parallel strategies asked for, each once. Raises RequestError for none or an unknown one."""
    from memprobe.probe.multi import parse_strategies

    try:
        return parse_strategies(list(items))
    except ValueError as exc:
        raise RequestError(str(exc), "--strategy") from None


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
