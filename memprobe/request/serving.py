"""The serving options of a command (--mode and a generation's --prompt-len, --new-tokens, --prefill-chunk), declared
once here and taken as fields by the requests that have them (ModelRequest, PlanRequest, ServingRequest: guide's).

No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from memprobe.core.workload import option_bounds as bounds
from memprobe.request.checks import RequestError
from memprobe.request.option import option

SERVING_MODES = ("train", "generate")  # plan and guide: training, or serving (greedy generation with a KV cache)


def prompt_len_option() -> Any:
    """--prompt-len, as every command that takes it declares it."""
    return option(
        None,
        bound=bounds.PROMPT_LEN,
        help="--mode generate: tokens in each random prompt (default 2048, or what the model's positions leave).",
    )


def new_tokens_option() -> Any:
    """--new-tokens, as every command that takes it declares it."""
    return option(
        None, bound=bounds.NEW_TOKENS, help="--mode generate: new tokens each sequence generates (default 128)."
    )


def prefill_chunk_option() -> Any:
    """--prefill-chunk, as every command that takes it declares it."""
    return option(
        None,
        bound=bounds.PREFILL_CHUNK,
        help="--mode generate: prefill the prompt this many tokens at a time through the KV cache, as serving engines "
        "do (default: the whole prompt in one forward).",
    )


def serving_mode_option() -> Any:
    """--mode of plan and guide: training (the default) or serving a generation."""
    return option(
        "train",
        "--mode",
        choices=SERVING_MODES,
        help="generate: the concurrent sequences of a greedy generation with a static KV cache that fit (as `scan "
        "--mode generate`), measured where a result file holds that model, P, N, chunk and precision, predicted "
        "elsewhere, with decode tokens/s where measured.",
    )


@dataclass(frozen=True)
class ServingRequest:
    """What `memprobe guide` is asked about serving: the mode and the generation's P, N and C (None: any in the
    result files)."""

    mode: str = serving_mode_option()
    prompt_len: int | None = prompt_len_option()
    new_tokens: int | None = new_tokens_option()
    prefill_chunk: int | None = prefill_chunk_option()

    def check(self) -> None:
        """Refuse a mode that is none of SERVING_MODES, and generation options without --mode generate. Raises
        RequestError."""
        from memprobe.request.option import check_bounds

        check_bounds(self)
        if self.mode not in SERVING_MODES:
            raise RequestError(f"must be one of {', '.join(SERVING_MODES)}, got '{self.mode}'", "--mode")
        given = [f for f, v in self.asked().items() if v is not None]
        if self.mode != "generate" and given:
            raise RequestError(f"{', '.join(given)}: only with --mode generate (this is --mode {self.mode})")

    def asked(self) -> dict[str, int | None]:
        """The generation settings asked, by option."""
        return {"--prompt-len": self.prompt_len, "--new-tokens": self.new_tokens, "--prefill-chunk": self.prefill_chunk}

    def matches(self, settings: Mapping[str, Any] | None) -> bool:
        """Whether a generation's settings (a result's workload params `generate`) are the ones asked (None: any)."""
        if settings is None:
            return False
        pairs = (
            ("prompt_len", self.prompt_len),
            ("new_tokens", self.new_tokens),
            ("prefill_chunk", self.prefill_chunk),
        )
        return all(want is None or settings.get(key) == want for key, want in pairs)
