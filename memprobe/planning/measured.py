"""Measured capacities for a plan: the newest result file of this card, workload definition, precision and GPUs.

With N GPUs (`plan --gpus N --strategy S`) only a scan of N ranks under S on the card counts (`scan --gpus N`): its
per-GPU max batch, curve and timed runs. A 1-GPU scan says nothing of the per-GPU edge of N (DDP adds gradient
buckets, FSDP shards state but gathers parameters), so without such a scan the row is predicted for N GPUs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from memprobe.compare.scaling import strategy, world_size
from memprobe.core.cards.catalog import Card, Catalog
from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.estimates.plan import MEASURED, Capacity
from memprobe.core.process.outcomes import FIT
from memprobe.core.records.records import CurvePoint, Timed
from memprobe.core.records.results import PrecisionResult, ScanResult
from memprobe.core.workload.registry import Workload
from memprobe.planning.levers import Setting


def same_definition(result: ScanResult, workload: Workload) -> bool:
    """Whether a result measured this workload as defined (name, family, params and optimizer; not the description)."""
    w = result.workload
    return (w.name, w.family, w.params, w.optimizer) == (
        workload.name,
        workload.family,
        workload.params,
        workload.optimizer,
    )


def on_card(result: ScanResult, card: Card, catalog: Catalog, gpus: int = 1, how: str | None = None) -> bool:
    """Whether a result ran on `card` (the catalog's reading of its device name; emulated cards never match), on
    `gpus` GPUs (under the strategy `how` where more than one), in training mode."""
    return (
        of_card(result, card, catalog)
        and world_size(result) == gpus
        and (gpus == 1 or strategy(result) == how)
        and result.mode == "train"
    )


def of_card(result: ScanResult, card: Card, catalog: Catalog) -> bool:
    """Whether a result ran on `card` at all (any number of GPUs, strategy or mode)."""
    name = result.gpu_name(unknown="")
    found = catalog.find(name) if name else None
    return found is not None and found.name == card.name


def capacity_of(setting: Setting, p: PrecisionResult, unit: str, origin: str, gpus: int = 1) -> Capacity:
    """A precision result as the plan's Capacity: B, b*, knee, timed samples/s and measured peaks by batch. Of a
    scan on `gpus` GPUs: the per-GPU batches, and each GPU's share of the group's samples/s."""
    timed: dict[int, float] = {}
    peaks: dict[int, int] = {}
    runs: list[CurvePoint | Timed] = [*p.curve, *([p.throughput] if p.throughput else []), *p.extra_batches]
    for run in runs:
        if (run.outcome or FIT) == FIT and run.samples_per_s and run.batch is not None:
            timed.setdefault(int(run.batch), float(run.samples_per_s) / gpus)
    sized: list[Attempt | CurvePoint | Timed] = [*p.attempts, *(p.proof.checks if p.proof else []), *runs]
    for one in sized:
        if one.outcome == FIT and one.peak_reserved and one.batch is not None:
            peaks[int(one.batch)] = max(peaks.get(int(one.batch), 0), int(one.peak_reserved))
    line = p.memory_model.get("peak_reserved")
    return Capacity(
        setting.levers,
        setting.workload.name,
        MEASURED,
        int(p.max_batch or 0),
        p.capacity_bytes,
        p.best_batch,
        p.knee_batch,
        timed,
        peaks,
        line.static_bytes if line else None,
        line.per_sample_bytes if line else None,
        unit,
        origin,
    )


def measured(
    setting: Setting,
    loaded: Sequence[tuple[Path, ScanResult]],
    card: Card,
    catalog: Catalog,
    gpus: int = 1,
    how: str | None = None,
) -> Capacity | None:
    """The setting's Capacity from the newest finished result of it on `card` (on `gpus` GPUs under `how`), or None
    when there is none."""
    found = [
        (result.created_at, path, result, result.precisions[setting.levers.precision])
        for path, result in loaded
        if setting.levers.precision in result.precisions
        and on_card(result, card, catalog, gpus, how)
        and same_definition(result, setting.workload)
    ]
    done = [f for f in found if f[3].status == "done" and f[3].max_batch is not None]
    if not done:
        return None
    _created, path, result, p = max(done, key=lambda f: f[0])
    return capacity_of(setting, p, str(result.workload.unit or "samples"), str(path), gpus)
