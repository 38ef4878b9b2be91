"""When even n = 1 does not train (or generate): the memory a step would need (traced) and which settings would fit.

No torch here: the trace runs in a child process (predict/need.py) when a scan found nothing that fits. The
answer is stored in the precision's settings under "nothing_fits" and said in one plain paragraph.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Callable, Mapping, Sequence

from memprobe.core.process.child import Child
from memprobe.core.process.protocol import NeedAnswer, NeedRequest, ProtocolError, read_message
from memprobe.core.records.results import ScanResult
from memprobe.core.records.settings import NothingFits
from memprobe.core.text.units import gib
from memprobe.core.workload.registry import Workload
from memprobe.core.workload.variants import LLM_FAMILIES, VariantError, VariantRequest, apply_variant

# What an LLM user tries next, in order of how much they change the training.
ALTERNATIVES = (
    ("--checkpointing", VariantRequest(checkpointing=True)),
    ("--lora 16", VariantRequest(lora=16)),
    ("--lora 16 --checkpointing", VariantRequest(lora=16, checkpointing=True)),
)

NeedFn = Callable[[Workload, str], int]


@dataclass
class Alternative:
    """A setting tried on the trace: what it would need at n = 1 and whether that fits the capacity."""

    flags: str
    need_bytes: int | None
    fits: bool | None
    error: str = ""


@dataclass
class Shortfall:
    """Why nothing trains in one precision: the capacity, the traced need, the alternatives."""

    precision: str
    capacity_bytes: int | None
    need_bytes: int | None
    error: str = ""
    alternatives: list[Alternative] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self, workload: str, gpu: str, n_name: str, mode: str = "train") -> str:
        """One paragraph for the user (`mode` "generate": a generation's, else a training step's)."""
        room = f" ({gib(self.capacity_bytes)} GiB usable)" if self.capacity_bytes else ""
        if mode == "generate":
            return self._describe_generation(workload, gpu, room)
        text = f"{workload} {self.precision}: nothing trains on {gpu}{room}, not even {n_name} 1."
        if self.need_bytes is not None:
            text += (
                f" A trial at {n_name} 1 would need about {gib(self.need_bytes)} GiB "
                "(predicted from a fake-tensor trace, not measured)."
            )
        elif self.error:
            text += f" (Its need could not be traced: {self.error})"
        fitting = [a for a in self.alternatives if a.fits]
        others = [a for a in self.alternatives if a.fits is False]
        if fitting:
            text += (
                " Predicted to fit at 1: " + "; ".join(f"{a.flags} ({gib(a.need_bytes)} GiB)" for a in fitting) + "."
            )
        if others:
            text += " Still too big: " + "; ".join(f"{a.flags} ({gib(a.need_bytes)} GiB)" for a in others) + "."
        text += (
            " Sharding the weights, gradients and optimizer state over several GPUs: `memprobe predict --gpus N "
            "--strategy fsdp` predicts it, `memprobe scan --gpus N --strategy fsdp` measures it."
        )
        return text

    def _describe_generation(self, workload: str, gpu: str, room: str) -> str:
        text = f"{workload} {self.precision}: nothing generates on {gpu}{room}, not even 1 sequence."
        if self.need_bytes is not None:
            text += (
                f" A generation of 1 sequence would need about {gib(self.need_bytes)} GiB (the weights, its static KV"
                " cache and the prefill; predicted from a fake-tensor trace, not measured)."
            )
        elif self.error:
            text += f" (Its need could not be traced: {self.error})"
        return text + (
            " A shorter context (--prompt-len, --new-tokens: the KV cache and the prefill grow with it) or a chunked"
            " prefill (--prefill-chunk C) needs less; `memprobe predict --mode generate --gpu NAME` says which card"
            " holds it."
        )


NEED_TIMEOUT_S = 600.0  # a trace of the largest LLMs at n = 1 takes about a minute on a laptop


class NeedError(RuntimeError):
    """The need could not be traced (the child's error, or the child itself failed)."""


NEED_COMMAND = (sys.executable, "-m", "memprobe.predict.need")


def _default_need(
    workload: Workload,
    precision: str,
    env: Mapping[str, str] | None = None,
    command: Sequence[str] = NEED_COMMAND,
    mode: str = "train",
) -> int:
    """Trace the need in a child (`command`: `python -m memprobe.predict.need`, CUDA hidden): probe does not import
    predict, and the trace's memory and imports stay out of the scan's process. `env`: variables the child gets on top
    of this process's environment (ScanOptions.env). Raises NeedError."""
    with Child.start(
        command,
        env={**(env or {}), "CUDA_VISIBLE_DEVICES": ""},
        watched=True,
        log_prefix="memprobe-need-",
    ) as child:
        try:
            said = child.communicate(NeedRequest(workload, precision, mode), NEED_TIMEOUT_S)
        except TimeoutError:
            raise NeedError(f"the trace took more than {NEED_TIMEOUT_S:.0f} s") from None
        lines = [line for line in said if line.strip()]  # the answer is the last: a user's build may print
        if child.returncode != 0 or not lines:
            tail = child.log_tail(1) or "no output"
            raise NeedError(f"the trace process ended with exit code {child.returncode}: {tail}")
    try:
        answer = read_message(lines[-1], NeedAnswer)
    except ProtocolError as exc:
        raise NeedError(f"the trace process answered no need: {exc}") from None
    if answer.error or answer.need_bytes is None:
        raise NeedError(answer.error or "the trace process answered no need")
    return int(answer.need_bytes)


def _alternatives(workload: Workload, precision: str, capacity: int | None, need: NeedFn) -> list[Alternative]:
    if workload.family not in LLM_FAMILIES:
        return []
    found = []
    seen = [workload.params]
    for flags, request in ALTERNATIVES:
        try:
            variant = apply_variant(workload, request, [precision])
        except VariantError:
            continue  # e.g. LoRA in fp32
        if variant.params in seen:
            continue  # already part of what did not fit, or the same as an earlier alternative
        seen.append(variant.params)
        try:
            bytes_needed = need(variant, precision)
        except Exception as exc:  # noqa: BLE001 - a failed trace is reported, not raised
            found.append(Alternative(flags, None, None, f"{type(exc).__name__}: {exc}"[:200]))
            continue
        found.append(Alternative(flags, bytes_needed, None if capacity is None else bytes_needed <= capacity))
    return found


def _n_name(workload: Workload) -> str:
    return "a sequence length of" if str(workload.params.get("axis", "batch")) == "seq_len" else "batch"


def _gpu(result: ScanResult) -> str:
    return result.gpu_name(unknown="this device")


def explain_precision(
    result: ScanResult,
    precision: str,
    workload: Workload,
    need: NeedFn | None = None,
    env: Mapping[str, str] | None = None,
) -> str | None:
    """If n = 1 did not train in `precision` of `result`, trace what it would need and which memory-saving settings
    would fit, store that in the precision's settings.nothing_fits and return its paragraph; None otherwise.
    `need` traces it (default: a child process, given `env` on top of this process's environment). Never raises for
    a failed trace (the paragraph says it failed)."""
    p = result.precisions[precision]
    if p.status != "done" or p.max_batch != 0:
        return None
    need = need or partial(_default_need, env=env, mode=result.mode)
    try:
        shortfall = Shortfall(precision, p.capacity_bytes, need(workload, precision))
    except Exception as exc:  # noqa: BLE001
        shortfall = Shortfall(precision, p.capacity_bytes, None, f"{type(exc).__name__}: {exc}"[:200])
    if result.mode != "generate":  # the alternatives (checkpointing, LoRA) are training settings
        shortfall.alternatives = _alternatives(workload, precision, p.capacity_bytes, need)
    p.settings.nothing_fits = NothingFits.from_dict(shortfall.to_dict())
    return shortfall.describe(workload.name, _gpu(result), _n_name(workload), result.mode)


def explain_nothing_fits(result: ScanResult, workload: Workload, need: NeedFn | None = None) -> list[str]:
    """explain_precision for every precision of `result`; returns one paragraph per precision where nothing trains.
    Writes no file (the scan's pipeline writes the result)."""
    lines = [explain_precision(result, precision, workload, need) for precision in result.precisions]
    return [line for line in lines if line is not None]


def described(result: ScanResult, workload: Workload) -> list[str]:
    """The paragraphs of the explanations a scan recorded (settings.nothing_fits), for printing."""
    lines = []
    for p in result.precisions.values():
        stored = p.settings.nothing_fits
        if stored is not None:
            shortfall = Shortfall(
                **{**stored.to_dict(), "alternatives": [Alternative(**a) for a in stored.alternatives or []]}
            )
            lines.append(shortfall.describe(workload.name, _gpu(result), _n_name(workload), result.mode))
    return lines
