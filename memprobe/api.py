"""Python API: the exact max batch of a model (find_max_batch), its prediction (predict_max_batch), or a plan (plan).

The same code paths and result schema as `memprobe scan` / `memprobe predict`. A model is a registry
name, a name outside it (timm:NAME, hf:NAME, hf-config:PATH, FILE.py:FUNC, pkg.mod:FUNC) or a build
function `build(device, precision) -> task`; a function is handed to the trial processes by its
module:qualname, so it must be importable (defined at the top level of a module or of the script run).
"""

from __future__ import annotations

import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, Union

from memprobe.core.registry import RegistryError, Workload, load_registry
from memprobe.core.results import ScanResult
from memprobe.core.textlists import comma_items, visible_devices
from memprobe.probe.device import NoGPUError
from memprobe.workloads.custom import CustomModelError, CustomOptions, resolve, select_models, target_of

Model = Union[str, Callable[..., Any]]
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
]


class UserCodeError(RuntimeError):
    """The model's own code (its build, make_batch or loss) raised, or the model cannot be built as named.

    `result` is the ScanResult (written like any scan), `details` the message with the user's traceback.
    """

    def __init__(self, message: str, result: ScanResult, details: str) -> None:
        super().__init__(message)
        self.result = result
        self.details = details


def _progress(verbose: bool):
    """What a call with `verbose` says while it traces: "memprobe: ..." lines on stderr; nothing otherwise."""
    from memprobe.predict.progress import TraceProgress, silent

    return TraceProgress(lambda text: print(f"memprobe: {text}", file=sys.stderr)) if verbose else silent()


def resolve_model(
    model: Model,
    optimizer: str | None = None,
    input_size: Sequence[int] | None = None,
    task: str | None = None,
    seq_len: int | None = None,
    models_file: str | Path | None = None,
) -> Workload:
    """The one Workload that `model` names. Raises CustomModelError / RegistryError (one line)."""
    options = CustomOptions(tuple(input_size) if input_size else None, optimizer, task, seq_len)  # type: ignore[arg-type]
    if callable(model):
        return resolve(target_of(model), options)
    found = select_models(load_registry(models_file), str(model), options)
    if len(found) != 1:
        raise CustomModelError(f"'{model}' names {len(found)} workloads; give exactly one")
    return found[0]


@contextmanager
def _visible_device(device: int | str) -> Iterator[str]:
    """'cuda' with CUDA_VISIBLE_DEVICES narrowed to GPU `device` (an index among the visible ones) for the
    trial processes started inside; 'cuda' or 'cpu' as given for a string."""
    if isinstance(device, str):
        if device not in ("cuda", "cpu"):
            raise ValueError(f"device must be a GPU index, 'cuda' or 'cpu', not '{device}'")
        yield device
        return
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = visible_devices(before)
    if visible == []:  # every GPU hidden: as if there were none
        raise NoGPUError(
            "no CUDA GPU to measure on (CUDA_VISIBLE_DEVICES is empty); memprobe.predict_max_batch predicts the "
            "max batch without one"
        )
    if visible is not None and not 0 <= device < len(visible):
        raise ValueError(f"GPU {device} is not among CUDA_VISIBLE_DEVICES={before}")
    os.environ["CUDA_VISIBLE_DEVICES"] = visible[device] if visible is not None else str(device)
    try:
        yield "cuda"
    finally:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


@contextmanager
def _import_path(share: bool) -> Iterator[None]:
    """With `share`, give the trial processes this process's sys.path (as multiprocessing's spawn does), so
    they import a build function's module wherever this process found it."""
    before = os.environ.get("PYTHONPATH")
    if share:
        os.environ["PYTHONPATH"] = os.pathsep.join([p or os.getcwd() for p in sys.path] + ([before] if before else []))
    try:
        yield
    finally:
        if share:
            if before is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = before


