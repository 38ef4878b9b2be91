"""predict --compare: why a scan cannot be set beside the prediction, said, not left out in silence.

A scan of llama-1b+ckpt compared with a prediction of llama-1b names the option that makes them alike
(--checkpointing); a scan with no row for a precision asked, or whose precision ended in an error before any trial,
gets a note saying so (and an Error line where no precision asked can be compared at all).
"""

from __future__ import annotations

from typing import Any, Sequence

from memprobe.core.process.outcomes import LIMIT, OOM

# What each part of a variant's name (core/variants.VariantRequest.suffix) is asked with on the command line
_OPTIONS = {
    "ckpt": "--checkpointing",
    "lora": "--lora {}",
    "seq": "--seq-len {}",
    "maxseq@b": "--search seq-len --batch {}",
}


def _option(part: str) -> str:
    for prefix, option in _OPTIONS.items():
        if part.startswith(prefix) and (part[len(prefix) :].isdigit() or part == prefix):
            return option.format(part[len(prefix) :])
    return f"+{part}"


def variant_hint(scanned: str, predicted: Sequence[str]) -> str:
    """How to predict what the scan `scanned` measured, where it is a variant of a predicted workload (or the other
    way round): '; add --checkpointing' or '; drop --lora 16'; '' where the names share no base."""
    base, *parts = scanned.split("+")
    for name in predicted:
        own, *mine = name.split("+")
        if own != base:
            continue
        add = [_option(p) for p in parts if p not in mine]
        drop = [_option(p) for p in mine if p not in parts]
        said = ([f"add {' '.join(add)}"] if add else []) + ([f"drop {' '.join(drop)}"] if drop else [])
        if said:
            return f"; to predict what it measured, {' and '.join(said)}"
    return ""


def _comparable(p: Any) -> bool:
    """Whether a scan's precision result has something a prediction can be set beside: a capacity (for the max
    batch) or a trial that fitted or ran out of memory (for the peaks)."""
    trials = [*p.attempts, *p.checks]
    return bool(p.capacity_bytes) or any(a.fits or a.outcome in (OOM, LIMIT) for a in trials)


def comparison_gaps(result: Any, precisions: Sequence[str]) -> list[str]:
    """For each precision asked that the scan `result` cannot be compared in, why (one clause each)."""
    gaps = []
    held = ", ".join(result.precisions) or "none"
    for precision in precisions:
        got = result.precisions.get(precision)
        if got is None:
            gaps.append(f"it has no {precision} result (it holds {held})")
        elif not _comparable(got):
            why = got.error.splitlines()[0][:120] if got.error else f"status {got.status}"
            gaps.append(f"its {precision} ended before any trial to compare with ({why})")
    return gaps
