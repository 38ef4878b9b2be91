"""Generation capacity (`--mode generate`): which workloads generate, their generation variant, and the record of
what a generation scan found at B (the KV cache, the peak by category, the KV capacity, the tokens per second).

No torch. A generation variant is a causal-LM workload whose params hold `generate: {prompt_len, new_tokens,
prefill_chunk}` (workloads/generation.py builds it) and whose name says so (`llama-8b+p8192+n64`), so that its result
file, report rows and predictions are never mixed with training's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from memprobe.core.records.fieldtypes import MODES, Batch, Bytes, Rate, Seconds
from memprobe.core.records.records import OpenRecord, Timed
from memprobe.core.workload import option_bounds as bounds
from memprobe.core.workload.registry import Workload

GENERATE_FAMILIES = ("llama-causal-lm", "hf")  # the hf family with task causal-lm only
WHICH = "llama-* registry workloads (family llama-causal-lm) and hf:NAME / hf-config:PATH models with --task causal-lm"
DEFAULT_PROMPT_LEN = 2048  # or what the model's positions leave beside the new tokens
DEFAULT_NEW_TOKENS = 128
LLAMA_POSITIONS = 131072  # Llama 3.1 / 3.2: what workloads/llm.llama_config gives the llama-causal-lm family
# vLLM sizes its KV cache from gpu_memory_utilization (0.92 of the card's total memory by default in the versions
# memprobe compares with) less the weights and the peak activation its profiling run measured.
VLLM_UTILIZATION = 0.92
OPTIONS = ("--prompt-len", "--new-tokens", "--prefill-chunk")


class GenerationError(ValueError):
    """A generation that cannot be run as asked: the model is not a causal LM, a setting is out of range, or the
    options are given without --mode generate; one line for the user. `option`: the option at fault, if one is."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.message, self.option = message, option


@dataclass(frozen=True)
class GenerationRequest:
    """What a generation is asked: P (None: the default, or the search's), N (None: the default) and C."""

    prompt_len: int | None = None
    new_tokens: int | None = None
    prefill_chunk: int | None = None

    @property
    def given(self) -> bool:
        return any(v is not None for v in (self.prompt_len, self.new_tokens, self.prefill_chunk))


def check_generates(workload: Workload) -> None:
    """Raises GenerationError when `workload` is not a causal LM memprobe can generate with."""
    task = str((workload.params or {}).get("task") or "causal-lm")
    if workload.family not in GENERATE_FAMILIES or (workload.family == "hf" and task != "causal-lm"):
        what = f"family {workload.family}" + (f", task {task}" if workload.family == "hf" else "")
        raise GenerationError(f"--mode generate runs causal LMs: {WHICH}; {workload.name} is {what}")


def max_positions(workload: Workload) -> int | None:
    """The longest context the workload's model takes (prompt + new tokens), where its params say it."""
    if workload.family == "llama-causal-lm":
        return LLAMA_POSITIONS
    config = (workload.params or {}).get("config") or {}
    for key in ("max_position_embeddings", "n_positions", "max_seq_len"):
        value = config.get(key) if isinstance(config, Mapping) else None
        if isinstance(value, int) and value > 0:
            return value
    return None


def generation_variant(workload: Workload, asked: GenerationRequest, search: str = "batch", batch: int = 1) -> Workload:
    """The generation variant of `workload`: params `generate` and a name that says P, N and C (and, searching the
    prompt length, the batch it is searched at). Raises GenerationError for a model that does not generate, a
    setting out of range, or a prompt and new tokens past the model's positions."""
    check_generates(workload)
    new = DEFAULT_NEW_TOKENS if asked.new_tokens is None else asked.new_tokens
    if new < 1:
        raise GenerationError(f"--new-tokens must be at least 1, got {new}")
    limit = max_positions(workload)
    over_seq = search == "seq-len"
    walked = search == "frontier"  # a frontier's template: each point sets the prompt (frontier_point)
    prompt = asked.prompt_len
    if over_seq and prompt is not None:
        raise GenerationError("--search seq-len finds the prompt length itself: drop --prompt-len")
    if prompt is None and not over_seq and not walked:
        prompt = DEFAULT_PROMPT_LEN if limit is None else max(1, min(DEFAULT_PROMPT_LEN, limit - new))
    if prompt is not None and prompt < 1:
        raise GenerationError(f"--prompt-len must be at least 1, got {prompt}")
    if limit is not None and (prompt or 1) + new > limit:
        raise GenerationError(
            f"--prompt-len {prompt or 1} + --new-tokens {new} = {(prompt or 1) + new} tokens is more than the "
            f"{limit} positions {workload.name} takes"
        )
    chunk = asked.prefill_chunk
    if chunk is not None and (chunk < 1 or (prompt is not None and chunk > prompt)):
        raise GenerationError(f"--prefill-chunk must be between 1 and --prompt-len {prompt}, got {chunk}")
    params = {k: v for k, v in (workload.params or {}).items() if k not in ("seq_len", "axis", "batch")}
    params["generate"] = {"prompt_len": prompt, "new_tokens": new, "prefill_chunk": chunk}
    parts = ([f"p{prompt}"] if prompt is not None else []) + [f"n{new}"] + ([f"c{chunk}"] if chunk else [])
    if over_seq:
        params.update(axis="seq_len", batch=batch)
        parts.append(f"maxprompt@b{batch}")
    said = f"; greedy generation of {new} tokens after " + (
        f"{prompt}-token prompts"
        if prompt is not None
        else "prompts of every context of the frontier"
        if walked
        else f"prompts of the longest length that fits at batch {batch}"
    )
    said += f", prefilled {chunk} tokens at a time" if chunk else ""
    name = workload.name + "".join(f"+{p}" for p in parts)
    return replace(workload, name=name, params=params, description=workload.description + said, unit="tokens")


