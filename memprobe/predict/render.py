"""`memprobe predict`'s text: per precision the fitted line and the predicted max batch (or max sequence
length) per memory size, then, beside a scan, predicted vs measured. Every figure is labelled predicted."""

from __future__ import annotations

import math
import textwrap

from memprobe.core.text.units import gib
from memprobe.predict.edge_search import MAX_SEARCH_BATCH
from memprobe.predict.safe import SAFE_MARGIN
from memprobe.predict.summary import Prediction


def _pct(pred: float | None, meas: float | None) -> str:
    if pred is None or not meas:
        return "-"
    return f"{(pred / meas - 1) * 100:+.2f}%"


WIDTH = 120  # the lines added under the table wrap here, as a terminal of that width shows them


def _per_sample(nbytes: float) -> str:
    """GiB per sample, to 3 decimals; a slope below 0.001 GiB to 2 significant digits, not shown as 0."""
    value = nbytes / 2**30
    if not 0 < value < 0.0005:
        return f"{value:.3f}"
    return f"{value:.{1 - math.floor(math.log10(value))}f}"  # 0.00032, 0.0000021: two digits that are not 0


def _cell(found: int, capped: bool, safe: int | None = None) -> str:
    """A predicted max batch and the safe one beside it, even where the two are equal (a run whose memory steps
    with the allocator's segments can fit the same batch with the margin left); one the search stopped at (its cap)
    says so: the real one is that or more."""
    if capped:
        return f"{found}+ (cap)"
    return f"{found} (safe {safe})" if safe is not None and found > 0 else str(found)


def _no_edge_lines(pred: Prediction, cannot_train: dict[str, list[str]], n: str) -> list[str]:
    """A line per precision whose max batch is not an edge: the search's cap ("N or more"), or 0 (batch 1 does
    not fit), each with the memory its trial needs (peak reserved in the allocator model, no limit); and where the
    memory does not grow with the batch at all, the likely cause."""
    lines = []
    for name, p in pred.precisions.items():
        sizes = [s for s in pred.sizes if name not in cannot_train.get(s.label, ())]
        capped = [s for s in sizes if s.label in p.capped]
        if capped and MAX_SEARCH_BATCH in p.needs:
            lines.append(
                f"{name}: the search stops at {n} {MAX_SEARCH_BATCH}, which fits {_usable(capped)}: the max {n} is "
                f"{MAX_SEARCH_BATCH} or more ({MAX_SEARCH_BATCH} needs {gib(p.needs[MAX_SEARCH_BATCH], 2)} GiB)."
            )
        reserved = {r for _a, r in p.peaks.values()}
        if n == "batch" and len(p.peaks) > 1 and len(reserved) == 1:  # the same peak at every batch replayed
            lines.append(
                f"{name}: the trial's memory does not grow with the batch (0 bytes per sample): does the model's "
                "make_batch(n) make n samples?"
            )
        for label, why in p.kernel_limit.items():
            lines.append(
                f"{name}, {label}: {n} {p.max_batch[label] + 1} would stop at a CUDA kernel's limit, not at memory: "
                f"{why} (integer out of range); the max {n} is the one below it."
            )
        nothing = [s for s in sizes if p.max_batch[s.label] == 0]
        if nothing and 1 in p.needs:
            lines.append(
                f"{name}: {n} 1 needs {gib(p.needs[1], 2)} GiB, more than {_usable(nothing)} holds: max {n} 0."
            )
    return [wrapped for line in lines for wrapped in textwrap.wrap(line, WIDTH)] + ([""] if lines else [])


def _usable(sizes: list) -> str:
    """ "8GiB (6.20 GiB usable)", listed for several sizes."""
    return ", ".join(f"{s.label} ({gib(s.capacity_bytes, 2)} GiB usable)" for s in sizes)


def render(pred: Prediction) -> str:
    """The prediction as text: per precision the fitted line and the predicted max batch per memory size,
    then (with a comparison) predicted vs measured. Every figure is labelled predicted. A precision a card cannot
    train in (Prediction.cannot_train: tf32 and bf16 before compute capability 8.0) shows "-" and a line says why,
    as `plan` and `guide` leave such settings out."""
    cannot_train = pred.cannot_train
    lengths = pred.axis == "seq_len"
    n = "length" if lengths else "batch"
    lines = _header(pred) + _table(pred, cannot_train, lengths) + _safe_and_mode_notes(pred, n)
    lines += _no_edge_lines(pred, cannot_train, n)
    lines += [
        f"{label}: cannot train in {', '.join(names)} (they need compute capability 8.0 or newer): no max batch is given."
        for label, names in cannot_train.items()
        if any(n in pred.precisions for n in names)
    ]
    lines += _line_note(pred, lengths)
    if pred.comparison:
        lines += _comparison(pred, n)
    lines += [""] + [f"note: {n}" for n in pred.notes]
    return "\n".join(lines) + "\n"


