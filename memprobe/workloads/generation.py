"""LLM generation with a static KV cache: memprobe's greedy loop, the task that runs it, and the cache's size.

One generation ("a step" of `--mode generate`) at batch B: B random P-token prompts prefilled in one forward (or C
tokens at a time through the cache), then one token per forward until exactly N new tokens exist, greedy, with
transformers' StaticCache sized for P + N, the weights in the precision's dtype, under inference_mode. The scan's
trial process and `memprobe predict`'s fake-tensor trace both run `greedy_generate`, so what is measured and what
is predicted is one code path.

Why not `model.generate(..., cache_implementation="static", do_sample=False)`: it reads values on every token (the
stopping criteria's `unfinished_sequences.max() == 0`), which fake tensors cannot give, and it has no point between
the prefill and the decode where the scan can time them apart. `greedy_generate` does what generate's greedy
static-cache path does (transformers 5.17 to 5.24, checked token for token in tests/test_generation.py): a new
StaticCache of P + N per generation, initialised lazily by the first forward (up front with chunked prefill, as
generate does), the prefill with the logits of the last position only (`logits_to_keep=1`), their float32 copy and
argmax, then one forward per token with the cache giving the positions. Where it differs, on purpose: no attention
mask (every prompt is P real tokens, no padding: generate builds a mask of ones, which adds a (B, P + i) int64 copy
per token and a (B, 1, 1, P + N) bool mask per decode forward), the new tokens written into one (B, N) buffer (generate
concatenates the ids, a (B, P + i) int64 copy per token), and no end-of-sequence token (random weights: exactly N
tokens, as min_new_tokens = max_new_tokens = N asks). Chunked prefill feeds the chunks itself, as generate's
`prefill_chunk_size` does (split the prompt, one forward per chunk through the cache, the last chunk's logits).
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

import torch

from memprobe.workloads.torchvision_guard import ensure_loadable

ensure_loadable()  # before transformers imports torchvision (see torchvision_guard.py)
from transformers import StaticCache  # noqa: E402

from .base import TrainTask, model_config  # noqa: E402

WEIGHT_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
PREFILL, DECODE, END = "prefill", "decode", "end"  # the points greedy_generate marks (see `mark`)
# Where a generation's phases are timed: mark(PREFILL) before the prefill, mark(DECODE) before each decode forward,
# mark(END) after the last one. A decode forward that follows the prefill runs with the same shapes every time (the
# static cache is P + N long from the first token to the last), which is what a trace that runs only a few of them
# relies on (predict/trace.py).
Mark = Callable[[str], None]


@dataclass(frozen=True)
class GenerationSettings:
    """What one generation runs: `prompt_len` P (None: the search is over it, n = P), `new_tokens` N, and
    `prefill_chunk` C (None: the whole prompt in one forward)."""

    prompt_len: int | None
    new_tokens: int
    prefill_chunk: int | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> "GenerationSettings | None":
        """The settings in a workload's params (`generate: {prompt_len, new_tokens, prefill_chunk}`), None when the
        workload is not a generation. Raises ValueError for a value out of range."""
        given = params.get("generate")
        if not given:
            return None
        prompt = given.get("prompt_len")
        settings = cls(
            None if prompt is None else int(prompt),
            int(given["new_tokens"]),
            None if given.get("prefill_chunk") is None else int(given["prefill_chunk"]),
        )
        if settings.new_tokens < 1 or (prompt is not None and int(prompt) < 1):
            raise ValueError("a generation needs a prompt of at least 1 token and at least 1 new token")
        if settings.prefill_chunk is not None and settings.prefill_chunk < 1:
            raise ValueError("the prefill chunk must be at least 1 token")
        return settings


def cache_keyword(model: torch.nn.Module) -> str:
    """The keyword the model's forward takes its cache by: `cache` (transformers 5.24 on) or `past_key_values`."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def new_static_cache(model: torch.nn.Module, batch: int, max_cache_len: int, early: bool) -> StaticCache:
    """transformers' StaticCache for `max_cache_len` tokens, as generate makes it: initialised lazily by the first
    forward, or with `early` (chunked prefill) at once for `batch` sequences where the model can say its heads."""
    config = model_config(model).get_text_config(decoder=True)
    cache = StaticCache(config=config, max_cache_len=max_cache_len)
    shape = getattr(model, "_get_static_cache_init_shape", lambda: None)() if early else None
    if shape is not None:
        heads, head_dim = shape
        dtype, device = next(model.parameters()).dtype, next(model.parameters()).device
        cache.early_initialization(batch_size=batch, num_heads=heads, head_dim=head_dim, dtype=dtype, device=device)
    return cache


