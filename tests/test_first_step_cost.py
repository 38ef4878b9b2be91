"""benchmarks/first_step_cost.py on the CPU: steps timed per batch size in one process, sizes seen before
marked, the first step at the second size profiled, and the JSON written (the GPU run is in cliff.sh)."""

import importlib.util
import json
from pathlib import Path

SPEC = importlib.util.spec_from_file_location(
    "first_step_cost", Path(__file__).parents[1] / "benchmarks" / "first_step_cost.py"
)
first_step_cost = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(first_step_cost)


def test_first_step_cost_plumbing_on_the_cpu(tmp_path, capsys):
    assert (
        first_step_cost.main(
            [
                "--case",
                "toy:fp32",
                "--batches",
                "2,4,2",
                "--steps",
                "2",
                "--device",
                "cpu",
                "--profile",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    result = json.loads((tmp_path / "first_step_toy_fp32.json").read_text())
    assert [(r["batch"], r["seen_before"], len(r["step_seconds"])) for r in result["runs"]] == [
        (2, False, 2),
        (4, False, 2),
        (2, True, 2),
    ]
    profiled = result["profile_of_first_step_at_second_batch"]
    assert profiled["wall_seconds"] == result["runs"][1]["step_seconds"][0]
    assert any(op["op"].startswith("aten::") for op in profiled["top_cpu_ops"])
    assert "new size" in capsys.readouterr().out