def _header(pred: Prediction) -> list[str]:
    """What was predicted and how, the usable memory of each size, and the libraries' versions."""
    where = f" per GPU on {pred.world}" if pred.world else ""
    trial = {
        "train": f"(1 warm-up + {pred.steps - 1} steps, optimizer state included)",
        "infer": f"of inference ({pred.steps} forward passes under inference_mode)",
        "generate": f"of generation ({pred.steps} whole greedy generations with a static KV cache, as a scan's fit)",
    }[pred.mode]
    lines = [
        f"memprobe predict: {pred.workload}{where} -- PREDICTED, not measured: a fake-tensor trace of one trial "
        f"{trial} with the CUDA kernels of {pred.target}, "
        f"replayed through a model of the CUDA caching allocator; {pred.seconds:.1f} s on this CPU."
    ]
    if any(s.how for s in pred.sizes):
        lines += [
            f"Usable memory, {s.label}: {gib(s.capacity_bytes, 2)} of {gib(s.memory_bytes, 2)} GiB; {s.how}."
            for s in pred.sizes
        ]
    else:
        lines.append(
            "Usable memory = the memory given: the CUDA context and the driver's reservation are not subtracted, so "
            "these predictions are optimistic."
        )
    if pred.versions:
        lines.append(
            "Libraries: " + ", ".join(f"{k} {v}" for k, v in pred.versions.items()) + " (their versions can change "
            "a model's code path and so its memory)."
        )
    if pred.version_note:
        lines.append(f"note: {pred.version_note}.")
    return lines


def _table(pred: Prediction, cannot_train: dict[str, list[str]], lengths: bool) -> list[str]:
    """The table: per precision the fitted line and the predicted max batch (or length) per memory size."""
    from tabulate import tabulate

    per = "MiB/token" if lengths else "GiB/sample"
    what = "length (tokens)" if lengths else "batch"
    if pred.mode == "generate":
        what = "prompt (tokens)" if lengths else "concurrent sequences"
    headers = ["precision", "predicted static GiB", f"predicted {per}"] + [
        f"{s.label}: predicted max {what}" for s in pred.sizes
    ]
    rows = []
    for name, p in pred.precisions.items():
        m = p.model_reserved
        slope = (f"{m.per_sample_bytes / 2**20:.3f}" if lengths else _per_sample(m.per_sample_bytes)) if m else "-"
        cells = [
            "-"
            if name in cannot_train.get(s.label, ())
            else _cell(p.max_batch[s.label], s.label in p.capped, p.safe_max_batch.get(s.label))
            for s in pred.sizes
        ]
        rows.append([name, gib(m.static_bytes, 2) if m else "-", slope] + cells)
    # the slope as written (tabulate would print 0.0000021 as 2.1e-06), the others right-aligned as numbers are
    align = ["left"] + ["right"] * (len(headers) - 1)
    if not rows:  # tabulate cannot take per-column options for a table without rows
        return []
    return ["", tabulate(rows, headers=headers, tablefmt="github", disable_numparse=[2], colalign=align), ""]


def _safe_and_mode_notes(pred: Prediction, n: str) -> list[str]:
    """What the safe batch is (where one is given), and what is known of the accuracy in infer and generate mode."""
    lines: list[str] = []
    any_safe = any(
        s.label in p.safe_max_batch and p.max_batch[s.label] > 0 and s.label not in p.capped
        for p in pred.precisions.values()
        for s in pred.sizes
    )
    if any_safe:
        lines.append(
            f"safe: the largest {n} that leaves {pred.safe_margin:.0%} of the usable memory unused, the one to run. "
            f"The max {n} is the best estimate of the edge; on training scans of models memprobe was not tuned on it "
            "was above the measured one in some cases by up to 4.5%, the safe one never (reports/zoo/accuracy.md)."
        )
        if pred.safe_margin != SAFE_MARGIN:
            lines.append(
                f"safe under fsdp: {pred.safe_margin:.0%}, not {SAFE_MARGIN:.0%}: FSDP2's collectives allocate on "
                "streams of their own, whose blocks the allocator model does not keep apart; on 2 and 4 H200s the "
                "per-GPU max batch was above the measured one by up to 6.7% (reports/calibration_multi_gpu.md)."
            )
    if pred.mode == "infer":
        lines.append(
            "note: on the held-out zoo's 24 inference scans on an H200 the predicted max batch was within 0.14% of the "
            "measured B at the median and above it in 2, by up to 2.9% (swin_base bf16), the safe batch in none "
            "(reports/zoo/accuracy.md). At batches of thousands the allocator's cache decides the edge, and the "
            "batches that fit near it can alternate with ones that do not: run the safe batch."
        )
    if pred.mode == "generate":
        lines.append(
            "note: generation predictions model the static KV cache (allocated for prompt + new tokens) and the "
            "prefill's transients of the whole batch; they are not yet checked against scans on a GPU "
            "(benchmarks/gpu/generate.sh): scan on the card before relying on one."
        )
    return lines