def _next_tokens(logits: torch.Tensor) -> torch.Tensor:
    """The greedy choice from a forward's logits, as generate makes it: the last position's logits copied as
    float32 (so the forward's output can be freed), then their argmax."""
    return logits[:, -1].to(copy=True, dtype=torch.float32).argmax(dim=-1)


def greedy_generate(
    model: torch.nn.Module,
    prompts: torch.Tensor,
    new_tokens: int,
    prefill_chunk: int | None = None,
    mark: Mark | None = None,
    decode_steps: int | None = None,
) -> torch.Tensor:
    """Generate exactly `new_tokens` tokens greedily after `prompts` (B, P) with a StaticCache of P + new_tokens;
    returns the new tokens (B, new_tokens). Call under torch.inference_mode (GenerateTask.generate_step does).

    `prefill_chunk`: prefill C tokens per forward through the cache. `mark`: called at the phases' boundaries
    (PREFILL, DECODE before each decode forward, END). `decode_steps`: run at most this many decode forwards (a
    trace's shortcut: the columns after them stay unwritten; every decode forward has the same shapes). Raises what
    the model raises (out of memory among them).
    """
    batch, prompt_len = prompts.shape
    forward: dict[str, Any] = {cache_keyword(model): None, "use_cache": True, "logits_to_keep": 1}
    forward[cache_keyword(model)] = new_static_cache(model, batch, prompt_len + new_tokens, prefill_chunk is not None)
    out = torch.empty((batch, new_tokens), dtype=torch.long, device=prompts.device)
    if mark is not None:
        mark(PREFILL)
    chunks = torch.split(prompts, prefill_chunk, dim=-1) if prefill_chunk else (prompts,)
    for chunk in chunks:
        logits = model(input_ids=chunk, **forward).logits
    out[:, 0] = _next_tokens(logits)
    del logits  # the prefill's logits go before the first decode forward, as generate's `del outputs`
    decoded = new_tokens - 1 if decode_steps is None else min(decode_steps, new_tokens - 1)
    for i in range(1, decoded + 1):
        if mark is not None:
            mark(DECODE)
        logits = model(input_ids=out[:, i - 1 : i], **forward).logits
        out[:, i] = _next_tokens(logits)
        del logits
    if mark is not None:
        mark(END)
    return out


def _layer_lengths(config: Any, max_cache_len: int) -> list[int]:
    """The tokens each layer of a StaticCache of `max_cache_len` holds, as transformers makes it for `config`
    (a sliding-window layer at most its window); no tensor is made."""
    text = config.get_text_config(decoder=True)
    layers = StaticCache(config=text, max_cache_len=max_cache_len).layers
    # transformers types .layers as any kind of cache layer; a StaticCache's all have max_cache_len
    return [int(layer.max_cache_len) for layer in layers]  # type: ignore[union-attr]


