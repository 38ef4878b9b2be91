"""Check every result-file field the tools read (type, range, known words, dates, b* <= B), before a ScanResult is built.

No torch. A file written by hand, by another tool or by a broken memprobe can hold anything; the readers (report,
guide, plan --results, predict --compare, the overhead table, charts) trust a ScanResult. `problem(data)` says the
first field that is wrong, naming it ("precisions.fp16.max_batch must be an integer >= 0 or null, got 'lots'"), or
None. The rules are core/field_rules.py's; the fields are those of the records in core/records.py,
core/memory_model.py, core/breakdown.py and core/frontier.py, and what compare/ and plan/ read from settings.
"""

from __future__ import annotations

from typing import Any

from memprobe.core.catalog import PRECISIONS
from memprobe.core.field_rules import (
    BOOL,
    DATE,
    INT,
    LABEL,
    NUM,
    TEXT,
    List,
    Map,
    OneOf,
    Rule,
    shape_problem,
    shown,
)
from memprobe.core.outcomes import OUTCOMES
from memprobe.core.registry import UNITS
from memprobe.core.strategies import STRATEGIES

# Bounds past which a figure is a typo or an edited file, never a measurement: a batch (or a searched sequence
# length) as the scan and predict take it (cli/checks.MAX_BATCH and MAX_SEQ_LEN), bytes of one card (1 PiB),
# a rate (a trillion samples/s), seconds (a year), a count of steps or trials.
BATCH_MAX = 1 << 20
BYTES_MAX = 1 << 50
RATE_MAX = 1e12
SECONDS_MAX = 3.2e7
COUNT_MAX = 1 << 20

BATCH, BATCH1 = INT(0, BATCH_MAX), INT(1, BATCH_MAX)
BYTES, BYTES1, SIGNED_BYTES = INT(0, BYTES_MAX), INT(1, BYTES_MAX), INT(-BYTES_MAX, BYTES_MAX)
RATE, SECONDS, COUNT = NUM(0, RATE_MAX), NUM(0, SECONDS_MAX), INT(0, COUNT_MAX)
FLOPS = NUM(0, 1e21)  # FLOPs per sample: a trillion-parameter model at a million tokens is 6e18
MAP0, LIST = Map(), List()
CURVE_OUTCOMES = (*OUTCOMES, "skipped")
PRECISION_STATUSES = ("pending", "done", "error", "interrupted")
FILE_STATUSES = ("partial", "complete", "failed")
STOPS = ("", "edge", "nothing-fits", "cap", "trial-limit", "error", "user-error", "interrupted")
MODES = ("train", "infer")

