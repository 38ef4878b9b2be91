"""The per-scan summary table (`memprobe report --scans`): max batch, proof, throughput per precision.

No torch: reports are made on any machine.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from memprobe.compare.curves import knee_text
from memprobe.compare.scaling import strategy, world_size
from memprobe.compare.tables import rows_text
from memprobe.core.cards.catalog import PRECISIONS
from memprobe.core.records.records import Proof
from memprobe.core.records.results import PrecisionResult, ScanResult
from memprobe.core.text import textwidth
from memprobe.core.text.edge_text import band_text, edge_text, runs_text
from memprobe.core.text.units import gib
from memprobe.core.workload.variants import axis_name


def proof_text(p: PrecisionResult) -> str:
    """The proof column: "75 fits (2 of 2), 76 oom" (2 of B's 2 fresh runs fitted), with the flaky band's span, "(unverified)" where the
    pair was not proven; the fresh runs are said for files that record them (the repeat rule, schema 5)."""
    proof = p.proof or Proof()
    if p.max_batch == 0:
        return "1 fails" if proof.verified else "1 fails (search only)"
    if proof.fits is None:
        return "-"
    fails = proof.fails
    runs = f" ({runs_text(proof, short=True)})" if runs_text(proof) else ""
    text = (
        f"{proof.fits} fits{runs}, {fails} {proof.fail_outcome or 'fails'}"
        if fails
        else f"{proof.fits} fits{runs} (cap)"
    )
    if band_text(proof, counts=False):
        text += f"; {band_text(proof, counts=False)}"
    return text if proof.verified else text + " (unverified)"


def _agreed_text(p: PrecisionResult) -> str:
    if p.proof is None:
        return "-"
    if p.proof.agreed:
        return "yes"
    return f"no (search {p.proof.found.fits})"


def _best_text(p: PrecisionResult, unit: str) -> str:
    """b* and its throughput, with how far B's falls below it, e.g. "2048: 6686.0 images/s (B -36.6%)"."""
    if p.best_batch is None or p.status != "done":
        return "-"
    speed = p.best_units_per_s or p.best_samples_per_s or 0.0
    at_b = next((c.units_per_s for c in p.curve if c.batch == p.max_batch and c.fits), None)
    change = f" (B {at_b / speed - 1:+.1%})" if at_b and speed and p.best_batch != p.max_batch else ""
    return f"{p.best_batch}: {speed:.1f} {unit}/s{change}" + (" best of timed" if p.curve_skipped else "")


def _curve_text(p: PrecisionResult) -> str:
    """What the curve covered: points timed, their range, seconds, and points its budget skipped."""
    timed = p.curve_timed
    if not timed or p.status != "done":
        return "-"
    text = f"{len(timed)} timed, {timed[0]}-{timed[-1]}"
    if p.curve_seconds is not None:
        text += f", {p.curve_seconds:.0f} s"
    return text + (f"; {len(p.curve_skipped)} skipped (budget)" if p.curve_skipped else "")


def model_label(result: ScanResult) -> str:
    """The workload's name, with " (inference)" for an inference scan: it answers another question, so it is
    never a row of training (nor replaces one)."""
    return str(result.workload.name) + (" (inference)" if result.mode == "infer" else "")


def newest_finished(results: Sequence[ScanResult]) -> list[tuple[ScanResult, str, PrecisionResult]]:
    """Per (GPU, workload and mode, precision, number of GPUs and strategy): the newest finished precision, or, if
    none finished, the newest one. A rerun thus replaces an interrupted or earlier row, and a 2-GPU ddp scan never
    replaces an fsdp one or a 1-GPU one; sorted by workload, then precision order, then GPUs."""
    best: dict[tuple[str, str, str, int, str], tuple[ScanResult, str, PrecisionResult]] = {}
    for result in results:
        gpu = result.gpu_name()
        group = (world_size(result), strategy(result) or "")
        for name, p in result.precisions.items():
            key = (gpu, model_label(result), name, *group)
            rank = (p.status == "done", result.created_at)
            if key not in best or rank >= (best[key][2].status == "done", best[key][0].created_at):
                best[key] = (result, name, p)
    order = {name: i for i, name in enumerate(PRECISIONS)}
    return [best[k] for k in sorted(best, key=lambda k: (k[0], k[1], order.get(k[2], len(order)), k[3], k[4]))]


def scan_entries(
    results: Iterable[ScanResult], newest_only: bool, precisions: Sequence[str] | None
) -> list[tuple[ScanResult, str, PrecisionResult]]:
    """The (result, precision name, precision) a scan table shows, one per row of scan_rows, in its order."""
    results = list(results)
    entries = newest_finished(results) if newest_only else [(r, n, p) for r in results for n, p in r.precisions.items()]
    return [e for e in entries if e[1] in precisions] if precisions else entries


def scan_notes(
    results: Iterable[ScanResult], newest_only: bool = False, precisions: Sequence[str] | None = None
) -> list[str]:
    """One line per precision of the table whose fresh runs did not agree on one edge: the flaky band with every
    batch's fresh fits and failures (the repeat rule), or where the edge was not monotone (proof.non_monotone): which
    sizes fit, which failed, and the B reported."""
    lines = []
    for result, name, p in scan_entries(results, newest_only, precisions):
        where = f"{result.gpu_name()} {result.workload.name} {name}"
        if p.proof is not None and p.proof.band is not None:
            lines.append(f"{where}: {edge_text(p.max_batch, p.proof)}")
        note = (p.proof.non_monotone or {}).get("note") if p.proof is not None else None
        if note:
            lines.append(f"{where}: {note}")
    return lines


def scan_rows(
    results: Iterable[ScanResult], newest_only: bool = False, precisions: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """One row per workload and precision with the headline numbers of a scan. With `newest_only`,
    one row per GPU, workload and precision across all `results` (see newest_finished);
    `precisions` keeps only those."""
    rows = []
    for result, name, p in scan_entries(results, newest_only, precisions):
        gpu = result.gpu_name()
        t = p.throughput
        unit = (t.unit if t else None) or result.workload.unit or "samples"
        util = (t.utilization if t else None) or {}
        gpu_util = (util.get("gpu_util_pct") or {}).get("mean")
        power = (util.get("power_w") or {}).get("mean")
        # each reused search trial is one check; the others (B's repeats too) ran as checks of their own
        reused = len(p.proof.reused_from_search) if p.proof else 0
        rechecks = range(max(0, len(p.checks) - reused))
        fresh = sum(bool(a.fresh) for a in p.attempts) + len(rechecks)
        mfu = t.mfu if t else None
        max_batch: Any = p.max_batch
        if p.status == "done" and axis_name(result.workload.params) != "batch":
            max_batch = f"{axis_name(result.workload.params)} {p.max_batch}"  # a sequence-length search: a length
        rows.append(
            {
                "gpu": gpu,
                "model": model_label(result),
                "precision": name,
                "max batch": max_batch
                if p.status == "done"
                else f"{p.status}: {p.error.splitlines()[0][:60]}"
                if p.error
                else p.status,
                "proof (fresh processes)": proof_text(p),
                "agreed": _agreed_text(p),
                "trials (fresh)": f"{len(p.attempts) + len(rechecks)} ({fresh})",
                "search s": p.search_seconds if p.search_seconds is not None else "-",
                "throughput at B": (
                    f"{t.units_per_s:.1f} {unit}/s"
                    if t and t.units_per_s
                    else ((t.error if t.error is not None else "-")[:40] if t else "-")
                ),
                "b* (curve)": _best_text(p, unit),
                "knee (fall)": knee_text(p.knee_batch, p.knee_after_batch, p.knee_drop) if p.status == "done" else "-",
                "curve": _curve_text(p),
                "step ms (median)": f"{t.step_time['median_s'] * 1000:.0f}" if t and t.step_time else "-",
                "MFU %": f"{mfu * 100:.1f}" if mfu is not None else "-",
                "peak GiB": gib(t.peak_reserved) if t else "-",
                "GPU util %": f"{gpu_util:.0f}" if gpu_util is not None else "-",
                "power W": f"{power:.0f}" if power is not None else "-",
            }
        )
    return rows


def scan_table(
    results: Iterable[ScanResult],
    fmt: str = "github",
    newest_only: bool = False,
    precisions: Sequence[str] | None = None,
) -> str:
    """The scan summary as text: a table (github, plain or another tabulate format) with a line under it for
    each precision whose edge was not monotone, csv or json (the table's rows only)."""
    results = list(results)
    text = rows_text(scan_rows(results, newest_only, precisions), fmt, "(no results)", keep=3)
    notes = scan_notes(results, newest_only, precisions) if fmt not in ("json", "csv") else []
    return "\n".join([text, *(textwidth.wrap(note, "", "  ") for note in notes)])
