"""Python API: the exact max batch of a model (find_max_batch), its prediction (predict_max_batch), or a plan (plan).

The same code paths and result schema as `memprobe scan` / `memprobe predict`. A model is a registry
name, a name outside it (timm:NAME, hf:NAME, hf-config:PATH, FILE.py:FUNC, pkg.mod:FUNC) or a build
function `build(device, precision) -> task`; a function is handed to the trial processes by its
module:qualname, so it must be importable (defined at the top level of a module or of the script run).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from memprobe.core.records.results import ScanResult
from memprobe.core.text.textlists import listed, visible_devices
from memprobe.core.workload import option_bounds as bounds
from memprobe.core.workload.registry import RegistryError, Workload
from memprobe.probe.device import NoGPUError
from memprobe.request import (
    Model,
    ModelRequest,
    PlanRequest,
    PredictRequest,
    RequestError,
    ScanRequest,
    plan_job,
    predict_job,
    predict_steps,
    scan_job,
    within,
    workloads_of,
)
from memprobe.request.model import modelled
from memprobe.workloads.custom import CustomModelError

__all__ = [
    "find_max_batch",
    "predict_max_batch",
    "plan",
    "resolve_model",
    "Model",
    "UserCodeError",
    "NoGPUError",
    "CustomModelError",
    "RegistryError",
    "RequestError",
]

log = logging.getLogger(__name__)


class UserCodeError(RuntimeError):
    """The model's own code (its build, make_batch or loss) raised, or the model cannot be built as named.

    `result` is the ScanResult (written like any scan), `details` the message with the user's traceback.
    """

    def __init__(self, message: str, result: ScanResult, details: str) -> None:
        super().__init__(message)
        self.result = result
        self.details = details


@contextmanager
def _messages(verbose: bool) -> Iterator[None]:
    """With `verbose`, print what memprobe's modules log (the `memprobe` logger, INFO and up: trace progress, trial
    outcomes, notes on how an option was read) as "memprobe: ..." lines on stderr for the call's duration; the
    logger is put back after."""
    if not verbose:
        yield
        return
    logger = logging.getLogger("memprobe")
    handler, level = logging.StreamHandler(sys.stderr), logger.level
    handler.setFormatter(logging.Formatter("memprobe: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _progress(verbose: bool):
    """What a call with `verbose` says while it traces: a line per trace, logged (_messages shows it)."""
    from memprobe.predict.progress import TraceProgress, silent

    return TraceProgress(log.info) if verbose else silent()


def _one(workloads: list[Workload], model: Model) -> Workload:
    """The one workload an API call takes. Raises CustomModelError for a name that names several."""
    if len(workloads) != 1:
        raise CustomModelError(f"'{model}' names {len(workloads)} workloads; give exactly one")
    return workloads[0]


def resolve_model(
    model: Model,
    optimizer: str | None = None,
    input_size: Sequence[int] | None = None,
    task: str | None = None,
    seq_len: int | None = None,
    models_file: str | Path | None = None,
) -> Workload:
    """The one Workload that `model` names, as `--model` with these options resolves it (memprobe.request):
    `seq_len` shapes a model given by name and makes a registry LLM's variant. Raises CustomModelError /
    RegistryError (one line), RequestError (a ValueError) for an option the model cannot take."""
    request = ModelRequest([model], models_file, input_size, optimizer, task, seq_len)
    return _one(workloads_of(request, ()), model)


def _child_variables(device: int | str, model: Model) -> dict[str, str]:
    """What find_max_batch's processes get on top of this process's environment, which it leaves alone: for a GPU
    index, CUDA_VISIBLE_DEVICES narrowed to that GPU (an index among those visible); for a build function, this
    process's sys.path as PYTHONPATH (as multiprocessing's spawn does), so they import its module wherever this
    process found it. Raises NoGPUError when every GPU is hidden, ValueError for an index not among them."""
    variables: dict[str, str] = {}
    if not isinstance(device, str):
        before = os.environ.get("CUDA_VISIBLE_DEVICES")
        visible = visible_devices(before)
        if visible == []:  # every GPU hidden: as if there were none
            raise NoGPUError(
                "no CUDA GPU to measure on (CUDA_VISIBLE_DEVICES is empty); memprobe.predict_max_batch predicts the "
                "max batch without one"
            )
        if visible is not None and not 0 <= device < len(visible):
            raise ValueError(f"GPU {device} is not among CUDA_VISIBLE_DEVICES={before}")
        variables["CUDA_VISIBLE_DEVICES"] = visible[device] if visible is not None else str(device)
    if callable(model):
        path = os.environ.get("PYTHONPATH")
        variables["PYTHONPATH"] = os.pathsep.join([p or os.getcwd() for p in sys.path] + ([path] if path else []))
    return variables


class _Quiet:
    def precision_start(self, workload: str, precision: str) -> None: ...
    def trial_start(self, workload: str, precision: str, index: int, batch: int, fresh: bool) -> None: ...
    def trial_end(self, attempt) -> None: ...
    def note(self, text: str) -> None: ...


class _Logged(_Quiet):
    def trial_end(self, attempt) -> None:
        log.info(f"batch {attempt.batch} {attempt.outcome}{' (fresh process)' if attempt.fresh else ''}")


def _scan_request(model: Model, precision: str | Sequence[str], device: str, out: Any, **given: Any) -> ScanRequest:
    """The ScanRequest of a find_max_batch call: what `memprobe scan` with the same options asks. The keywords that
    are scan's options (its request's declared fields and its model's) go to the request, checked as the command
    checks them; any other goes to ScanOptions as it is."""
    if isinstance(given.get("gpus"), (str, int)):  # "2,4", "all" or 2, as `--gpus` takes them
        given["gpus"] = listed(str(given["gpus"]))
    values = {"models": [model], "precisions": listed(precision), "device": device, "out_dir": out, **given}
    request = modelled(ScanRequest, values)
    return dataclasses.replace(request, options=values)  # what is left is neither the request's nor its model's


def find_max_batch(
    model: Model,
    precision: str | Sequence[str] = "bf16",
    device: int | str = 0,
    *,
    out: str | Path | None = None,
    throughput: bool = True,
    memory_cap: str | None = None,
    cpu_memory_budget: str | None = None,
    optimizer: str | None = None,
    input_size: Sequence[int] | None = None,
    task: str | None = None,
    seq_len: int | None = None,
    models_file: str | Path | None = None,
    verbose: bool = False,
    **scan_options: Any,
) -> ScanResult:
    """Find the exact max batch of `model` on a GPU (B fits and B+1 does not, in fresh processes), and its throughput.

    `model`: a build function `build(device, precision) -> TrainTask` (importable by module:qualname), or a
    name as `memprobe scan --model` takes. `precision`: one or more of fp32, tf32, fp16, bf16. `device`: a GPU
    index, or 'cpu' with `cpu_memory_budget` (e.g. '64MiB': the CPU's fake allocator, for tests). `out`: folder
    for the result file (default: none kept). Other options as `memprobe scan` takes them (steps, warmup,
    timed_steps, max_batch, max_trials, batches, soak, repeat (the fresh runs in a row B must train in, 2), curve,
    curve_batches, mode, search="seq-len", checkpointing, lora, ...), checked as the command checks them (numbers within the bounds of core/workload/option_bounds.py); one GPU
    only: `gpus` other than 1 and `parallel` are refused; other ScanOptions fields (curve_budget_s, ...) pass through.
    Returns the ScanResult: `.max_batch`, `.throughput`, `.to_json()`, `.precisions[p]` for each precision.

    Raises (all importable from `memprobe`): UserCodeError when the model's own code raised (its traceback in
    `.details`); CustomModelError / RegistryError for a model that cannot be named or resolved; RequestError (a
    ValueError, worded as `memprobe scan` words it, the option named as the command spells it) or ValueError for
    bad options; NoGPUError when there is no CUDA device (a torch built without CUDA, no driver, no GPU): use
    predict_max_batch there.
    """
    from memprobe.core.process.outcomes import USER_ERROR
    from memprobe.probe.scan import NoCudaError, scan_workload

    kind = device if isinstance(device, str) else "cuda"
    if kind not in ("cuda", "cpu"):
        raise ValueError(f"device must be a GPU index, 'cuda' or 'cpu', not '{device}'")
    request = _scan_request(
        model,
        precision,
        kind,
        None if out is None else str(out),
        throughput=throughput,
        memory_cap=memory_cap,
        cpu_memory_budget=cpu_memory_budget,
        optimizer=optimizer,
        input_size=input_size,
        task=task,
        seq_len=seq_len,
        models_file=models_file,
        **scan_options,
    )
    job = scan_job(request)
    if job.frontier:
        raise RequestError("the API finds the max batch; `memprobe scan --search frontier` walks a frontier")
    if request.parallel or [str(n).strip() for n in request.gpus or ["1"]] != ["1"]:  # taken, and never run
        raise RequestError("the API scans one GPU (`device`); `memprobe scan --gpus N` or --parallel runs several")
    workload = _one(job.workloads, model)
    opts = dataclasses.replace(job.options, env=_child_variables(device, model))
    with _messages(verbose), tempfile.TemporaryDirectory(prefix="memprobe-") as scratch:
        try:
            result, _path = scan_workload(
                workload, opts, out if out is not None else scratch, _Logged() if verbose else _Quiet()
            )
        except NoCudaError as exc:
            raise NoGPUError(
                f"no CUDA GPU to measure on ({exc}); memprobe.predict_max_batch predicts the max batch without one"
            ) from None
    failed = next((p for p in result.precisions.values() if p.stop == USER_ERROR), None)
    if failed is not None:
        raise UserCodeError(f"{workload.name} {failed.precision}: {failed.error.splitlines()[0]}", result, failed.error)
    return result


def predict_max_batch(
    model: Model,
    memory: str | Sequence[str] | None = None,
    precision: str | Sequence[str] = "bf16",
    *,
    gpu: str | None = None,
    overhead_from: Sequence[str | Path] | str | Path | None = None,
    overhead: str | int | None = None,
    steps: int = 3,
    optimizer: str | None = None,
    input_size: Sequence[int] | None = None,
    task: str | None = None,
    seq_len: int | None = None,
    models_file: str | Path | None = None,
    gpus: int = 1,
    strategy: str = "ddp",
    verbose: bool = False,
):
    """Predict the max batch of `model` on cards of the given memory sizes, with no GPU (fake tensors).

    `model` as in find_max_batch (a build function is called once, with precision=None). `memory`: sizes ("24GiB",
    or a list); `gpu`: catalog cards by name instead of (or besides) sizes ("H100", "a100 80gb"). With neither, the
    sizes `memprobe predict` takes without --memory and --gpu (11, 24, 48 and 80 GiB): the same request as the
    command's, so `gpu="V100", precision="bf16"` is refused as the command refuses it. The memory a real
    card's allocator cannot use comes from the figures memprobe ships (measured per scanned card, carried over to
    the others; the same wherever this runs), or from `overhead_from` (scan result files or folders) or
    `overhead` (a size, 0 for none) when given. `gpus` > 1 predicts per GPU for that many GPUs training
    data-parallel under `strategy` ("ddp" or "fsdp"). The trials are traced on every CPU core this process may
    use (forked children on Linux); `verbose` prints a line per trace on stderr. The request is read as `memprobe
    predict` reads the same options (memprobe.request). Returns memprobe.predict.summary.Prediction:
    `prediction.precisions["bf16"].max_batch["24GiB"]` (the card's catalog name as the key for a card); a
    precision a card cannot train in (tf32 and bf16 before compute capability 8.0) has max batch 0 there and is
    listed in `prediction.cannot_train`, as the command prints "-" and says why.

    Raises memprobe.predict.trace.PredictError (a RuntimeError) when the model cannot be built or stepped on fake
    tensors, or its build or a trial does not end within the time limit (300 s; MEMPROBE_TIME_LIMIT); RequestError
    (a ValueError, worded as `memprobe predict` words it) for a bad size, card name, precision, GPU count, strategy
    or overhead, and for cards none of which can train in any precision asked; CustomModelError / RegistryError
    for a model that cannot be resolved.
    """
    text = memory if memory is None or isinstance(memory, str) else ",".join(memory)
    paths = [overhead_from] if isinstance(overhead_from, (str, Path)) else list(overhead_from or ())
    request = PredictRequest(
        ModelRequest([model], models_file, input_size, optimizer, task, seq_len),
        memory=text,
        gpus=gpus,
        strategies=[strategy],
        cards=gpu,
        precisions=listed(precision),
        overhead_from=paths,
        overhead=overhead,
        steps=steps,
    )
    with _messages(verbose):
        job = predict_job(request)
        workload = _one(job.workloads, model)
        sizes = job.memory_sizes()
        world = job.worlds[0] if job.worlds else None
        return job.predict(workload, sizes, world, _progress(verbose))


def plan(
    model: Model,
    gpu: str,
    global_batch: int | None = None,
    *,
    seq_len: int | None = None,
    precision: str | Sequence[str] = ("fp32", "fp16", "bf16"),
    lora: int | None = None,
    optimizers: Sequence[str] = (),
    results: Sequence[str | Path] = (),
    models_file: str | Path | None = None,
    verbose: bool = False,
    gpus: int = 1,
    strategy: str | None = None,
    mode: str = "train",
    prompt_len: int | None = None,
    new_tokens: int | None = None,
    prefill_chunk: int | None = None,
):
    """The micro-batch and accumulation to run `model` on the card `gpu`, per memory lever, as `memprobe plan`
    (on `gpus` such cards under `strategy`, as `plan --gpus N --strategy S`: the micro-batch is per GPU; no strategy:
    ddp; a strategy with one GPU is refused, as the command refuses it). The request is read as `memprobe plan`
    reads the same options (memprobe.request.plan_job).

    Each precision (and for LLM workloads checkpointing off/on, and LoRA of rank `lora`; for models given by name
    each of `optimizers`) gets a row: max micro-batch measured where `results` (result files or folders) holds a
    scan of that card and setting, else predicted (labelled); the micro-batch (at most b*, never past the knee of a
    measured curve); the accumulation steps to reach `global_batch`; headroom; samples/s and seconds per global
    batch only where measured. Returns memprobe.core.estimates.plan.Plan (`.rows`: PlanRow records, sorted by time per global
    batch, unknown last; `.to_dict()`). With `mode` "generate" (`prompt_len`, `new_tokens`, `prefill_chunk` as
    `plan --mode generate` takes them): memprobe.core.estimates.serving.ServingPlan, per precision the concurrent sequences
    that fit on the card, measured where `results` holds that generation's scan on the card, else predicted.

    Raises RequestError (a ValueError, worded as `memprobe plan` words it) for a global batch, `seq_len` or `gpus`
    out of bounds (core/workload/option_bounds.py), a card name that names no card or several, a strategy with one GPU, a
    model name that names several workloads, a bad `lora` rank, or under mode "generate" a model that is not a causal
    LM or a training lever; memprobe.core.estimates.plan.PlanError (a ValueError) for
    a lever the workload lacks, an unreadable result file or `results` with no scan of this model on this card;
    CustomModelError / RegistryError for a model that cannot be resolved;
    memprobe.predict.trace.PredictError when a setting cannot be predicted.
    """
    from memprobe.predict.parallel import cores

    request = PlanRequest(
        [model],
        gpu,
        global_batch,
        seq_len,
        listed(precision),
        lora,
        optimizers,
        results,
        models_file=models_file,
        gpus=gpus,
        strategy=strategy,
        mode=mode,
        prompt_len=prompt_len,
        new_tokens=new_tokens,
        prefill_chunk=prefill_chunk,
    )
    return plan_job(request).plan(cores(), _progress(verbose))


def breakdown(
    model: Model,
    precision: str = "bf16",
    batch: int = 1,
    *,
    predicted: bool = True,
    gpu: str | None = None,
    memory: str | None = None,
    steps: int = 3,
    optimizer: str | None = None,
    input_size: Sequence[int] | None = None,
    task: str | None = None,
    seq_len: int | None = None,
    models_file: str | Path | None = None,
):
    """Where the memory goes at the peak of a training step at `batch`, as a memprobe.core.records.breakdown.Breakdown
    record (categories in bytes, top modules, per-sample bytes, `what_buys_more_batch`).

    `predicted=True` traces it on fake tensors for an H100-like card (no GPU; labelled predicted). `gpu` (a card
    name) or `memory` (a size) replays it at that card's allocator capacity, as the card runs it: near its max
    batch the allocator's slack is then much smaller than with no limit. For a measured one, run find_max_batch
    (its `.precisions[p].breakdown` holds the breakdown at B on a GPU scan). Raises
    memprobe.predict.trace.PredictError when the step cannot be traced, ValueError for predicted=False or a bad
    card name or size (memprobe.core.cards.cardsize.SizeError), RequestError (a ValueError) for a batch below 1 or `steps`
    out of the bounds of `memprobe predict --steps` (3 to 10 in training).
    """
    if not predicted:
        raise ValueError("a measured breakdown comes from find_max_batch(...).precisions[p].breakdown (at B, on a GPU)")
    within(bounds.BREAKDOWN_BATCH, batch)
    predict_steps(steps)  # the training trial of `memprobe predict`, whose breakdown this is
    from memprobe.predict.breakdown import predict_breakdown

    capacity = None
    if gpu is not None or memory is not None:
        from memprobe.core.cards.cardsize import SizeError, read_sizes
        from memprobe.predict.summary import memory_sizes

        asked = read_sizes(memory, gpu)
        sizes = memory_sizes(asked.labels, asked.cards, None)
        if len(sizes) != 1:
            raise SizeError(f"give one card or size for a breakdown, not {len(sizes)}")
        capacity = sizes[0].capacity_bytes
    workload = resolve_model(model, optimizer, input_size, task, seq_len, models_file)
    return predict_breakdown(workload, precision, batch, steps, capacity=capacity)
