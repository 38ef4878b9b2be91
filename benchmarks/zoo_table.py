"""reports/zoo/accuracy.md (and accuracy.json): the held-out zoo's measured max batches beside their predictions.

Read by `python benchmarks/zoo.py table`. Measured: every result file under reports/zoo/<card>/results/<job>/ (the
newest per job). Predicted: every reports/zoo/predictions/<host>.json that `zoo.py predict` wrote, one column per
host (a host is a machine and its torch, transformers and timm versions, stated under the table). The error is
(predicted - measured) / measured; a prediction above the measured B is unsafe: that batch does not train.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from memprobe.core.records.records import Proof
from memprobe.core.text.edge_text import band_text, runs_text

CARDS = {"h200": "H200", "h100": "H100"}
REPEAT_SCHEMA = 5  # the result schema that brought the repeat rule (B in K fresh runs); older files read as K = 1


def reruns(folder: Path) -> dict[str, dict[int, list[int]]]:
    """card/model/precision -> batch -> [fresh runs that trained, fresh runs] from the edge_repeat runs committed
    under `folder` (benchmarks/gpu/edge_repeat.sh: reports/benchmarks/edge_repeat_<card>/run_<tag>.json, each one
    fresh training run at one batch), the batch-1 first runs left out."""
    out: dict[str, dict[int, list[int]]] = {}
    for runs in sorted(folder.glob("edge_repeat_*")):
        card = CARDS.get(runs.name.removeprefix("edge_repeat_"))
        for path in sorted(runs.glob("run_*.json")) if card else []:
            run = json.loads(path.read_text())
            if str(run.get("tag", "")).endswith("_first") or run.get("outcome") not in ("fit", "oom"):
                continue
            model = str(run["model"]).split(":", 1)[-1]
            counts = out.setdefault(f"{card}/{model}/{run['precision']}", {}).setdefault(int(run["batch"]), [0, 0])
            counts[0] += run["outcome"] == "fit"
            counts[1] += 1
    return out


def _measured(zoo: Path) -> dict[str, dict[str, Any]]:
    """card/job -> the newest result file's figures for that job."""
    out: dict[str, dict[str, Any]] = {}
    for folder, card in CARDS.items():
        results = zoo / folder / "results"
        if not results.is_dir():
            continue
        for job in sorted(p for p in results.iterdir() if p.is_dir()):
            files = sorted(job.glob("*.json"))
            if not files:
                continue
            data = json.loads(files[-1].read_text())
            precision = job.name.split("__")[2]
            p = (data.get("precisions") or {}).get("bf16" if "__gpus2__" in job.name else precision) or {}
            env = data.get("environment") or {}
            out[f"{card}/{job.name}"] = {
                "max_batch": p.get("max_batch"),
                # B from the search, never run in a fresh process: every fresh check above it failed, the check
                # limit ran out before one at B (the scan's note says so)
                "verified": (p.get("proof") or {}).get("verified", True),
                "fresh_runs": fresh_runs(p.get("proof") or {}, p.get("max_batch"), data.get("schema_version")),
                "schema": data.get("schema_version"),
                "status": data.get("status"),
                "stop": p.get("stop"),
                "error": (p.get("error") or "")[:120],
                "file": str(files[-1].relative_to(zoo.parent.parent)),
                "versions": {k: env.get(k) for k in ("torch", "transformers", "timm")},
            }
    return out


def fresh_runs(proof: dict[str, Any], max_batch: int | None, schema: int | None = None) -> str:
    """The repeat rule's column: B's fresh runs and K, and the flaky band's span, "2 of 2 (K 2); 7094-7100 flaky". A
    file from before the rule (`schema` below REPEAT_SCHEMA) did not count them: its fresh checks at B are counted,
    K = 1, and the cell names its schema."""
    record = Proof.from_dict(proof)
    if max_batch is None or not proof:
        return "-"
    runs = runs_text(record, short=True)
    if not runs:
        at_b = [c for c in record.checks if c.batch == max_batch]
        runs = f"{sum(c.fits for c in at_b)} of {len(at_b)}"
    band = band_text(record, counts=False)
    k = f"K {record.repeats}" + (f", schema {schema}" if schema is not None and schema < REPEAT_SCHEMA else "")
    return f"{runs} ({k})" + (f"; {band}" if band else "")


def not_repeatable(row: dict[str, Any], found: dict[str, dict[int, list[int]]]) -> str:
    """How many later fresh runs at the row's measured B (`found`, reruns()) trained it, "0 of 2", where not all did;
    else the empty string."""
    if row["kind"] != "train" or row["measured"] is None:
        return ""
    fits, runs = found.get(f"{row['card']}/{row['model']}/{row['precision']}", {}).get(row["measured"], [0, 0])
    return f"{fits} of {runs}" if runs and fits < runs else ""