def settings_of(workload: Workload | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The `generate` settings of a workload (or its record's params), None for one that does not generate."""
    params = workload.params if isinstance(workload, Workload) else (workload or {})
    given = (params or {}).get("generate")
    return dict(given) if isinstance(given, Mapping) else None


@dataclass
class GenerationRecord(OpenRecord):
    """What a generation scan found at B, per precision (the result's `precisions.<p>.generation`): the settings,
    the KV cache and the peak at B by category (weights, KV cache, activations and temporaries, allocator slack),
    the KV capacity beside the weights and that activation, vLLM's default formula for it, and the tokens/s."""

    sequences: Batch | None = None  # B
    prompt_len: Batch | None = None
    new_tokens: Batch | None = None
    prefill_chunk: Batch | None = None
    context: Batch | None = None  # P + N: what the static cache holds per sequence
    kv_bytes_per_token: Bytes | None = None
    kv_cache_bytes: Bytes | None = None
    weights_bytes: Bytes | None = None
    activation_bytes: Bytes | None = None  # peak allocated - weights - KV cache: the prefill's transients at B
    slack_bytes: Bytes | None = None  # peak reserved - peak allocated
    peak_allocated: Bytes | None = None
    peak_reserved: Bytes | None = None
    capacity_bytes: Bytes | None = None
    kv_capacity_tokens: Bytes | None = None  # (capacity - weights - activation) / KV bytes per token
    kv_capacity_sequences: Batch | None = None  # those tokens in whole contexts of P + N
    total_bytes: Bytes | None = None
    vllm_formula_tokens: Bytes | None = None  # (0.92 x total - weights - activation) / KV bytes per token
    vllm_formula: str | None = None
    prefill_tokens_per_s: Rate | None = None
    decode_tokens_per_s: Rate | None = None
    time_to_first_token_s: Seconds | None = None


def generation_record(
    settings: Mapping[str, Any],
    sequences: int,
    kv_bytes_per_token: int | None,
    weights_bytes: int | None,
    capacity_bytes: int | None,
    total_bytes: int | None,
    timed: Timed | None,
    peaks: tuple[int | None, int | None] = (None, None),
) -> GenerationRecord:
    """The GenerationRecord of B = `sequences` from the task's settings, its KV bytes per token, the weights, the
    allocator's capacity, the card's total memory and the timed run at B (its peaks, else `peaks`: the fit's)."""
    prompt, new = settings.get("prompt_len"), int(settings["new_tokens"])
    context = (prompt or 0) + new
    record = GenerationRecord(
        sequences=sequences,
        prompt_len=prompt,
        new_tokens=new,
        prefill_chunk=settings.get("prefill_chunk"),
        context=context,
        kv_bytes_per_token=kv_bytes_per_token,
        weights_bytes=weights_bytes,
        capacity_bytes=capacity_bytes,
        total_bytes=total_bytes,
    )
    fitted = timed is not None and timed.fits
    allocated, reserved = (timed.peak_allocated, timed.peak_reserved) if fitted and timed else peaks
    record.peak_allocated, record.peak_reserved = allocated, reserved
    if fitted and timed is not None:
        record.kv_cache_bytes = timed.kv_cache_bytes
        record.prefill_tokens_per_s, record.decode_tokens_per_s = timed.prefill_tokens_per_s, timed.decode_tokens_per_s
        record.time_to_first_token_s = timed.prefill_seconds
    if record.kv_cache_bytes is None and kv_bytes_per_token is not None and prompt is not None:
        record.kv_cache_bytes = kv_bytes_per_token * sequences * context  # full-attention layers only
    if allocated is not None and reserved is not None:
        record.slack_bytes = max(0, reserved - allocated)
    if allocated is not None and weights_bytes is not None and record.kv_cache_bytes is not None:
        record.activation_bytes = max(0, allocated - weights_bytes - record.kv_cache_bytes)
    _capacity(record)
    return record


def _capacity(record: GenerationRecord) -> None:
    """Fill the KV capacity (measured memory) and vLLM's formula beside it, where the figures they need exist."""
    per_token, weights, activation = record.kv_bytes_per_token, record.weights_bytes, record.activation_bytes
    if not per_token or weights is None or activation is None:
        return
    if record.capacity_bytes:
        tokens = max(0, record.capacity_bytes - weights - activation) // per_token
        record.kv_capacity_tokens = tokens
        record.kv_capacity_sequences = tokens // record.context if record.context else None
    if record.total_bytes:
        record.vllm_formula_tokens = max(0, int(VLLM_UTILIZATION * record.total_bytes) - weights - activation) // (
            per_token
        )
        record.vllm_formula = (
            f"formula, not measured: ({VLLM_UTILIZATION:g} x total memory - weights - peak activation) / KV bytes per "
            "token (vLLM's default gpu_memory_utilization)"
        )


def generation_workloads(
    workloads: list[Workload], request: Any, mode: str, frontier: bool = False, batch: int = 1
) -> list[Workload]:
    """The workloads a scan or prediction in `mode` runs, from a model request (memprobe.request.ModelRequest: its
    prompt_len, new_tokens, prefill_chunk, the training variant settings and search; `batch`: the one a --search
    seq-len runs at): in generate mode each
    one's generation variant (a frontier walks its own, so only the check that it generates), else the workloads as
    they are. Raises GenerationError for an unknown mode, a setting out of bounds or of the other mode, or a
    workload that cannot generate as asked."""
    if mode not in MODES:
        raise GenerationError(f"must be one of {', '.join(MODES)}, got '{mode}'", "--mode")
    asked = GenerationRequest(request.prompt_len, request.new_tokens, request.prefill_chunk)
    for bound, value in zip((bounds.PROMPT_LEN, bounds.NEW_TOKENS, bounds.PREFILL_CHUNK), vars(asked).values()):
        problem = bound.problem(value)
        if problem:
            raise GenerationError(problem, bound.option)
    if mode != "generate":
        if asked.given:
            raise GenerationError(f"{', '.join(OPTIONS)} apply to --mode generate; this is --mode {mode}")
        return workloads
    given = [o for o, on in [("--seq-len", request.seq_len), ("--checkpointing", request.checkpointing)] if on]
    given += ["--lora"] if request.lora else []
    if given:
        raise GenerationError(f"{' and '.join(given)}: training settings; --mode generate takes {', '.join(OPTIONS)}")
    if frontier:
        if asked.prompt_len is not None:
            raise GenerationError("--search frontier walks the contexts itself: drop --prompt-len")
        made = [generation_variant(w, asked, "frontier") for w in workloads]
        for template in made:
            frontier_ladder(template, FRONTIER_START)  # N must leave a prompt at the first context
        return made
    return [generation_variant(w, asked, request.search, batch) for w in workloads]


FRONTIER_START = 1024  # the generation frontier's contexts: 1k, 2k, 4k, ... up to the model's positions


def frontier_point(template: Workload, searched_prompt: bool, fixed: int) -> Workload:
    """The generation a frontier point scans, from a frontier's template (generation_variant with search
    "frontier"): at context `fixed` the batch search with prompts of `fixed` - N tokens, or (`searched_prompt`) the
    prompt-length search at batch `fixed`. The prefill chunk stays as asked (a prompt shorter than it is one chunk)."""
    given = dict(template.params["generate"])
    new = int(given["new_tokens"])
    params = {k: v for k, v in template.params.items() if k not in ("axis", "batch")}
    base = template.name.split("+n", 1)[0]
    chunk = f"+c{given['prefill_chunk']}" if given.get("prefill_chunk") else ""
    if searched_prompt:
        params.update(axis="seq_len", batch=fixed, generate={**given, "prompt_len": None})
        name = f"{base}+n{new}{chunk}+maxprompt@b{fixed}"
    else:
        params["generate"] = {**given, "prompt_len": max(1, fixed - new)}
        name = f"{base}+p{max(1, fixed - new)}+n{new}{chunk}"
    return replace(template, name=name, params=params)


def frontier_ladder(template: Workload, cap: int) -> tuple[int, int]:
    """(first, last) context of a generation frontier's ladder: FRONTIER_START up to the model's positions (or
    `cap`). Raises GenerationError when N leaves no prompt at the first context."""
    new = int(template.params["generate"]["new_tokens"])
    if new >= FRONTIER_START:
        raise GenerationError(f"--search frontier starts at a context of {FRONTIER_START}: give --new-tokens below it")
    return FRONTIER_START, min(cap, max_positions(template) or cap)
