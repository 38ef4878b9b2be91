"""Check the types and ranges of every result-file field the tools read, before a ScanResult is built. No torch.

A file written by hand, by another tool or by a broken memprobe can hold anything; the readers (report, guide,
predict --compare, the overhead table) trust a ScanResult. `problem(data)` says the first field that is wrong,
naming it ("precisions.fp16.max_batch must be an integer >= 0 or null, got 'lots'"), or None.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Callable

Check = Callable[[Any], bool]
_SHOWN = 40  # characters of a bad value quoted in a message


def _int(minimum: int | None = 0, null: bool = True) -> tuple[Check, str]:
    def ok(v: Any) -> bool:
        if v is None:
            return null
        return isinstance(v, int) and not isinstance(v, bool) and (minimum is None or v >= minimum)

    bound = f" >= {minimum}" if minimum is not None else ""
    return ok, f"an integer{bound}" + (" or null" if null else "")


def _num(minimum: float | None = 0, null: bool = True) -> tuple[Check, str]:
    def ok(v: Any) -> bool:
        if v is None:
            return null
        return (
            isinstance(v, (int, float))
            and not isinstance(v, bool)
            and math.isfinite(v)
            and (minimum is None or v >= minimum)
        )

    bound = f" >= {minimum:g}" if minimum is not None else ""
    return ok, f"a number{bound}" + (" or null" if null else "")


def _of(kind: type, null: bool = False) -> tuple[Check, str]:
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "true or false"}
    return (lambda v: (v is None and null) or isinstance(v, kind)), names[kind] + (" or null" if null else "")


INT, INT1, NUM, TEXT, TEXT0, MAP, MAP0, LIST = (
    _int(),
    _int(1),
    _num(),
    _of(str),
    _of(str, True),
    _of(dict),
    _of(dict, True),
    _of(list),
)

# Per precision: the fields report, guide, charts, predict --compare and the overhead table read.
PRECISION = {
    "status": TEXT,
    "max_batch": INT,
    "stop": TEXT,
    "proof": MAP,
    "attempts": LIST,
    "memory_model": MAP,
    "capacity_bytes": _int(1),
    "settings": MAP,
    "search_seconds": NUM,
    "throughput": MAP0,
    "extra_batches": LIST,
    "error": TEXT,
    "curve": LIST,
    "best_batch": INT1,
    "best_samples_per_s": NUM,
    "best_units_per_s": NUM,
    "curve_seconds": NUM,
}
ATTEMPT = {"batch": _int(0, null=False), "outcome": TEXT, "peak_allocated": INT, "peak_reserved": INT, "message": TEXT0}
CURVE_POINT = {"batch": _int(1, null=False), "samples_per_s": NUM, "units_per_s": NUM}
TIMED = {
    "samples_per_s": NUM,
    "units_per_s": NUM,
    "outcome": TEXT,
    "mfu": NUM,
    "flops_per_sample": NUM,
    "utilization": MAP0,
}
LINE = {"static_bytes": _num(None), "per_sample_bytes": _num(None)}
PROOF = {"fits": INT, "fails": INT, "checks": LIST, "search": MAP0, "in_process": MAP0}
GPU = {"name": TEXT, "total_bytes": _int(1), "emulated_total_bytes": _int(1)}
TOP = {"workload": MAP, "environment": MAP, "settings": MAP, "precisions": MAP, "status": TEXT, "created": TEXT}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def _fields(data: dict, spec: dict[str, tuple[Check, str]], where: str) -> str | None:
    for key, (ok, what) in spec.items():
        if key in data and not ok(data[key]):
            return f"{where}{key} must be {what}, got {_shown(data[key])}"
    return None


def _each(items: list, spec: dict[str, tuple[Check, str]], where: str) -> str | None:
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            return f"{where}[{i}] must be a mapping, got {_shown(item)}"
        found = _fields(item, spec, f"{where}[{i}].")
        if found:
            return found
    return None


def _memory_line(where: str, line: Any) -> str | None:
    """What is wrong with one memory_model line (None: nothing)."""
    return (
        f"{where} must be a mapping, got {_shown(line)}"
        if not isinstance(line, dict)
        else _fields(line, LINE, f"{where}.")
    )


def _precision(name: str, p: dict) -> str | None:
    where = f"precisions.{name}."
    found = _fields(p, PRECISION, where)
    if found:
        return found
    from memprobe.core.results import PRECISION_STATUSES

    if p.get("status", "pending") not in PRECISION_STATUSES:
        return f"{where}status must be one of {', '.join(PRECISION_STATUSES)}, got {_shown(p.get('status'))}"
    checks: list[Callable[[], str | None]] = [
        lambda: _each(p.get("attempts") or [], ATTEMPT, f"{where}attempts"),
        lambda: _each(p.get("curve") or [], CURVE_POINT, f"{where}curve"),
        lambda: _each(p.get("extra_batches") or [], {"batch": _int(0, null=False)}, f"{where}extra_batches"),
        lambda: _fields(p.get("throughput") or {}, TIMED, f"{where}throughput."),
        lambda: _fields(p.get("proof") or {}, PROOF, f"{where}proof."),
        lambda: _each((p.get("proof") or {}).get("checks") or [], ATTEMPT, f"{where}proof.checks"),
    ]
    for key, line in (p.get("memory_model") or {}).items():
        checks.append(partial(_memory_line, f"{where}memory_model.{key}", line))
    for check in checks:
        found = check()
        if found:
            return found
    return None


def problem(data: dict) -> str | None:
    """The first field of a result file's data (schema already checked) whose type or range is wrong, or None."""
    found = _fields(data, TOP, "")
    if found:
        return found
    for key in ("workload", "environment"):
        if key not in data:
            return f"'{key}' is missing"
    workload = data["workload"]
    if not isinstance(workload.get("name"), str) or not workload.get("name"):
        return f"workload.name must be a non-empty string, got {_shown(workload.get('name'))}"
    found = _fields(workload, {"unit": TEXT, "params": MAP, "family": TEXT}, "workload.")
    found = found or _fields(data["environment"], {"gpu": MAP, "versions": MAP, "distributed": MAP0}, "environment.")
    found = found or _fields(data["environment"].get("gpu") or {}, GPU, "environment.gpu.")
    found = found or _fields(
        data.get("settings") or {}, {"mode": TEXT, "world_size": INT1, "strategy": TEXT0}, "settings."
    )
    if found:
        return found
    from memprobe.core.results import FILE_STATUSES

    if data.get("status", "partial") not in FILE_STATUSES:
        return f"status must be one of {', '.join(FILE_STATUSES)}, got {_shown(data.get('status'))}"
    for name, p in data["precisions"].items():
        if not isinstance(p, dict):
            return f"precision {_shown(name)} is not a mapping"
        found = _precision(str(name), p)
        if found:
            return found
    return None