def _predictions(zoo: Path) -> dict[str, dict[str, Any]]:
    """host -> its prediction file."""
    out = {}
    folder = zoo / "predictions"
    # the laptop first: the reference host, the one whose seconds the table shows
    for path in sorted(folder.glob("*.json"), key=lambda p: (p.stem != "laptop", p.stem)) if folder.is_dir() else []:
        out[path.stem] = json.loads(path.read_text())
    return out


def _error(predicted: int | None, measured: int | None) -> float | None:
    if not predicted or not measured:
        return None
    return (predicted - measured) / measured


def summarize(rows: list[dict[str, Any]], host: str, key: str = "predicted", kind: str | None = None) -> dict[str, Any]:
    """Count, median and worst |error|, and how many predictions are above the measured B, for one host's `key`
    (the predicted max batch or the safe batch), over the scans of `kind` (train, infer; None: all single-GPU)."""
    errors = [
        r[host][f"{key}_error"]
        for r in rows
        if r.get(host, {}).get(f"{key}_error") is not None and (kind is None or _kind(r) == kind)
    ]
    if not errors:
        return {"count": 0}
    return {
        "count": len(errors),
        "median_abs_error": statistics.median(abs(e) for e in errors),
        "worst_abs_error": max(abs(e) for e in errors),
        "worst_over": max(errors),
        "unsafe": sum(1 for e in errors if e > 0),
        "within_3pct": sum(1 for e in errors if abs(e) <= 0.03),
    }


def _kind(row: dict[str, Any]) -> str:
    return "infer" if row["kind"] == "infer" else "train"


def same_on_hosts(rows: list[dict[str, Any]], hosts: list[str]) -> dict[str, Any]:
    """Whether every host predicted the same max batch and safe batch for each scan all of them predicted with the
    same memprobe code (`other_code`: how many scans they predicted with different code, not compared)."""
    every = [r for r in rows if all(h in r and r[h].get("predicted") is not None for h in hosts)]
    both = [r for r in every if len({r[h].get("code") for h in hosts}) == 1]
    differ = [
        r["card"] + "/" + r["job"]
        for r in both
        if len({(r[h]["predicted"], r[h]["predicted_safe"]) for h in hosts}) > 1
    ]
    return {"compared": len(both), "differ": differ, "other_code": len(every) - len(both)}


def code_runs(rows: list[dict[str, Any]], host: str) -> dict[str, int]:
    """The memprobe code each of `host`'s predictions ran with (zoo.py predict records it) -> how many scans."""
    runs: dict[str, int] = {}
    for r in rows:
        if host in r:
            code = r[host].get("code") or ""
            runs[code] = runs.get(code, 0) + 1
    return runs