class _Quiet:
    def precision_start(self, workload: str, precision: str) -> None: ...
    def trial_start(self, workload: str, precision: str, index: int, batch: int, fresh: bool) -> None: ...
    def trial_end(self, attempt) -> None: ...
    def note(self, text: str) -> None: ...


class _Printed(_Quiet):
    def trial_end(self, attempt) -> None:
        print(
            f"memprobe: batch {attempt.batch} {attempt.outcome}{' (fresh process)' if attempt.fresh else ''}",
            file=sys.stderr,
        )


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
    for the result file (default: none kept). Other ScanOptions fields (steps, max_batch, ...) pass through.
    Returns the ScanResult: `.max_batch`, `.throughput`, `.to_json()`, `.precisions[p]` for each precision.

    Raises (all importable from `memprobe`): UserCodeError when the model's own code raised (its traceback in
    `.details`); CustomModelError / RegistryError for a model that cannot be named or resolved; ValueError for bad
    options; NoGPUError when there is no CUDA device (a torch built without CUDA, no driver, no GPU): use
    predict_max_batch there.
    """
    from memprobe.core.outcomes import USER_ERROR
    from memprobe.core.units import parse_size
    from memprobe.probe.scan import NoCudaError, ScanOptions, scan_workload

    workload = resolve_model(model, optimizer, input_size, task, seq_len, models_file)
    precisions = comma_items(precision) if isinstance(precision, str) else list(precision)
    with _visible_device(device) as kind, _import_path(callable(model)):
        if kind == "cpu" and not cpu_memory_budget:
            raise ValueError("device='cpu' needs cpu_memory_budget (the CPU has no allocator limit to find)")
        opts = ScanOptions(
            precisions=precisions,
            device=kind,
            measure=throughput,
            cpu_budget_bytes=parse_size(cpu_memory_budget) if cpu_memory_budget else None,
            memory_cap_bytes=parse_size(memory_cap) if memory_cap else None,
            **scan_options,
        )
        with tempfile.TemporaryDirectory(prefix="memprobe-") as scratch:
            try:
                result, _path = scan_workload(
                    workload, opts, out if out is not None else scratch, _Printed() if verbose else _Quiet()
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
    memory: str | Sequence[str] = "24GiB",
    precision: str | Sequence[str] = "bf16",
    *,
    gpu: str | None = None,
    overhead_from: Sequence[str | Path] | None = None,
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

    `model` as in find_max_batch (a build function is called once, with precision=None). `gpu`: catalog cards by
    name instead of (or besides) sizes ("H100", "a100 80gb"; memory=None for cards only). The memory a real
    card's allocator cannot use comes from the figures memprobe ships (measured per scanned card, carried over to
    the others; the same wherever this runs), or from `overhead_from` (scan result files or folders) or
    `overhead` (a size, 0 for none) when given. `gpus` > 1 predicts per GPU for that many GPUs training
    data-parallel under `strategy` ("ddp" or "fsdp"). The trials are traced on every CPU core this process may
    use (forked children on Linux); `verbose` prints a line per trace on stderr. Returns memprobe.predict.summary.Prediction:
    `prediction.precisions["bf16"].max_batch["24GiB"]` (the card's catalog name as the key for a card).

    Raises memprobe.predict.trace.PredictError (a RuntimeError) when the model cannot be built or stepped on fake
    tensors, or its build or a trial does not end within the time limit (300 s; MEMPROBE_TIME_LIMIT); ValueError for a bad size, card name, precision, GPU count, strategy or overhead
    (memprobe.core.cardsize.SizeError and memprobe.core.overhead.OverheadError are ValueErrors); CustomModelError /
    RegistryError for a model that cannot be resolved.
    """
    from memprobe.core.cardsize import read_sizes
    from memprobe.core.overhead import choose_override
    from memprobe.predict.parallel import cores
    from memprobe.predict.summary import memory_sizes, predict

    workload = resolve_model(model, optimizer, input_size, task, seq_len, models_file)
    text = memory if memory is None or isinstance(memory, str) else ",".join(memory)
    asked = read_sizes(text, gpu)
    precisions = comma_items(precision) if isinstance(precision, str) else list(precision)
    paths = [overhead_from] if isinstance(overhead_from, (str, Path)) else overhead_from
    sizes = memory_sizes(asked.labels, asked.cards, choose_override(paths, overhead))
    world = None
    if gpus != 1:
        from memprobe.predict.data_parallel import World

        world = World(gpus, strategy)  # StrategyError is a ValueError
    return predict(
        workload, precisions, sizes, None, "", steps=steps, world=world, workers=cores(), progress=_progress(verbose)
    )


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
    strategy: str = "ddp",
):
    """The micro-batch and accumulation to run `model` on the card `gpu`, per memory lever, as `memprobe plan`
    (on `gpus` such cards under `strategy`, as `plan --gpus N --strategy S`: the micro-batch is per GPU).

    Each precision (and for LLM workloads checkpointing off/on, and LoRA of rank `lora`; for models given by name
    each of `optimizers`) gets a row: max micro-batch measured where `results` (result files or folders) holds a
    scan of that card and setting, else predicted (labelled); the micro-batch (at most b*, never past the knee of a
    measured curve); the accumulation steps to reach `global_batch`; headroom; samples/s and seconds per global
    batch only where measured. Returns memprobe.core.plan.Plan (`.rows`: PlanRow records, sorted by time per global
    batch, unknown last; `.to_dict()`).

    Raises memprobe.core.plan.PlanError (a ValueError) for an unknown card, a global batch out of range, a lever the
    workload lacks, an unreadable result file or `results` with no scan of this model on this card; CustomModelError / RegistryError for a model that cannot be
    resolved; memprobe.predict.trace.PredictError when a setting cannot be predicted.
    """
    from memprobe.plan.build import build_plan
    from memprobe.predict.parallel import cores
    from memprobe.workloads.custom import is_custom_name

    named = callable(model) or is_custom_name(str(model))
    workload = resolve_model(model, seq_len=seq_len if named else None, models_file=models_file)
    precisions = comma_items(precision) if isinstance(precision, str) else list(precision)
    return build_plan(
        workload,
        gpu,
        global_batch,
        precisions,
        None if named else seq_len,
        lora,
        list(optimizers),
        list(results),
        workers=cores(),
        progress=_progress(verbose),
        gpus=gpus,
        strategy=strategy,
    )


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
    """Where the memory goes at the peak of a training step at `batch`, as a memprobe.core.breakdown.Breakdown
    record (categories in bytes, top modules, per-sample bytes, `what_buys_more_batch`).

    `predicted=True` traces it on fake tensors for an H100-like card (no GPU; labelled predicted). `gpu` (a card
    name) or `memory` (a size) replays it at that card's allocator capacity, as the card runs it: near its max
    batch the allocator's slack is then much smaller than with no limit. For a measured one, run find_max_batch
    (its `.precisions[p].breakdown` holds the breakdown at B on a GPU scan). Raises
    memprobe.predict.trace.PredictError when the step cannot be traced, ValueError for predicted=False or a bad
    card name or size (memprobe.core.cardsize.SizeError).
    """
    if not predicted:
        raise ValueError("a measured breakdown comes from find_max_batch(...).precisions[p].breakdown (at B, on a GPU)")
    from memprobe.predict.breakdown import predict_breakdown

    capacity = None
    if gpu is not None or memory is not None:
        from memprobe.core.cardsize import SizeError, read_sizes
        from memprobe.predict.summary import memory_sizes

        asked = read_sizes(memory, gpu)
        sizes = memory_sizes(asked.labels, asked.cards, None)
        if len(sizes) != 1:
            raise SizeError(f"give one card or size for a breakdown, not {len(sizes)}")
        capacity = sizes[0].capacity_bytes
    workload = resolve_model(model, optimizer, input_size, task, seq_len, models_file)
    return predict_breakdown(workload, precision, batch, steps, capacity=capacity)
