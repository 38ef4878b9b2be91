"""Write memprobe/data/overhead.yaml: per scanned catalog card, the allocator capacity memprobe's scans recorded.

`predict` and `guide` take the memory a card's allocator cannot use from that file (memprobe/core/cards/overhead.py says the
rule), never from the working folder. Re-run this when new result files land, and commit both:

    python benchmarks/overhead_table.py reports            # rewrite the packaged file
    python benchmarks/overhead_table.py reports --check    # exit 1 when the packaged file is not what reports/ says

Taken: single-GPU scans of a card the catalog knows, on the real card (not `scan --memory-cap`, whose capacity is
that of the emulated size), every precision that recorded an allocator capacity. Per card the smallest capacity is
kept (the most memory the CUDA context, runtime and driver ever held outside the allocator), so a prediction made
from it is safe rather than optimistic.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HEADER = """\
# The memory a card's allocator cannot use, as memprobe's own scans measured it. WRITTEN BY
# benchmarks/overhead_table.py from the committed result files; do not edit by hand, re-run the script.
# Per scanned card: capacity_bytes, the smallest allocator capacity a scan recorded (free + reserved once the model
# was built, single GPU, real card), and overhead_bytes = datasheet memory (gpus.yaml) - capacity_bytes.
# run_overhead_bytes: the most memory outside the allocator that a trial took after the capacity was read (kernel
# modules loaded on first use, library handles and workspaces), seen at the out-of-memory errors of the scans: capacity
# minus (reserved + free) at the error.
# How predict and guide use it (memprobe/core/cards/overhead.py): a scanned card gets its capacity; any other card or size gets
# its memory minus the largest overhead_bytes here, carried over and labelled so; from either, the largest
# run_overhead_bytes is subtracted too.
# group_capacity_bytes and group_run_overhead_bytes: the same two figures on a rank of a data-parallel group (scan
# --gpus N, DDP or FSDP2): the capacity a rank read once its model was built (its process group already made), and
# the memory outside the allocator a rank took after it (NCCL's buffers and channels, set up at the first collectives
# of the wrap and the steps), at the groups' out-of-memory errors. `predict --gpus N` takes them: a scanned card its
# group capacity less the largest group run overhead; any other card what it takes on one GPU less the most any
# scanned card lost in a group (group_extra_bytes = capacity - group capacity + group run overhead - run overhead).
"""
# The reserved bytes PyTorch's message states (allocated + reserved but unallocated, each rounded to 0.01 GiB) and the
# peak the trial recorded must agree this closely for the peak to be the reserved memory at the error.
AT_THE_ERROR = 32 << 20


def run_overhead(p) -> int | None:
    """The most memory outside the allocator one precision's trials took after setup: capacity - (reserved + free) at
    each out-of-memory error whose message states the figures and whose recorded peak is the state at the error."""
    from memprobe.core.process.outcomes import oom_numbers

    seen = []
    for a in [*p.attempts, *p.checks]:
        numbers = oom_numbers(a.message or "")
        if a.peak_reserved is None or not {"free_bytes", "allocated_bytes", "reserved_unallocated_bytes"} <= set(
            numbers
        ):
            continue
        stated = numbers["allocated_bytes"] + numbers["reserved_unallocated_bytes"]
        if abs(a.peak_reserved - stated) <= AT_THE_ERROR:
            seen.append(p.capacity_bytes - (a.peak_reserved + numbers["free_bytes"]))
    return max(seen) if seen else None


def _found(paths: list[str]) -> dict[tuple[str, bool], dict]:
    """(card, group) -> the smallest capacity, the largest run overhead, counts and sources of the catalog card's real
    scans under `paths`: one GPU (group False) and ranks of a data-parallel group (group True)."""
    from memprobe.compare.scaling import world_size
    from memprobe.core.cards.catalog import default_catalog
    from memprobe.core.cards.memcap import is_emulated
    from memprobe.core.records.results import load_results

    catalog = default_catalog()
    found: dict[tuple[str, bool], dict] = {}
    for path, result in load_results(paths, strict_files=False):
        gpu = result.environment.gpu
        name = result.gpu_name(unknown="")
        card = catalog.find(name)
        emulated = gpu is not None and gpu.emulated_total_bytes
        if card is None or is_emulated(name) or emulated:
            continue
        for p in result.precisions.values():
            if not p.capacity_bytes:
                continue
            row = found.setdefault(
                (card.name, world_size(result) > 1),
                {
                    "capacity_bytes": p.capacity_bytes,
                    "run": 0,
                    "errors": 0,
                    "scans": 0,
                    "devices": set(),
                    "sources": set(),
                },
            )
            grew = run_overhead(p)
            if grew is not None:
                row["run"] = max(row["run"], grew)
                row["errors"] += 1
            row["capacity_bytes"] = min(row["capacity_bytes"], int(p.capacity_bytes))
            row["scans"] += 1
            row["devices"].add(name)
            folder = Path(path).resolve().parent
            row["sources"].add(folder.relative_to(REPO).as_posix() if folder.is_relative_to(REPO) else str(folder))
    return found


def rows(paths: list[str]) -> list[dict]:
    """One row per scanned catalog card (one GPU), in catalog order, with its group figures where a data-parallel
    scan of it is there."""
    from memprobe.core.cards.catalog import default_catalog

    found = _found(paths)
    out = []
    for card in default_catalog().cards:
        row = found.get((card.name, False))
        if row is None:
            continue
        entry = {
            "card": card.name,
            "capacity_bytes": row["capacity_bytes"],
            "overhead_bytes": card.memory_bytes - row["capacity_bytes"],
            "run_overhead_bytes": row["run"],
            "scans": row["scans"],
            "scans_with_errors": row["errors"],
            "devices": sorted(row["devices"]),
            "sources": sorted(row["sources"]),
        }
        group = found.get((card.name, True))
        if group is not None and group["errors"]:
            entry.update(
                group_capacity_bytes=group["capacity_bytes"],
                group_run_overhead_bytes=group["run"],
                group_scans=group["scans"],
                group_scans_with_errors=group["errors"],
                group_sources=sorted(group["sources"]),
            )
        out.append(entry)
    return out


def render(paths: list[str]) -> str:
    """The file's text for the result files under `paths`."""
    data = {
        "made_by": "benchmarks/overhead_table.py from the committed result files under reports/",
        "cards": rows(paths),
    }
    body = yaml.safe_dump(data, sort_keys=False, width=120)
    notes = "".join(
        f"# {r['card']}: capacity {r['capacity_bytes'] / 2**20:.1f} MiB, overhead "
        f"{r['overhead_bytes'] / 2**20:.1f} MiB ({r['scans']} precision results), run overhead "
        f"{r['run_overhead_bytes'] / 2**20:.1f} MiB ({r['scans_with_errors']} with out-of-memory figures)\n"
        + (
            f"#   in a data-parallel group: capacity {r['group_capacity_bytes'] / 2**20:.1f} MiB, run overhead "
            f"{r['group_run_overhead_bytes'] / 2**20:.1f} MiB ({r['group_scans']} precision results, "
            f"{r['group_scans_with_errors']} with out-of-memory figures)\n"
            if "group_capacity_bytes" in r
            else ""
        )
        for r in data["cards"]
    )
    return HEADER + notes + body


def main() -> int:
    from memprobe.core.cards.overhead import default_overhead_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=[str(REPO / "reports")], help="result files or folders")
    parser.add_argument("--check", action="store_true", help="compare with the packaged file instead of writing it")
    args = parser.parse_args()
    text = render(args.paths)
    target = default_overhead_path()
    if args.check:
        same = target.exists() and target.read_text(encoding="utf-8") == text
        print(f"{target}: {'up to date' if same else 'OUT OF DATE: re-run benchmarks/overhead_table.py'}")
        return 0 if same else 1
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
