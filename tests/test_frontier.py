"""The frontier: the ladder walk against fake trials (monotone and not), the budget, the record, and the report."""

from __future__ import annotations

import json

from click.testing import CliRunner

from fakes import proven_point
from memprobe.cli import main
from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.process.outcomes import FIT, OOM
from memprobe.core.records.frontier import (
    BATCH_AT_SEQ,
    MEASURED,
    SEQ_AT_BATCH,
    SKIPPED,
    Frontier,
    FrontierPoint,
    ladder,
    point_workload,
    walk,
)
from memprobe.core.records.results import ScanResult, read_result, write_result
from memprobe.core.workload.registry import load_registry
from memprobe.probe.proof import confirm_edge
from memprobe.probe.search import find_max_batch

TOKENS = 40_000  # the fake card fits batch x length <= TOKENS tokens


def fake_point(fits):
    """A point measured as a scan measures it: the search, then the fresh-process proof, over fake trials."""

    def measure(kind: str, fixed: int) -> FrontierPoint:
        ok = (lambda b: fits(b, fixed)) if kind == BATCH_AT_SEQ else (lambda s: fits(fixed, s))
        found = find_max_batch(lambda n: Attempt(n, FIT if ok(n) else OOM), None, 65536, 60)
        edge = confirm_edge(lambda n: Attempt(n, FIT if ok(n) else OOM), found, 3, 65536)
        return FrontierPoint(kind, fixed, MEASURED, edge.max_batch, edge.max_batch + 1, edge.verified)

    return measure


def test_ladder():
    assert ladder(512, 4096) == [512, 1024, 2048, 4096]
    assert ladder(1, 5) == [1, 2, 4]


def test_monotone_frontier_is_exact_on_both_ladders():
    points, notes = walk(fake_point(lambda b, s: b * s <= TOKENS), None, 65536, 65536)
    batch_at = {p.fixed: p.found for p in points if p.kind == BATCH_AT_SEQ}
    seq_at = {p.fixed: p.found for p in points if p.kind == SEQ_AT_BATCH}
    assert batch_at == {512: 78, 1024: 39, 2048: 19, 4096: 9, 8192: 4, 16384: 2, 32768: 1, 65536: 0}  # ends at 0
    assert seq_at[1] == 40_000 and seq_at[64] == 625 and max(seq_at) == 128  # 128 -> 312 < 512: that ladder ends
    assert all(p.verified for p in points) and notes == []
    assert [p.kind for p in points[:4]] == [BATCH_AT_SEQ, SEQ_AT_BATCH, BATCH_AT_SEQ, SEQ_AT_BATCH]  # alternating


def test_non_monotone_frontier_is_recorded_as_found_and_flagged():
    # an allocator effect: at length 1024 a larger batch fits than at 512
    def fits(b, s):
        return b <= (100 if s == 1024 else TOKENS // s)

    points, notes = walk(fake_point(fits), None, 2048, 4)
    assert {p.fixed: p.found for p in points if p.kind == BATCH_AT_SEQ} == {512: 78, 1024: 100, 2048: 19}
    assert any("not monotone" in n and "1024 is 100" in n for n in notes)


def test_budget_skips_points_and_never_guesses():
    clock = iter(range(0, 10_000, 10))  # every clock read advances 10 s
    points, _ = walk(fake_point(lambda b, s: b * s <= TOKENS), 35, 65536, 65536, clock=lambda: next(clock))
    measured = [p for p in points if p.status == MEASURED]
    skipped = [p for p in points if p.status == SKIPPED]
    assert measured and skipped
    assert all(p.found is None and "time budget 35" in p.note for p in skipped)
    assert {p.kind for p in skipped} == {BATCH_AT_SEQ, SEQ_AT_BATCH}  # one skipped rung per ladder, then it stops


def test_point_workloads_are_the_existing_variants():
    llama = load_registry()["llama-1b"]
    assert point_workload(llama, BATCH_AT_SEQ, 1024).name == "llama-1b+seq1024"
    by_len = point_workload(llama, SEQ_AT_BATCH, 4, checkpointing=True)
    assert by_len.name == "llama-1b+ckpt+maxseq@b4" and by_len.params["axis"] == "seq_len"


def _frontier_file(tmp_path, source, found, gpu):
    frontier = Frontier(
        "bf16",
        source,
        100.0,
        [
            FrontierPoint(BATCH_AT_SEQ, 512, source, found, found + 1, True),
            FrontierPoint(SEQ_AT_BATCH, 1, SKIPPED, note="time budget"),
        ],
    )
    result = ScanResult(
        {"name": "llama-1b+frontier", "family": "llama-causal-lm", "params": {}},
        {"gpu": {"name": gpu}},
        {"search": "frontier"},
        status="complete",
        frontier={"bf16": frontier.to_dict()},
    )
    return write_result(result, tmp_path / f"{source}.json")


def test_frontier_section_round_trips_and_report_pairs_measured_with_predicted(tmp_path):
    path = _frontier_file(tmp_path, "measured", 40, "NVIDIA H200")
    _frontier_file(tmp_path, "predicted", 44, "H200 SXM")
    back = read_result(path)
    assert back.frontier["bf16"].points[0].found == 40
    assert "frontier" not in json.loads(
        write_result(ScanResult({"name": "x"}, {}, {}), tmp_path / "plain.json").read_text()
    )
    out = CliRunner().invoke(
        main,
        ["report", "--frontier", str(tmp_path / "measured.json"), str(tmp_path / "predicted.json"), "--format", "json"],
    )
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)
    first = next(r for r in rows if r["point"] == "max batch at length 512")
    assert (first["measured"], first["predicted"], first["predicted / measured"]) == ("40", "44", "1.10")
    assert next(r for r in rows if r["point"] == "max length at batch 1")["measured"] == "skipped"
    chart = CliRunner().invoke(
        main, ["report", "--frontier", str(tmp_path / "measured.json"), "--charts", str(tmp_path / "charts")]
    )
    assert chart.exit_code == 0, chart.output
    assert (tmp_path / "charts" / "frontier.png").exists()


def test_scan_frontier_reads_each_points_typed_proof(tmp_path, monkeypatch):
    """The measured frontier over fake point scans that return result records as scan_workload does (typed Proof),
    written to the frontier file after every point."""
    from memprobe.probe import frontier as probe_frontier
    from memprobe.probe.options import ScanOptions

    def fake_scan(variant, opts, out_dir, progress):
        params = variant.params
        if params.get("search") == "seq-len" or "maxseq" in variant.name:
            n = TOKENS // max(1, int(params.get("batch") or 1))
        else:
            n = TOKENS // int(params["seq_len"])
        return proven_point(variant, opts.precisions[0], n, tmp_path)

    monkeypatch.setattr(probe_frontier, "scan_workload", fake_scan)
    llama = load_registry()["llama-1b"]
    result, path = probe_frontier.scan_frontier(
        llama, ScanOptions(precisions=["bf16"], max_batch=4096), tmp_path, lambda *a, **k: None, None
    )
    points = result.frontier["bf16"].points
    batch_at = {p.fixed: (p.found, p.fails, p.verified) for p in points if p.kind == BATCH_AT_SEQ}
    assert batch_at[512] == (78, 79, True) and batch_at[1024] == (39, 40, True)
    assert result.status == "complete"
    assert read_result(path).frontier["bf16"].points == points
