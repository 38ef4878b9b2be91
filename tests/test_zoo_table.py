"""The zoo table's repeat marks: B's later fresh runs (edge_repeat) and the schema a scan was written in."""

import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
SPEC = importlib.util.spec_from_file_location("zoo_table", REPO / "benchmarks" / "zoo_table.py")
zoo_table = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(zoo_table)


def _run(folder: Path, tag: str, batch: int, outcome: str, model: str = "timm:mobilenetv2_100") -> None:
    record = {"model": model, "precision": "bf16", "batch": batch, "tag": tag, "outcome": outcome}
    (folder / f"run_{tag}.json").write_text(json.dumps(record))


def test_later_fresh_runs_that_failed_at_b_mark_the_row_and_the_first_runs_do_not_count(tmp_path):
    runs = tmp_path / "edge_repeat_h200"
    runs.mkdir()
    _run(runs, "m_first", 1, "fit")
    _run(runs, "m_b3705_r1", 3705, "oom")
    _run(runs, "m_b3705_r2", 3705, "fit")
    _run(runs, "m_b3706_r1", 3706, "oom")
    _run(runs, "i_b2750_r1", 2750, "fit", model="timm:inception_v3")
    (tmp_path / "edge_repeat_unknowncard").mkdir()  # a card the table does not know: left out
    _run(tmp_path / "edge_repeat_unknowncard", "m_b3705_r3", 3705, "oom")
    found = zoo_table.reruns(tmp_path)
    assert found == {
        "H200/mobilenetv2_100/bf16": {3705: [1, 2], 3706: [0, 1]},
        "H200/inception_v3/bf16": {2750: [1, 1]},
    }
    row = {"card": "H200", "model": "mobilenetv2_100", "precision": "bf16", "kind": "train", "measured": 3705}
    assert zoo_table.not_repeatable(row, found) == "1 of 2"
    assert zoo_table.not_repeatable({**row, "measured": 3704}, found) == ""  # no later run at this B
    assert zoo_table.not_repeatable({**row, "kind": "infer"}, found) == ""  # the runs are of training
    fitted = {**row, "model": "inception_v3", "measured": 2750}
    assert zoo_table.not_repeatable(fitted, found) == ""  # every later run trained it


def test_a_scan_before_schema_5_counts_as_k_1_and_says_its_schema():
    proof = {"checks": [{"batch": 10, "outcome": "fit", "fresh": True}, {"batch": 11, "outcome": "oom", "fresh": True}]}
    assert zoo_table.fresh_runs(proof, 10, 3) == "1 of 1 (K 1, schema 3)"
    assert "schema" not in zoo_table.fresh_runs(proof, 10, 5)


def test_the_notes_name_the_marked_rows_and_count_the_old_scans():
    rows = [
        {
            "card": "H200",
            "model": "m",
            "kind": "train",
            "precision": "bf16",
            "measured": 5,
            "schema": 3,
            "reruns_at_b": "0 of 2",
        },
        {
            "card": "H200",
            "model": "n",
            "kind": "train",
            "precision": "bf16",
            "measured": 7,
            "schema": 5,
            "reruns_at_b": "",
        },
        {"card": "H200", "model": "o", "kind": "train", "precision": "bf16", "measured": None, "schema": 3},
    ]
    text = "\n".join(zoo_table.repeat_notes(rows))
    assert "H200 m train bf16 (0 of 2)" in text and "at or below that repeatable B" in text
    assert "1 of 2 scans were written before result schema 5 (schema 3" in text