STEP_TIME = Map(
    {k: NUM(0, SECONDS_MAX, null=False) for k in ("median_s", "mean_s", "min_s", "max_s", "p10_s", "p90_s", "stdev_s")},
    required=("median_s",),
)
TIMED = Map(
    {
        "batch": BATCH1,
        "outcome": OneOf(OUTCOMES),
        "warmup_steps": COUNT,
        "continued_from_trial": BOOL(),
        "first_step_seconds": SECONDS,
        "warmup_step_seconds": SECONDS,
        "timed_steps_cut_from": COUNT,
        "peak_allocated": BYTES,
        "peak_reserved": BYTES,
        "step_time": STEP_TIME,
        "unit": OneOf(UNITS),
        "units_per_step": NUM(0, BATCH_MAX * BATCH_MAX),
        "samples_per_s": RATE,
        "units_per_s": RATE,
        "flops_per_sample": FLOPS,
        "achieved_tflops": NUM(0, 1e9),
        "peak_tflops": NUM(0, 1e9),
        "mfu": NUM(0, 2),  # over 1 only where FLOPs were over-counted; past 2 a typo
        "mfu_note": TEXT(null=True),
        "compile_seconds": SECONDS,
        "error": TEXT(null=True),
        "failed_at_step": COUNT,
    }
)
ATTEMPT = Map(
    {
        "batch": INT(0, BATCH_MAX, null=False),
        "outcome": OneOf(OUTCOMES, null=False),
        "peak_allocated": BYTES,
        "peak_reserved": BYTES,
        "seconds": NUM(0, SECONDS_MAX, null=False),
        "message": TEXT(null=True),
        "fresh": BOOL(),
        "steps": COUNT,
        "wall_seconds": SECONDS,
        "loss_scale": NUM(0, 1e308),
        "done_at_s": SECONDS,
        "timed_steps": COUNT,
        "trial_fit": BOOL(),
        "oom": MAP0,
    },
    null=False,
    required=("batch", "outcome"),
)
CURVE_POINT = Map(
    {
        "batch": INT(1, BATCH_MAX, null=False),
        "outcome": OneOf(CURVE_OUTCOMES),
        "fresh": BOOL(),
        "samples_per_s": RATE,
        "units_per_s": RATE,
        **{k: SECONDS for k in ("step_median_s", "step_p10_s", "step_p90_s", "first_step_s", "warmup_step_s")},
        **{k: SECONDS for k in ("wall_seconds", "process_s", "estimated_s")},
        "timed_steps": COUNT,
        "peak_allocated": BYTES,
        "peak_reserved": BYTES,
        "phase": LABEL(null=True),
        "error": TEXT(null=True),
    },
    null=False,
    required=("batch",),
)
PAIR = Map({"fits": BATCH, "fails": BATCH})
PROOF = Map(
    {
        "fits": BATCH,
        "fails": BATCH,
        "fail_outcome": OneOf(OUTCOMES),
        "agreed": BOOL(),
        "verified": BOOL(),
        "checks": List(ATTEMPT),
        "search": PAIR,
        "in_process": PAIR,
        "reused_from_search": List(BATCH),
        "fit_check": TEXT(null=True),
        "seconds": SECONDS,
        "soak": MAP0,
        "non_monotone": MAP0,
    }
)
LINE = Map(
    {
        "static_bytes": NUM(-BYTES_MAX, BYTES_MAX, null=False),
        "per_sample_bytes": NUM(-BYTES_MAX, BYTES_MAX, null=False),
        "basis": LABEL(),
        "points": COUNT,
        "max_residual_bytes": NUM(0, BYTES_MAX),
    },
    null=False,
    required=("static_bytes", "per_sample_bytes", "basis", "points"),
)
BREAKDOWN = Map(
    {
        "batch": BATCH1,
        "basis": LABEL(),
        "categories": Map(values=SIGNED_BYTES, keys=LABEL(), null=False),
        "peak_reserved": BYTES,
        "peak_allocated": BYTES,
        "per_sample_bytes": SIGNED_BYTES,
        "outside_pytorch": SIGNED_BYTES,
        "top_modules": List(
            Map({"module": LABEL(), "bytes": INT(0, BYTES_MAX, null=False)}, null=False, required=("module", "bytes"))
        ),
        "instrument": TEXT(),
        "seconds": SECONDS,
        "device": TEXT(),
        "note": TEXT(),
    },
    required=("batch", "categories", "peak_reserved", "peak_allocated"),
)
TASK = Map(
    {
        "units_per_sample": NUM(1e-9, BATCH_MAX),
        "tokens_per_sample": NUM(0, BATCH_MAX),
        "flops_per_sample": FLOPS,
        "parameters": INT(0, 1 << 50),
    }
)
PRECISION_SETTINGS = Map(
    {
        "task": TASK,
        "flops_per_sample": FLOPS,
        "nothing_fits": Map({"need_bytes": BYTES}),
        "scaling": Map(
            {
                "per_gpu_batch": BATCH1,
                "units_per_s_1": RATE,
                "units_per_s_n": RATE,
                "speedup": NUM(0, 1e6),
                "efficiency": NUM(0, 1e3),
                "unit": OneOf(UNITS),
            }
        ),
    }
)
PRECISION = Map(
    {
        "precision": OneOf(PRECISIONS),
        "status": OneOf(PRECISION_STATUSES, null=False),
        "max_batch": BATCH,
        "stop": OneOf(STOPS, null=False),
        "proof": Map(PROOF.fields, null=False),
        "attempts": List(ATTEMPT),
        "memory_model": Map(values=LINE, keys=LABEL(), null=False),
        "capacity_bytes": BYTES1,
        "settings": Map(PRECISION_SETTINGS.fields, null=False),
        "search_seconds": SECONDS,
        "throughput": TIMED,
        "extra_batches": List(Map(TIMED.fields, null=False)),
        "error": TEXT(),
        "curve": List(CURVE_POINT),
        "best_batch": BATCH1,
        "best_samples_per_s": RATE,
        "best_units_per_s": RATE,
        "curve_seconds": SECONDS,
        "knee_batch": BATCH1,
        "knee_after_batch": BATCH1,
        "knee_drop": NUM(-1, 0),  # the fall: after's samples/s over before's, minus 1
        "breakdown": BREAKDOWN,
    },
    null=False,
)
FRONTIER_POINT = Map(
    {
        "kind": OneOf(("batch_at_seq", "seq_at_batch"), null=False),
        "fixed": INT(1, BATCH_MAX, null=False),
        "status": OneOf(("measured", "predicted", "skipped", "error"), null=False),
        "found": BATCH,
        "fails": BATCH,
        "verified": BOOL(null=False),
        "seconds": SECONDS,
        "file": TEXT(),
        "note": TEXT(),
    },
    null=False,
    required=("kind", "fixed", "status"),
)
FRONTIER = Map(
    {
        "precision": OneOf(PRECISIONS, null=False),
        "source": OneOf(("measured", "predicted"), null=False),
        "budget_s": SECONDS,
        "points": List(FRONTIER_POINT),
        "notes": List(TEXT()),
    },
    null=False,
    required=("precision", "source"),
)
DISTRIBUTED = Map(
    {"world_size": INT(1, COUNT_MAX), "strategy": OneOf(STRATEGIES), "interconnect": Map({"summary": LABEL(True)})}
)
PARAMS = Map(
    {
        "axis": OneOf(("batch", "seq_len")),
        "batch": BATCH1,
        "seq_len": BATCH1,
        "lora": INT(1, 1 << 16),
        "checkpointing": BOOL(),
    },
    keys=LABEL(),
    null=False,
)
WORKLOAD = Map(
    {
        "name": LABEL(),
        "family": LABEL(),
        "version": INT(0, 1 << 16),
        "unit": OneOf(UNITS, null=False),
        "params": PARAMS,
        "optimizer": MAP0,
        "description": TEXT(null=True),
    },
    null=False,
    required=("name",),
)
GPU = Map(
    {"name": LABEL(), "total_bytes": BYTES1, "emulated_total_bytes": BYTES1},
    null=False,
    required=("name",),
)
TOP = Map(
    {
        "workload": WORKLOAD,
        "environment": Map({"gpu": GPU, "distributed": DISTRIBUTED, "versions": MAP0}, null=False),
        "settings": Map(
            {
                "mode": OneOf(MODES),
                "world_size": INT(1, COUNT_MAX),
                "strategy": OneOf(STRATEGIES),
                "max_batch": BATCH1,
            },
            null=False,
        ),
        "precisions": Map(keys=OneOf(PRECISIONS, null=False), null=False),
        "status": OneOf(FILE_STATUSES, null=False),
        "created": DATE,
        "frontier": Map(keys=OneOf(PRECISIONS, null=False), values=FRONTIER),
    },
    null=False,
    required=("workload", "environment", "precisions"),
)


