"""Check a result file's data before a ScanResult is built: every field against its record's type, then the rules
between fields (B agrees with its proof, b* and the knee lie within B, a max batch names its card).

No torch. A file written by hand, by another tool or by a broken memprobe can hold anything; the readers (report,
guide, plan --results, predict --compare, the overhead table, charts) trust a ScanResult. `problem(data, record)`
says the first field that is wrong, naming it ("precisions.fp16.max_batch must be an integer >= 0 or null, got
'lots'"), or None. The field checks come from the record's types (core/records/schema.py: ScanResult and the records its
fields hold, core/records/fieldtypes.py's ranges and words), so the records are the only declaration of a result field.
"""

from __future__ import annotations

from typing import Any

from memprobe.core.records.field_rules import shape_problem, shown
from memprobe.core.records.schema import rule_of


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


def problem(data: dict, record: type) -> str | None:
    """The first field of a result file's data (schema already checked) whose type, range or relation to another
    field is wrong, or None; `record` is the type the data is read as (results.ScanResult). Never raises."""
    precisions = data.get("precisions")
    precisions = precisions if isinstance(precisions, dict) else {}
    wrong = next((name for name, p in precisions.items() if not isinstance(p, dict)), None)
    if wrong is not None:
        return f"precision {shown(wrong)} is not a mapping"
    if not precisions and not data.get("frontier"):  # a scan writes its file once a precision has a result
        return "precisions is empty: the file holds no result of any precision"
    found = shape_problem(data) or rule_of(record).problem(data, "")
    if found:
        return found
    measured = [name for name, p in precisions.items() if p.get("max_batch") is not None]
    if measured and data["environment"].get("gpu") is None:  # a scan that failed before it read its device has none
        return f"environment.gpu is missing, but precisions.{measured[0]} has a max batch: on what card is unknown"
    for name, p in precisions.items():
        found = _edges(f"precisions.{name}.", p)
        if found:
            return found
    return None
