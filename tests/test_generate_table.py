"""benchmarks/generate_table.py on the CPU: its table from the committed H200 generate scans and given predictions
(no trace): a finished scan's error and safe check, a partial scan labelled partial, the markers of --write."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDER = Path("reports/h200_generate")


def _script():
    spec = importlib.util.spec_from_file_location("generate_table", REPO / "benchmarks" / "generate_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_table_compares_each_scan_and_labels_the_partial_ones(monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    script = _script()
    entries = script.scans([FOLDER])
    names = [str(r.workload.name) for _p, r in entries]
    assert "llama-8b+p8192+n64" in names and not any("frontier" in n for n in names)
    rows = {}
    for _path, result in entries:
        b, _shown, _failed = script.measured(result, "bf16")
        rows[script.key(result, "bf16")] = {"max": (b or 100) + 1, "safe": (b or 100) - 1}
    text = script.table(entries, {"versions": {"torch": "t", "transformers": "x"}, "rows": rows})
    row = next(line for line in text.splitlines() if line.startswith("| llama-8b bf16 | 8192 / 64 |"))
    assert "| 45 (" in row and "| 46 | +2.2% | 44 | yes |" in row
    partial = next(line for line in text.splitlines() if "| 8192 / 64 | 512 |" in line)
    assert (
        "partial (interrupted), fitted 128, failed 418" in partial
        and "| 101 | - | 99 | yes (< failed 418) |" in partial
    )
    doc = tmp_path / "doc.md"
    doc.write_text(f"head\n{script.START}\nold\n{script.END}\ntail\n")
    monkeypatch.setattr(script, "table", lambda _e, _p: "NEW")
    predictions = tmp_path / "p.json"
    predictions.write_text(json.dumps({"versions": {"torch": "t"}, "rows": rows}))
    assert script.main([str(FOLDER), "--reuse", "--predictions", str(predictions), "--write", str(doc)]) == 0
    assert doc.read_text() == f"head\n{script.START}\nNEW\n{script.END}\ntail\n"
    del rows[next(iter(rows))]  # a prediction missing, made with other libraries: not mixed into one table
    predictions.write_text(json.dumps({"versions": {"torch": "t"}, "rows": rows}))
    assert script.main([str(FOLDER), "--reuse", "--predictions", str(predictions), "--write", str(doc)]) == 1