METRIC = Map({"mean": NUM(0, 1e15, null=False), "max": NUM(0, 1e15, null=False)})  # null: never sampled (no NVML)


def _utilization(value: Any, where: str) -> str | None:
    """A timed run's utilization: sample count and interval, and per metric its mean and max."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"{where} must be a mapping or null, got {shown(value)}"
    for key, item in value.items():
        rule: Rule = METRIC if key not in ("samples", "interval_s") else NUM(0, SECONDS_MAX)
        found = rule.problem(item, f"{where}.{key}")
        if found:
            return found
    return None


def _edges(where: str, p: dict[str, Any]) -> str | None:
    """The rules between a precision's fields: B agrees with its proof, b*, the knee and the curve lie within B."""
    batch, proof = p.get("max_batch"), p.get("proof") or {}
    if p.get("status") == "done" and batch is None:
        return f"{where}max_batch is null, but the precision's status is done"
    if proof.get("fits") is not None and batch != proof["fits"]:
        return f"{where}max_batch ({shown(batch)}) is not the proof's fitting batch (proof.fits {proof['fits']})"
    if proof.get("fits") is not None and proof.get("fails") is not None and proof["fails"] <= proof["fits"]:
        return f"{where}proof.fails ({proof['fails']}) must be above proof.fits ({proof['fits']})"
    within = [("best_batch", p.get("best_batch")), ("knee_batch", p.get("knee_batch"))]
    within += [("knee_after_batch", p.get("knee_after_batch"))]
    within += [(f"curve[{i}].batch", c.get("batch")) for i, c in enumerate(p.get("curve") or [])]
    for name, value in within:
        if value is not None and (batch is None or value > batch):
            return f"{where}{name} ({value}) must be at most the max batch B ({shown(batch)})"
    knee, after = p.get("knee_batch"), p.get("knee_after_batch")
    if (knee is None) != (after is None) or (knee is not None and after <= knee):
        return f"{where}knee_after_batch ({shown(after)}) must follow knee_batch ({shown(knee)})"
    if p.get("precision") is not None and where != f"precisions.{p['precision']}.":
        return f"{where}precision says {shown(p['precision'])}, not the precision it is filed under"
    return None


def problem(data: dict) -> str | None:
    """The first field of a result file's data (schema already checked) whose type, range or relation to another
    field is wrong, or None. Never raises."""
    found = shape_problem(data) or TOP.problem(data, "")
    if found:
        return found
    measured = [
        name for name, p in data["precisions"].items() if isinstance(p, dict) and p.get("max_batch") is not None
    ]
    if measured and "gpu" not in data["environment"]:  # a scan that failed before it read its device has none
        return f"environment.gpu is missing, but precisions.{measured[0]} has a max batch: on what card is unknown"
    for name, p in data["precisions"].items():
        where = f"precisions.{name}."
        if not isinstance(p, dict):
            return f"precision {shown(name)} is not a mapping"
        found = (
            PRECISION.problem(p, where.rstrip("."))
            or _utilization((p.get("throughput") or {}).get("utilization"), f"{where}throughput.utilization")
            or _edges(where, p)
        )
        if found:
            return found
    return None
