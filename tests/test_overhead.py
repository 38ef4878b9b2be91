"""The memory a card's allocator cannot use comes from data shipped in the package, never from the working folder:
predict gives the same answer from the repository root and from an empty folder, guide takes the same usable memory
as predict, the data file is what the committed result files say and is packaged."""

from __future__ import annotations

import fnmatch
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from click.testing import CliRunner

from memprobe.cli import main
from memprobe.compare.card_predictions import card_capacity
from memprobe.core.cards.cardsize import card_size
from memprobe.core.cards.catalog import default_catalog
from memprobe.core.cards.overhead import (
    OverheadError,
    default_overhead_path,
    default_overhead_table,
    load_overhead_table,
    overhead_from_files,
    usable_memory,
)

REPO = Path(__file__).resolve().parents[1]
MIB, GIB = 2**20, 2**30


def test_the_packaged_table_is_what_the_committed_results_say():
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "overhead_table.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_data_file_is_package_data():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["memprobe"]
    relative = default_overhead_path().relative_to(REPO / "memprobe").as_posix()
    assert any(fnmatch.fnmatch(relative, p) for p in patterns), (relative, patterns)


def test_a_scanned_card_gets_its_measured_capacity_and_others_the_carried_overhead():
    table = default_overhead_table()
    h100 = table.cards["H100 SXM"]
    assert h100.capacity_bytes == 84368556032 and h100.overhead_bytes == 80 * GIB - 84368556032
    catalog = default_catalog()
    sxm = catalog.find("H100 SXM")
    # during the run, kernels and libraries take memory outside the allocator: the most any scan's OOM showed
    run = table.run_overhead_bytes
    assert run == max(c.run_overhead_bytes for c in table.cards.values()) and 100 << 20 < run < 1 << 30
    got = usable_memory("H100 SXM", card_size(sxm)[0], sxm)
    assert got.capacity_bytes == h100.capacity_bytes - run and "measured on the H100 SXM" in got.how
    assert "during the run" in got.how
    carried = table.carried()  # the largest overhead of the scanned cards
    assert carried is not None and carried.overhead_bytes == max(c.overhead_bytes for c in table.cards.values())
    a100 = catalog.find("A100 80GB SXM4")
    assert a100 is not None and a100.name not in table.cards
    got = usable_memory(a100.name, card_size(a100)[0], a100)
    assert got.capacity_bytes == card_size(a100)[0] - carried.overhead_bytes - run and "carried over" in got.how
    got = usable_memory("24GiB", 24 * GIB)
    assert got.capacity_bytes == 24 * GIB - carried.overhead_bytes - run and "not measured on this size" in got.how
    with pytest.raises(OverheadError, match="not larger than"):
        usable_memory("1GiB", GIB)


def test_guide_takes_the_usable_memory_predict_takes():
    catalog = default_catalog()
    for card in catalog.cards:
        assert card_capacity(card) == usable_memory(card.name, card_size(card)[0], card).capacity_bytes


def test_a_malformed_table_is_named(tmp_path):
    bad = tmp_path / "overhead.yaml"
    bad.write_text("cards:\n  - {card: X, capacity_bytes: lots}\n")
    with pytest.raises(OverheadError, match="card #1 is malformed"):
        load_overhead_table(bad)
    with pytest.raises(OverheadError, match="cannot read"):
        load_overhead_table(tmp_path / "gone.yaml")


def test_overhead_from_a_missing_path_is_an_error(tmp_path):
    with pytest.raises(OverheadError, match="does not exist"):
        overhead_from_files([tmp_path / "nowhere"])
    result = CliRunner().invoke(main, ["predict", "--model", "toy", "--overhead-from", str(tmp_path / "nowhere")])
    assert result.exit_code == 2 and "does not exist" in result.output


def _usable_lines(cwd: Path) -> tuple[str, str]:
    """`memprobe predict --model toy --gpu H200,4090` run in `cwd` in a fresh process: its usable-memory lines and
    its table."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "memprobe",
            "predict",
            "--model",
            "toy",
            "-p",
            "fp32",
            "--gpu",
            "H200,4090,H100 SXM",
            "--memory",
            "24GiB",
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    usable = "\n".join(line for line in lines if line.startswith("Usable memory"))
    table = "\n".join(line for line in lines if line.startswith("| fp32"))
    return usable, table


@pytest.mark.slow
def test_predict_gives_the_same_answer_from_any_folder(tmp_path):
    in_repo = _usable_lines(REPO)
    elsewhere = _usable_lines(tmp_path)
    assert in_repo == elsewhere
    usable, _ = in_repo
    assert "measured on the H100 SXM" in usable and "carried over" in usable and "reports/" not in usable