def build(zoo: Path, entries: list[Any]) -> dict[str, Any]:
    """The table's data: one row per scanned job, with each host's prediction and error."""
    measured = _measured(zoo)
    hosts = _predictions(zoo)
    later = reruns(zoo.parent / "benchmarks")
    groups = {e.id: e.group for e in entries}
    rows = []
    for key, m in sorted(measured.items()):
        card, job = key.split("/")
        entry_id, kind, precision = job.split("__")
        row: dict[str, Any] = {
            "card": card,
            "job": job,
            "model": entry_id,
            "group": groups.get(entry_id, "?"),
            "kind": kind,
            "precision": precision,
            "measured": m["max_batch"],
            "verified": m["verified"],
            "fresh_runs": m["fresh_runs"],
            "status": m["status"],
            "schema": m["schema"],
            "file": m["file"],
            "scan_error": m["error"] if m["max_batch"] is None else "",
        }
        for host, data in hosts.items():
            got = (data.get("predictions") or {}).get(key)
            if got is None:
                continue
            row[host] = {
                "predicted": got.get("predicted"),
                "predicted_safe": got.get("predicted_safe"),
                "seconds": got.get("seconds"),
                "code": got.get("code"),
                "error": got.get("error"),
                "predicted_error": _error(got.get("predicted"), m["max_batch"]),
                "predicted_safe_error": _error(got.get("predicted_safe"), m["max_batch"]),
            }
        row["reruns_at_b"] = not_repeatable(row, later)
        rows.append(row)
    return {
        "rows": rows,
        "hosts": {
            h: {"versions": d.get("versions"), "host": d.get("host"), "code": code_runs(rows, h)}
            for h, d in hosts.items()
        },
        "summary": {
            h: {
                f"{label} {kind}": summarize(rows, h, key, kind)
                for kind in ("train", "infer")
                for label, key in (("predicted", "predicted"), ("safe", "predicted_safe"))
            }
            for h in hosts
        },
        "same_on_hosts": same_on_hosts(rows, list(hosts)) if len(hosts) > 1 else None,
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def render(data: dict[str, Any]) -> str:
    """accuracy.md's text."""
    hosts = list(data["hosts"])
    lines = [
        "# The held-out zoo: measured max batch against `memprobe predict`",
        "",
        "Models memprobe's registry, tests and calibration do not use (benchmarks/zoo_models/zoo.yaml), scanned on "
        "real GPUs by `benchmarks/gpu/zoo.sh` (`memprobe scan --no-curve --no-breakdown`: B and its fresh-process "
        "proof with the timed run) and predicted on a CPU by `python benchmarks/zoo.py predict` (`memprobe predict "
        "--gpu CARD`, what a user is told: the predicted max batch and the safe batch, 5% of the usable memory "
        "left). Error = (predicted - measured) / measured; **over** = predicted above the measured B (that batch "
        "does not train). Written by `python benchmarks/zoo.py table` from the result files and "
        "reports/zoo/predictions/.",
        "",
        "## Summary",
        "",
        "| host | scans | figure | median abs error | worst over | above measured B | within 3% |",
        "|---|---|---|---|---|---|---|",
    ]
    for h in hosts:
        for label, s in data["summary"][h].items():
            if not s.get("count"):
                continue
            figure, kind = label.split(" ")
            name = "safe batch" if figure == "safe" else "predicted max batch"
            lines.append(
                f"| {h} | {s['count']} {kind} | {name} | {100 * s['median_abs_error']:.2f}% | "
                f"{100 * s['worst_over']:+.2f}% | {s['unsafe']} | {s['within_3pct']} |"
            )
    marked = sum(1 for r in data["rows"] if r.get("reruns_at_b"))
    if marked:
        lines += [
            "",
            f"**B not repeatable** in {marked} training scans (marked †): later fresh runs at their B failed. Their "
            "safe batch must be at or below the B that trains repeatably, not measured yet (notes under the table).",
        ]
    same = data.get("same_on_hosts")
    if same:
        differ = ", ".join(same["differ"]) or "none"
        lines += [
            "",
            f"**The same answer on every host**: of {same['compared']} scans predicted on each host with the same "
            f"memprobe code, the predicted max batch and safe batch differ in: {differ}.",
        ]
        if same.get("other_code"):
            lines.append(
                f"{same['other_code']} more scans were predicted on the hosts by different memprobe code (listed "
                "per host below): their figures are from different runs and are not compared."
            )
    lines += [
        "",
        "Hosts (where each prediction ran, and its libraries). Both are this repository's 2-core CPU machine (no "
        "GPU): `laptop` with the CPU build of torch a laptop installs, `gpu-machine-torch` with the GPU machines' "
        "own torch build (CUDA 13.0, no GPU present), so that a difference between the torch builds would show. "
        "A host's rows can come from several runs (`zoo.py predict --only` predicts some scans again with newer "
        "memprobe code): each host's line says how many scans each memprobe commit predicted, and a summary row above "
        "mixes them where its host's line lists more than one.",
        "",
    ]
    for h, info in data["hosts"].items():
        v = info.get("versions") or {}
        runs = "; ".join(
            f"{n} scans by memprobe {code}" if code else f"{n} scans by an earlier run that recorded no commit"
            for code, n in sorted((info.get("code") or {}).items(), key=lambda kv: -kv[1])
        )
        lines.append(f"- **{h}**: " + ", ".join(f"{k} {val}" for k, val in v.items()) + (f" ({runs})" if runs else ""))
    lines += [
        "",
        "The scans ran torch 2.11.0+cu130, transformers 5.17.0 and timm 1.0.29 (each result file's environment); "
        "both hosts predicted with those transformers and timm versions, since a version can change a model's "
        "code path.",
        "",
        "## Every scan",
        "",
    ]
    header = "| card | model | group | scan | measured B | fresh runs at B (K); flaky |"
    rule = "|---|---|---|---|---|---|"
    timed = hosts[:1]  # seconds of the first host only: see the note under the table
    for h in hosts:
        header += f" {h}: predicted (error) | safe (error) |" + (" s |" if h in timed else "")
        rule += "---|---|" + ("---|" if h in timed else "")
    lines += [header, rule]
    for r in data["rows"]:
        measured = r["measured"] if r["measured"] is not None else f"- ({r['scan_error'] or r['status']})"
        if r["measured"] is not None and not r.get("verified", True):
            measured = f"{measured}\\*"
        measured = f"{measured}†" if r.get("reruns_at_b") else measured
        cells = [r["card"], r["model"], r["group"], f"{r['kind']} {r['precision']}", f"[{measured}](../../{r['file']})"]
        later = f"; **not repeatable**: later fresh runs at B {r['reruns_at_b']}" if r.get("reruns_at_b") else ""
        cells.append(r.get("fresh_runs", "-") + later)
        for h in hosts:
            p = r.get(h)
            blank = ["", ""] + ([""] if h in timed else [])
            if p is None:
                cells += blank
                continue
            if p["error"]:
                cells += [f"error: {p['error'][:80]}", *blank[1:]]
                continue
            over = " **over**" if (p["predicted_error"] or 0) > 0 else ""
            cells.append(f"{p['predicted']} ({_pct(p['predicted_error'])}){over}")
            safe_over = " **over**" if (p["predicted_safe_error"] or 0) > 0 else ""
            safe = p["predicted_safe"]
            cells.append(f"{safe} ({_pct(p['predicted_safe_error'])}){safe_over}" if safe else "-")
            if h in timed:
                cells.append(f"{p['seconds']:.0f}" if p.get("seconds") is not None else "")
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines += repeat_notes(data["rows"])
    lines += [
        "",
        "\\*: B not verified in a fresh process: the search's trial process fit it and fresh processes failed at "
        "every batch checked above it, but the check limit ran out before a fresh run at B itself (the result "
        "file's proof note). The real edge is at most this B.",
        "",
        "`fresh runs at B (K)`: how many fresh processes trained B (the trial and the timed steps after it) of those "
        "run at B; K is how many in a row B needed (`scan --repeat K`, 2 by default since result schema 5; files "
        "written before count one). `flaky`: the batches from the lowest one that failed in a fresh process to the "
        "highest that trained in one above it (the result file's proof.band has each batch's fits and failures).",
        "",
        f"`s`: seconds the {timed[0] if timed else ''} prediction took (`memprobe predict`'s own timer: build, "
        "traces and replays) on this repository's 2-core CI-class machine, which short test runs shared at times; "
        "the rows of the later runs (the commits on the host's line) ran beside other long jobs on those 2 cores, "
        "at several times the seconds they take alone. "
        "The other hosts' predictions ran on the same 2 cores beside longer work, so their seconds are not shown.",
    ]
    return "\n".join(lines) + "\n"


def repeat_notes(rows: list[dict[str, Any]]) -> list[str]:
    """The lines under the table on B's repeatability: the rows marked † (later fresh runs at B failed) and what their
    safe batch must be, and how many scans predate the repeat rule (K = 1)."""
    marked = [r for r in rows if r.get("reruns_at_b")]
    old = [r for r in rows if r["measured"] is not None and (r.get("schema") or 0) < REPEAT_SCHEMA]
    lines = [""]
    if marked:
        names = ", ".join(f"{r['card']} {r['model']} {r['kind']} {r['precision']} ({r['reruns_at_b']})" for r in marked)
        lines += [
            f"†: B not repeatable: fresh runs at it made after the scan did not all train it ({names}; "
            "benchmarks/gpu/edge_repeat.sh, reports/benchmarks/edge_repeat_h200/ and docs/edge.md). The batch that trains "
            "in K fresh runs in a row is below that B and not measured yet: for these rows the predicted safe batch "
            "must be at or below that repeatable B, which the table cannot show (their errors are against a B that "
            "does not hold), and the summary's counts compare them with it all the same.",
            "",
        ]
    if old:
        schemas = sorted({r.get("schema") for r in old}, key=lambda v: v or 0)
        lines.append(
            f"{len(old)} of {sum(r['measured'] is not None for r in rows)} scans were written before result schema "
            f"{REPEAT_SCHEMA} (schema {', '.join(str(v) for v in schemas)}; the cell says so): their B was shown by at "
            "most one fresh run and counts as K = 1, not as a B that held in K = 2 fresh runs in a row."
        )
    return lines


def write_table(zoo: Path, entries: list[Any]) -> None:
    data = build(zoo, entries)
    (zoo / "accuracy.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    (zoo / "accuracy.md").write_text(render(data))
    print(f"wrote {zoo / 'accuracy.md'}: {len(data['rows'])} scans, hosts {', '.join(data['hosts'])}")