def _line_note(pred: Prediction, lengths: bool) -> list[str]:
    """How the table's line and max were found."""
    if lengths:
        return [
            "static / per token: least-squares line through the predicted peak reserved bytes at lengths "
            "2, 4, 8, ... up to the longest edge; max length: the longest sequence whose trial fits the "
            "usable memory in the allocator model (not the line)."
        ]
    # where batch 2 does not fit (PrecisionTraces.small) the line is through the two batches traced
    small = [name for name, p in pred.precisions.items() if sorted(p.peaks) == [1, 2]]
    at = "2, 4, 8, ... up to the largest edge"
    if small:
        at = "1 and 2" if len(small) == len(pred.precisions) else f"{at} ({', '.join(small)}: 1 and 2)"
    return [
        f"static / per sample: least-squares line through the predicted peak reserved bytes at batches {at}; "
        "max batch: the largest batch whose trial fits the usable memory in the allocator model (not the line)."
    ]


def _comparison(pred: Prediction, n: str) -> list[str]:
    """Predicted vs measured: each compared trial, then the max batch against the scan's."""
    from tabulate import tabulate

    lines = [
        "",
        f"Predicted vs measured ({pred.compared_with}); predictions replayed with the scan's allocator capacity:",
        "",
    ]
    crow = []
    for r in pred.comparison:
        measured_ok = r.measured_outcome == "fit"
        measured = r.measured_outcome
        if not measured_ok and r.measured_trial_fit:
            measured = "trial fit; timed run oom"  # a fresh check goes on to the timed steps after the trial
        crow.append(
            [
                r.precision,
                r.batch,
                r.where,
                measured,
                "fit" if r.predicted_fits else f"oom ({gib(r.predicted_request, 2)} GiB request)",
                gib(r.measured_allocated, 2),
                gib(r.predicted_allocated, 2),
                _pct(r.predicted_allocated, r.measured_allocated) if measured_ok else "(oom: partial)",
                gib(r.measured_reserved, 2),
                gib(r.predicted_reserved, 2),
                _pct(r.predicted_reserved, r.measured_reserved) if measured_ok else "(oom: partial)",
            ]
        )
    lines.append(
        tabulate(
            crow,
            headers=[
                "precision",
                n,
                "trial",
                "measured",
                "predicted",
                "peak alloc GiB measured",
                "predicted",
                "error",
                "peak reserved GiB measured",
                "predicted",
                "error",
            ],
            tablefmt="github",
        )
    )
    if pred.max_batch_comparison:
        lines += ["", _max_batch_table(pred, n)]
    return lines


def _max_batch_table(pred: Prediction, n: str) -> str:
    """The predicted max batch against the scan's measured one, per precision, with how the scan found it."""
    from tabulate import tabulate

    erow = []
    for e in pred.max_batch_comparison:
        err = f"{(e.predicted / e.measured - 1) * 100:+.1f}%" if e.measured else "-"
        erow.append(
            [
                e.precision,
                gib(e.capacity_bytes, 2),
                e.predicted,
                e.measured,
                err,
                f"{e.search[0]}/{e.search[1]}",
                f"{e.fresh[0]}/{e.fresh[1]}",
                ", ".join(map(str, e.trial_fits_fresh)) or "-",
            ]
        )
    return tabulate(
        erow,
        headers=[
            "precision",
            "capacity GiB",
            f"predicted max {n}",
            f"measured max {n}",
            "error",
            "search fits/fails",
            "fresh fits/fails",
            "3-step trial fit in a fresh process at",
        ],
        tablefmt="github",
    )
