"""benchmarks/edge_repeat.py's snapshot summary and benchmarks/edge_report.py's report, on made-up runs (no GPU)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
MiB = 1 << 20
GiB = 1 << 30


def _module(name: str):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _snapshot() -> dict:
    frames = [{"filename": "/x/site-packages/timm/models/efficientnet.py", "line": 7, "name": "forward"}]
    blocks = [
        {"size": 300 * MiB, "state": "active_allocated", "requested_size": 299 * MiB, "frames": frames},
        {"size": 40 * MiB, "state": "inactive"},
        {"size": 2 * MiB, "state": "active_allocated", "frames": []},
    ]
    segment = {"total_size": 342 * MiB, "allocated_size": 302 * MiB, "stream": 0, "segment_type": "large"}
    events = [{"action": "alloc", "size": 300 * MiB, "frames": frames}, {"action": "oom", "size": 582 * MiB}]
    return {"segments": [{**segment, "blocks": blocks}], "device_traces": [events]}


def test_a_snapshot_is_summarised_small_with_where_the_largest_allocations_were_made():
    state = _module("edge_repeat").summarize_snapshot(_snapshot())
    assert (state["segments"], state["reserved"], state["free_in_segments"]) == (1, 342 * MiB, 40 * MiB)
    assert state["largest_free"] == 40 * MiB and state["free_blocks"]["10-100MiB"] == 1
    assert state["largest_allocations"][0]["where"] == ["timm/models/efficientnet.py:7 forward"]
    assert [e["action"] for e in state["last_events"]] == ["alloc", "oom"]
    assert len(json.dumps(state)) < 4000


def _run(tag: str, batch: int, fits: bool, state: dict) -> dict:
    steps = [
        {"phase": phase, "seconds": 0.5, "allocated": MiB, "reserved": GiB, "max_allocated": MiB, "max_reserved": GiB}
        | {"caught_ooms": 0}
        for phase in ("trial", "trial", "trial", "timed")
    ]
    ooms = (
        []
        if fits
        else [{"phase": "timed", "step": 4, "requested": 582 * MiB, "device_free": 100 * MiB, "state": state}]
    )
    return {
        "model": "timm:mobilenetv2_100",
        "batch": batch,
        "tag": tag,
        "outcome": "fit" if fits else "oom",
        "timed": {"outcome": "fit" if fits else "oom", "failed_at_step": None if fits else 1},
        "phases": {"import_torch_s": 2.0, "cuda_context_s": 0.5, "trial_s": 6.0},
        "steps": steps,
        "ooms": ooms,
        "end_state": state,
        "script_end_unix": 100.0,
    }


def test_the_report_sets_a_fit_beside_a_failure_at_the_same_batch(tmp_path):
    state = _module("edge_repeat").summarize_snapshot(_snapshot())
    for run in (_run("a", 3705, True, state), _run("b", 3705, False, state), _run("c", 3706, False, state)):
        (tmp_path / f"run_{run['tag']}.json").write_text(json.dumps(run))
    (tmp_path / "cudnn_a.log").write_text("plan tag eng1_k2\nplan tag eng0\n")
    (tmp_path / "cudnn_b.log").write_text("plan tag eng0\n")
    (tmp_path / "walls.tsv").write_text("a\t90.0\t101.0\t0\n")
    text = _module("edge_report").report(tmp_path)
    assert "### timm:mobilenetv2_100 at batch 3705: a fitted, b failed (timed step 1)" in text
    assert "asked 582 MiB, 100 MiB free" in text and "fit only: `plan tag eng1_k2`" in text
    assert "| timm:mobilenetv2_100 | 3706 | c | oom | timed step 1 | 582 (100) |" in text
    assert "| a | - | 2.0 |" in text and "| 1.0 | 11.0 |" in text  # exit 1 s after the script's end, 11 s in all
