"""What `memprobe scan` and memprobe.find_max_batch are asked (ScanRequest, its options declared once), and the
one function that turns it into what runs (scan_job: the workloads and the ScanOptions).

No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from memprobe.core.workload import option_bounds as bounds
from memprobe.core.workload.registry import Workload
from memprobe.core.workload.run_length import TIMED_STEPS, TRIAL_STEPS, WARMUP_STEPS
from memprobe.request.checks import (
    RequestError,
    positive_size,
    precision_list,
    strategies_option,
    whole_number,
    world_sizes,
)
from memprobe.request.model import MODES, ModelRequest, generating, is_frontier, workloads_of
from memprobe.request.option import check_bounds, option, settings_of
from memprobe.request.predict import COMMON_CARD_SIZES

if TYPE_CHECKING:
    from memprobe.probe.options import ScanOptions


@dataclass(frozen=True)
class ScanRequest:
    """What `memprobe scan` (and memprobe.find_max_batch) is asked, as typed values: each field after `model` one of
    the command's options (request/option.py), its flags unchanged. `options` passes other ScanOptions fields
    through (the API's **scan_options)."""

    model: ModelRequest
    precisions: Sequence[str] = option(
        ("fp32", "fp16", "bf16"),
        "--precision",
        "-p",
        listed=True,
        check=precision_list,
        help="Comma-separated: fp32 (TF32 off), tf32, fp16 (autocast + GradScaler), bf16 (autocast).",
    )
    mode: str = option(
        "train",
        "--mode",
        choices=MODES,
        setting="mode",
        help="train: forward, loss, backward, optimizer step. infer: forward only. generate: causal LMs, greedy "
        "generation of --new-tokens after --prompt-len prompts with a static KV cache; B = concurrent sequences.",
    )
    batches: Sequence[int] = option(
        (),
        "--batch",
        listed=True,
        item=whole_number,
        bound=bounds.SCAN_BATCH,
        help="Also measure throughput at these batch sizes (an OOM there is reported). With --search seq-len: the "
        "one batch the sequence length is searched at (default 1).",
    )
    out_dir: str | None = option("reports", "--out", path="dir", help="Folder for the result file.")
    steps: int = option(
        TRIAL_STEPS,
        bound=bounds.SCAN_STEPS,
        setting="steps",
        help="Steps per trial: 1 warm-up + K >= 2 (longer runs: --soak).",
    )
    warmup: int = option(WARMUP_STEPS, bound=bounds.WARMUP, setting="warmup", help="Warm-up steps before timing.")
    timed_steps: int = option(
        TIMED_STEPS, bound=bounds.TIMED_STEPS, setting="timed_steps", help="Timed steps for throughput."
    )
    max_batch: int = option(
        65536, bound=bounds.MAX_BATCH_OPTION, setting="max_batch", help="Largest batch the search tries."
    )
    max_trials: int = option(
        40,
        bound=bounds.MAX_TRIALS_OPTION,
        setting="max_trials",
        help="Most search trials per precision (fresh-process proof checks not counted).",
    )
    throughput: bool = option(True, "--no-throughput", setting="measure", help="Only find the max batch; skip timing.")
    soak: int = option(
        0,
        bound=bounds.SOAK,
        setting="soak",
        help="After the proof, train the max batch this many more steps in a fresh process and lower it until that "
        "passes (recorded as proof.soak); 0 = off.",
    )
    repeat: int = option(
        bounds.REPEAT,
        bound=bounds.REPEAT_OPTION,
        setting="repeat",
        help="B must complete the trial and the steps after it in this many consecutive fresh processes; batches "
        "that fitted once and failed once are reported as the flaky band.",
    )
    predicted_start: bool | None = option(
        None,
        "--predicted-start/--no-predicted-start",
        setting="predicted_start",
        help="Start the search at the max batch `memprobe predict` gives on the CPU, computed while the first trials "
        "run (default: on for CUDA without --compile). Only the start: the search and the fresh-process proof are "
        "unchanged.",
    )
    breakdown: bool | None = option(
        None,
        "--breakdown/--no-breakdown",
        setting="breakdown",
        help="After the proof, measure where the memory goes at B (parameters, gradients, optimizer state, "
        "activations, ...) in one more fresh process under PyTorch's MemTracker; B is not changed (default: on for "
        "CUDA training scans).",
    )
    curve_batches: Sequence[int] = option(
        (),
        "--curve",
        listed=True,
        item=whole_number,
        bound=bounds.CURVE_BATCH,
        words={"auto": ()},
        flag_value="auto",
        metavar="[B1,B2,...]",
        setting="curve_batches",
        help="Throughput curve (default on): time a ladder of batches up to B and report the best batch b*. Default "
        "ladder: powers of two below B (up to 7) plus B; give sizes to choose them.",
    )
    curve: bool = option(True, "--no-curve", setting="curve", help="Skip the throughput curve (only B is timed).")
    curve_budget: float | None = option(
        None,
        bound=bounds.CURVE_BUDGET,
        metavar="SECONDS",
        setting="curve_budget_s",
        help="Seconds the curve may take per precision: no point starts whose estimated cost would end past them "
        "(default 45 in training, 20 in inference).",
    )
    cudnn_benchmark: bool = option(
        False,
        "--cudnn-benchmark",
        setting="cudnn_benchmark",
        help="Let cuDNN pick algorithms by timing (changes memory near the edge).",
    )
    compile: bool = option(
        False,
        "--compile",
        setting="compile",
        help="Run the model's forward and backward through torch.compile in every trial and timed run: the max batch "
        "and throughput are those of the compiled step; compile time is reported apart.",
    )
    device: str = option(
        "cuda",
        "--device",
        choices=("cuda", "cpu"),
        setting="device",
        help="cpu runs the same code path with a fake allocator (for tests and demos; needs --cpu-memory-budget).",
    )
    cpu_memory_budget: str | None = option(
        None, "--cpu-memory-budget", help="With --device cpu: the memory budget, e.g. 64MiB."
    )
    memory_cap: str | None = option(
        None,
        "--memory-cap",
        help="Emulate a card with this much memory (e.g. 24GiB) on a bigger one: the allocator is capped at it minus "
        "the memory measured outside PyTorch (context, kernels); results are labelled emulated.",
    )
    gpus: Sequence[str] | None = option(  # world sizes as typed (numbers, 'all'); None: one GPU
        None,
        "--gpus",
        listed=True,
        check=world_sizes,
        help="World size(s) to measure: N[,N...] or 'all' (default 1: the single-GPU scan). N > 1 finds the per-GPU "
        "max batch of N ranks launched by torchrun, and the scaling efficiency against 1 GPU. With --parallel: how "
        "many GPUs to spread jobs over (default all).",
    )
    strategies: Sequence[str] = strategies_option()
    parallel: bool = option(
        False,
        "--parallel",
        help="Run different workloads and precisions on different GPUs at once (one child scan per GPU); writes the "
        "same result files as a serial scan.",
    )
    predict_if_no_gpu: bool = option(
        False,
        "--predict-if-no-gpu",
        help=f"With no CUDA device, predict the max batch for {COMMON_CARD_SIZES} instead of failing (memprobe "
        "predict; a prediction, not a measurement; exit 0).",
    )
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def one_gpu(self) -> bool:
        """Whether --gpus asks for one GPU (or is not given)."""
        return not self.gpus or list(self.gpus) == ["1"]


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

    check_bounds(request)  # every number within its bounds, before any other check (as the command's click types)
    check_bounds(request.model)
    world_sizes(request.gpus or ())
    model = request.model
    precisions = precision_list(request.precisions)
    frontier = is_frontier(model, bool(request.batches))
    batches, batch = list(request.batches), 1
    if model.search == "seq-len":  # --batch is then the one batch the length is searched at
        if len(batches) > 1:
            raise RequestError("with --search seq-len give one batch to search the length at", "--batch")
        batch, batches = (batches or [1])[0], []
    workloads = workloads_of(model, precisions, variants=not frontier and request.mode != "generate", batch=batch)
    workloads = generating(workloads, model, request.mode, frontier, batch)
    budget = None
    if request.device == "cpu":
        if not request.cpu_memory_budget:
            raise RequestError("--device cpu needs --cpu-memory-budget (the CPU has no allocator limit to find)")
        budget = positive_size(request.cpu_memory_budget, "--cpu-memory-budget")
    elif request.device != "cuda":
        raise RequestError(f"must be cuda or cpu, got '{request.device}'", "--device")
    cap = positive_size(request.memory_cap, "--memory-cap") if request.memory_cap else None
    given = settings_of(request) | {"batches": batches, "cpu_budget_bytes": budget, "memory_cap_bytes": cap}
    try:
        opts = ScanOptions(precisions=precisions, **given, **request.options)
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    return ScanJob(workloads, opts, frontier, model.lora_rank if frontier else None)
