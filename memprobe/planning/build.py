"""Build a plan: the lever settings of a workload, each measured (result files of the card) or else predicted."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from memprobe.core.cards.cardnames import CardNameError, ResolvedCard, resolve_card
from memprobe.core.cards.catalog import Card, Catalog, default_catalog
from memprobe.core.estimates.plan import PREDICTED, Plan, PlanError, check_global_batch, make_plan
from memprobe.core.records.results import ResultFileError, ScanResult, load_results
from memprobe.core.workload.registry import Workload
from memprobe.planning.levers import settings as lever_settings
from memprobe.planning.measured import measured, of_card, same_definition
from memprobe.planning.predicted import predicted
from memprobe.predict.progress import TraceProgress

NO_RESULTS_NOTE = (
    "no result files given (--results): every row is predicted. memprobe ships no measurements; give "
    "the folders of your scans (or the repository's reports/) to plan from measured curves"
)


def _held(loaded: Sequence[tuple[Path, ScanResult]], most: int = 4) -> str:
    """What result files hold, for a message: "resnet50 fp16 on NVIDIA H200, ..." (at most `most`, then a count)."""
    held = list(
        dict.fromkeys(f"{r.workload.name} {','.join(r.precisions) or '-'} on {r.gpu_name()}" for _p, r in loaded)
    )
    more = f" and {len(held) - most} more" if len(held) > most else ""
    return ", ".join(held[:most]) + more


def load_plan_results(
    results: Sequence[str | Path], on_skip: Callable[[ResultFileError], None] | None = None
) -> list[tuple[Path, ScanResult]]:
    """The result files among `results` (files or folders; none: an empty list), a file in a folder that is not a
    result file given to `on_skip`. Raises PlanError for a result file named that cannot be read, or `results` that
    hold none."""
    if not results:
        return []
    skipped: list[ResultFileError] = []
    try:
        loaded = load_results(list(results), on_skip=skipped.append, strict_files=True)
    except ResultFileError as exc:
        raise PlanError(str(exc)) from None
    for one in skipped:
        if on_skip is not None:
            on_skip(one)
    if not loaded:
        left = f" ({len(skipped)} skipped)" if skipped else ""
        raise PlanError(f"--results: no memprobe result files in {', '.join(map(str, results))}{left}")
    return loaded


def plan_card(card_name: str, catalog: Catalog) -> ResolvedCard:
    """The catalog card a plan is for. Raises PlanError (one line) for a name that names none."""
    try:
        return resolve_card(card_name, catalog)
    except CardNameError as exc:
        raise PlanError(str(exc)) from None


def build_plan(
    workload: Workload,
    card_name: str,
    global_batch: int | None = None,
    precisions: Sequence[str] = ("fp32", "fp16", "bf16"),
    seq_len: int | None = None,
    lora: int | None = None,
    optimizers: Sequence[str] = (),
    results: Sequence[str | Path] = (),
    workers: int = 1,
    progress: TraceProgress | None = None,
    gpus: int = 1,
    strategy: str = "ddp",
    on_skip: Callable[[ResultFileError], None] | None = None,
) -> Plan:
    """The plan for `workload` on the card `card_name` reaching `global_batch` (None: one micro-batch per step).

    A setting is measured where a finished result of it on that card is among `results` (files or folders), else
    predicted; a file in a folder that is not a result file goes to `on_skip`. With `gpus` > 1 the plan is for that
    many cards training data-parallel under `strategy`: the micro-batch is per GPU, measured only by a scan of that
    many GPUs under that strategy (`scan --gpus N`, its per-GPU B and curve), predicted per GPU otherwise; a global
    step is gpus x micro-batch samples, and samples/s are the group's. Raises PlanError for an unknown card or
    strategy, fewer than 1 GPU, a global batch out of range, a lever the workload lacks, a result file named that
    cannot be read, `results` that hold no result file or none that measured this workload on this card (they would
    change nothing); memprobe.predict.trace.PredictError when a setting cannot be predicted.
    """
    check_global_batch(global_batch)
    _check_group(workload, gpus, strategy)
    catalog = default_catalog()
    resolved = plan_card(card_name, catalog)
    card = resolved.card
    chosen = lever_settings(workload, precisions, seq_len, lora, optimizers)
    unsupported = sorted({s.levers.precision for s in chosen if not card.supports(s.levers.precision)})
    chosen = [s for s in chosen if card.supports(s.levers.precision)]
    notes = [resolved.note] if resolved.note else []
    if unsupported:
        notes.append(
            f"the {card.name} cannot train in {', '.join(unsupported)} (compute capability "
            f"{card.compute_capability}): left out"
        )
    loaded = load_plan_results(results, on_skip)
    if not results:
        notes.append(NO_RESULTS_NOTE)
    found = {id(s): measured(s, loaded, card, catalog, gpus, strategy) for s in chosen}
    if loaded and not any(found.values()):  # --results would change nothing: every row predicted
        notes.append(_unused_results(loaded, workload, card, catalog, precisions))
    missing = [s for s in chosen if found[id(s)] is None]
    capacities = [c for c in found.values() if c is not None]
    if missing:
        capacities += predicted(missing, card, workers, progress, gpus, strategy)
    if any(c.source == PREDICTED for c in capacities):
        world = (
            f", per GPU of {gpus} GPUs, {strategy} (predict --gpus {gpus} --strategy {strategy})" if gpus > 1 else ""
        )
        notes.append(
            f"predicted rows: max micro-batch from `memprobe predict`{world} (fake tensors, no GPU; not measured); "
            "they recommend B itself, as no throughput curve exists for them"
        )
    notes.append(
        "micro-batch: the largest at or below the cap (b* or the knee, whichever is smaller, where a measured curve "
        "exists; else B) for which micro-batch x GPUs x accumulation steps is the global batch exactly; where none "
        "is, the fewest steps, the micro-batch spread evenly, and the row says so"
    )
    notes.append("samples/s and time per global batch only where a timed run at that exact micro-batch was measured")
    for c in capacities:
        if c.source != PREDICTED:
            notes.append(f"{c.levers.label()}: measured in {c.origin}")
    if gpus == 1:
        return make_plan(workload.name, card.name, capacities, global_batch, notes)
    return _group_plan(workload, card.name, capacities, global_batch, notes, gpus, strategy)


def _group_plan(
    workload: Workload,
    card_name: str,
    capacities: list,
    global_batch: int | None,
    notes: list[str],
    gpus: int,
    strategy: str,
) -> Plan:
    """The plan of `gpus` cards training data-parallel under `strategy`: per-GPU micro-batches, the group's
    samples/s."""
    notes.append(
        f"{gpus} GPUs, {strategy}: the max micro-batch and micro-batch are per GPU (measured by `scan --gpus "
        f"{gpus} --strategy {strategy}` on this card, else predicted per GPU); a global step is {gpus} x the "
        f"micro-batch x the accumulation steps; samples/s are the {gpus} GPUs' together"
    )
    plan = make_plan(workload.name, f"{gpus}x {card_name} ({strategy})", capacities, global_batch, notes, gpus)
    for row in plan.rows:  # timed per GPU: the group runs gpus times the samples in the same time
        if row.samples_per_s is not None:
            row.samples_per_s *= gpus
    return plan


def _check_group(workload: Workload, gpus: int, strategy: str) -> None:
    """Raises PlanError for fewer than 1 GPU, an unknown strategy, or (on several GPUs) a workload a multi-GPU scan
    refuses."""
    if isinstance(gpus, bool) or gpus < 1:
        raise PlanError(f"--gpus must be at least 1, got {gpus}")
    if gpus > 1:
        from memprobe.core.workload.strategies import STRATEGIES, StrategyError, check_workload

        if strategy not in STRATEGIES:
            raise PlanError(f"unknown strategy '{strategy}'; choose from {', '.join(STRATEGIES)}")
        try:
            check_workload(workload)
        except StrategyError as exc:
            raise PlanError(str(exc)) from None


def _unused_results(
    loaded: Sequence[tuple[Path, ScanResult]],
    workload: Workload,
    card: Card,
    catalog: Catalog,
    precisions: Sequence[str],
) -> str:
    """The note for result files that measured none of the plan's settings: scans of this model, card and precision
    on another number of GPUs, strategy or mode. Raises PlanError where they hold no scan of this model and card
    (they would change nothing)."""
    if not any(
        same_definition(r, workload) and of_card(r, card, catalog) and set(precisions) & set(r.precisions)
        for _p, r in loaded
    ):
        raise PlanError(
            f"--results: no scan there measured {workload.name} ({', '.join(precisions)}) on the {card.name} "
            f"as memprobe defines it now; they hold {_held(loaded)}. Give scans of this model and card, or drop "
            "--results to predict every row"
        )
    return (
        f"--results: the scans of {workload.name} on the {card.name} there ({_held(loaded)}) ran another number "
        "of GPUs, strategy or mode than this plan's, so every row is predicted"
    )