def _head_shape(config: Any) -> tuple[int, int]:
    """(KV heads, head width) of the config's attention. Raises ValueError where the config does not say them."""
    text = config.get_text_config(decoder=True)
    heads = getattr(text, "num_attention_heads", None)
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or (text.hidden_size // heads if heads else None)
    if not kv_heads or not head_dim:
        raise ValueError(f"{type(config).__name__} does not say its attention heads and head width")
    return int(kv_heads), int(head_dim)


def static_cache_bytes(config: Any, dtype: torch.dtype, batch: int, max_cache_len: int) -> int:
    """The bytes a StaticCache of `max_cache_len` tokens holds for `batch` sequences of a model with this config in
    `dtype`: keys and values of every layer, each as long as transformers makes it (a sliding-window layer at most
    its window). Raises ValueError for a config that does not say its attention heads."""
    kv_heads, head_dim = _head_shape(config)
    size = torch.empty((), dtype=dtype).element_size()
    return sum(2 * batch * kv_heads * tokens * head_dim * size for tokens in _layer_lengths(config, max_cache_len))


def kv_bytes_per_token(config: Any, dtype: torch.dtype) -> int:
    """The KV-cache bytes one token of one sequence adds (2 x KV heads x head width x the dtype's bytes in every
    layer that keeps the whole context): the cache's cost per token of context. Sliding-window layers, which hold at
    most their window whatever the context, are left out. Raises ValueError as static_cache_bytes does."""
    kv_heads, head_dim = _head_shape(config)
    size = torch.empty((), dtype=dtype).element_size()
    # a layer that keeps the whole context holds one more token when the context grows by one
    short, long = _layer_lengths(config, 1 << 20), _layer_lengths(config, (1 << 20) + 1)
    growing = sum(1 for a, b in zip(short, long) if b > a)
    return 2 * growing * kv_heads * head_dim * size


class GenerateTask(TrainTask):
    """Greedy generation with a static KV cache by a causal LM whose weights are in the precision's dtype.

    `n` in make_batch is the number of concurrent sequences (axis "batch") or the prompt length (axis "seq_len",
    `rows` sequences). No optimizer: start() and stop() only switch the model to eval; the cache lives and dies
    inside each generation. `mark` and `decode_steps` are handed to greedy_generate (set by whoever times or
    traces the step).
    """

    unit = "tokens"

    def __init__(
        self,
        model: torch.nn.Module,
        settings: GenerationSettings,
        device: torch.device,
        vocab: int,
        axis: str = "batch",
        rows: int = 1,
    ) -> None:
        if axis == "batch" and settings.prompt_len is None:
            raise ValueError("a generation over the batch needs a prompt length")
        super().__init__(model, {"name": "none"}, device, units_per_sample=float(settings.new_tokens))
        self.settings, self.vocab, self.axis, self.rows = settings, int(vocab), axis, int(rows)
        self.mark: Mark | None = None
        self.decode_steps: int | None = None
        self.dtype = next(model.parameters()).dtype
        model.eval()

    def shape(self, n: int) -> tuple[int, int]:
        """(sequences, prompt tokens) of a generation at n."""
        return (n, int(self.settings.prompt_len or 0)) if self.axis == "batch" else (self.rows, n)

    def units_at(self, n: int) -> float:
        """The new tokens one generation at n makes (sequences x N)."""
        return float(self.shape(n)[0] * self.settings.new_tokens)

    def phase_tokens(self, n: int) -> tuple[int, int]:
        """(prompt tokens the prefill reads, tokens the decode forwards make) of one generation at n: the first new
        token comes from the prefill."""
        sequences, prompt = self.shape(n)
        return sequences * prompt, sequences * (self.settings.new_tokens - 1)

    def kv_cache_bytes(self, n: int) -> int:
        """The bytes of the static KV cache of one generation at n (static_cache_bytes)."""
        sequences, prompt = self.shape(n)
        return static_cache_bytes(self.model.config, self.dtype, sequences, prompt + self.settings.new_tokens)

    def decode_shapes_repeat(self) -> bool:
        """Whether every decode forward of a generation runs the same ops on the same shapes: no layer of the cache
        slides (a sliding-window layer takes another path once its window is full). What a trace that runs only a
        few decode forwards, and repeats the last, relies on (predict/trace.py)."""
        config = model_config(self.model).get_text_config(decoder=True)
        layers = StaticCache(config=config, max_cache_len=2).layers
        return not any(getattr(layer, "is_sliding", False) for layer in layers)

    @contextmanager
    def cut_decode(self, decode_steps: int | None) -> Iterator[bool]:
        """Within: each generation stops after the prefill and `decode_steps` decode forwards (a search trial,
        core/run_length.GENERATE_SEARCH_DECODE), where every decode forward has the same shapes; whole generations
        where the cache slides, or with None. Yields whether it cuts; whole generations again after."""
        cut = decode_steps is not None and self.decode_shapes_repeat()
        if decode_steps is not None and cut:
            self.decode_steps = int(decode_steps)
        try:
            yield cut
        finally:
            if cut:
                self.decode_steps = None

    def make_batch(self, n: int) -> torch.Tensor:
        """Random prompts (sequences, P) of token ids: every position a real token, no padding."""
        return torch.randint(0, self.vocab, self.shape(n), device=self.device)

    def start(self) -> None:
        self.model.eval()

    def stop(self) -> None:
        self.optimizers = []

    def train_step(self, batch: Any, amp: Any) -> torch.Tensor:
        raise RuntimeError("a generation workload has no training step: use --mode generate")

    def infer(self, batch: torch.Tensor) -> Any:
        return self.model(input_ids=batch, use_cache=False).logits

    def generate_step(self, batch: torch.Tensor, amp: Any = None) -> torch.Tensor:
        """One whole generation of the prompts `batch` (no autocast: the weights are in the precision's dtype)."""
        with torch.inference_mode():
            return greedy_generate(
                self.model, batch, self.settings.new_tokens, self.settings.prefill_chunk, self.mark, self.decode_steps
            )

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        config = self.model.config
        info.update(
            optimizer="none",
            optimizer_fused=None,
            attention=getattr(config, "_attn_implementation", None),
            axis=self.axis,
            batch=self.rows if self.axis == "seq_len" else None,
            weights_dtype=str(self.dtype).replace("torch.", ""),
            prompt_len=self.settings.prompt_len,
            new_tokens=self.settings.new_tokens,
            prefill_chunk=self.settings.prefill_chunk,
            kv_bytes_per_token=kv_bytes_per_token(config, self.dtype),
            cache="static",
        )
        return info
