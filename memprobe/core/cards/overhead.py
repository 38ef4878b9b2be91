"""The memory a card's allocator cannot use (driver reservation, CUDA context, runtime), from data shipped in the package.

No torch, and no input from the working folder or the environment: `predict` and `guide` give the same usable
memory for a card wherever they run. memprobe/data/overhead.yaml is written by benchmarks/overhead_table.py from
the committed result files. The rule (usable_memory):
- a card memprobe has scanned: the allocator capacity its scans recorded (the smallest, so the figure is safe);
- any other card, and a size given in bytes: that memory minus the largest overhead measured on a scanned card
  (overhead = datasheet memory - recorded capacity), carried over and labelled so. The card's memory is what
  predict takes for it (cardsize.card_size: the driver-reported total where the catalog has it, else the
  datasheet size); on the scanned H100 this rule gives 0.35 GiB less than was measured, so it errs low.
- an explicit override (`predict --overhead-from FILES`, or a size given directly) replaces both;
- from a scanned or carried capacity, the memory a trial takes outside the allocator after the capacity was read is
  subtracted as well (run_overhead_bytes: kernel modules loaded on first use, library handles; at most 0.15 GiB at
  the out-of-memory errors of the H100 and H200 scans): the allocator can use only what is left of it.
- on a rank of a data-parallel group (predict --gpus N): a card scanned in a group gets the smallest capacity its ranks
  recorded, less the most memory NCCL, kernels and libraries took outside the allocator in a group afterwards (0.62
  GiB at the groups' out-of-memory errors on the H100 and H200, against 0.15-0.23 GiB alone); any other card or size
  what it gets alone, less the most a rank lost against one GPU on a scanned card (group_extra_bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import yaml

from memprobe.core.cards.catalog import Catalog, default_catalog
from memprobe.core.text.units import gib

if TYPE_CHECKING:
    from memprobe.core.cards.catalog import Card
    from memprobe.core.records.results import PrecisionResult, ScanResult


class OverheadError(ValueError):
    """The overhead data cannot be read, an --overhead-from path is not there or holds no usable scan, or a
    size is not larger than the overhead subtracted from it. The message is one line."""


@dataclass(frozen=True)
class Overhead:
    """Memory of a measured card that the allocator could not use.

    bytes = datasheet memory of the measured card - capacity_bytes (free + reserved after the model was built).
    When the catalog does not know the measured card, it falls back to total_bytes - capacity_bytes, which misses
    the driver's reservation (said in `describe`).
    """

    bytes: int
    gpu: str
    capacity_bytes: int
    total_bytes: int | None
    nominal_bytes: int | None

    def describe(self) -> str:
        """One sentence: the overhead and where it comes from."""
        if self.nominal_bytes is not None:
            parts = [
                f"{gib(self.nominal_bytes, 2)} GiB datasheet memory - {gib(self.capacity_bytes, 2)} GiB that the "
                f"scan's allocator could use = {gib(self.bytes, 2)} GiB"
            ]
            if self.total_bytes is not None:
                parts.append(
                    f"{gib(self.nominal_bytes - self.total_bytes, 2)} GiB the driver does not expose + "
                    f"{gib(self.total_bytes - self.capacity_bytes, 2)} GiB CUDA context and runtime"
                )
            return f"measured on {self.gpu}: " + " (".join(parts) + (")" if len(parts) > 1 else "")
        return (
            f"measured on {self.gpu} (not in the catalog): total {gib(self.total_bytes, 2)} GiB - capacity "
            f"{gib(self.capacity_bytes, 2)} GiB = {gib(self.bytes, 2)} GiB; the driver's own reservation is unknown "
            "and not included"
        )


def overhead_for(result: "ScanResult", p: "PrecisionResult", catalog: Catalog) -> Overhead | None:
    """The non-allocatable memory of the card a result was measured on, or None without a recorded capacity."""
    if not p.capacity_bytes:
        return None
    gpu = result.environment.gpu
    device = result.gpu_name()
    # An emulated card (scan --memory-cap) has the cap as its memory, not the real card's.
    total = gpu.memory_bytes if gpu is not None else None
    card = catalog.find(device)
    if card is not None:
        return Overhead(card.memory_bytes - p.capacity_bytes, card.name, p.capacity_bytes, total, card.memory_bytes)
    if total is None:
        return None
    return Overhead(int(total) - p.capacity_bytes, device, p.capacity_bytes, int(total), None)


@dataclass(frozen=True)
class ScannedCard:
    """What memprobe's committed scans recorded on one catalog card (a row of overhead.yaml)."""

    card: str
    capacity_bytes: int  # the smallest allocator capacity recorded (free + reserved once the model was built)
    overhead_bytes: int  # datasheet memory - capacity_bytes
    scans: int  # precision results with a recorded capacity
    devices: tuple[str, ...]
    sources: tuple[str, ...]
    # The most memory outside the allocator a trial took after the capacity was read (kernel modules loaded on first
    # use, library handles), seen at its scans' out-of-memory errors: capacity - (reserved + free) there.
    run_overhead_bytes: int = 0
    # The same two figures on a rank of a data-parallel group (scan --gpus N): its capacity (its process group made
    # before it was read) and what NCCL took outside the allocator afterwards; 0 where no group of this card was
    # scanned.
    group_capacity_bytes: int = 0
    group_run_overhead_bytes: int = 0

    @property
    def group_extra_bytes(self) -> int:
        """How much less a rank of a data-parallel group could use than one GPU alone, on this card (0: not scanned in
        a group)."""
        if not self.group_capacity_bytes:
            return 0
        return self.capacity_bytes - self.group_capacity_bytes + self.group_run_overhead_bytes - self.run_overhead_bytes


@dataclass(frozen=True)
class OverheadTable:
    """Every scanned card's row, and where the table comes from."""

    cards: dict[str, ScannedCard]
    made_by: str

    def carried(self) -> ScannedCard | None:
        """The scanned card with the largest overhead: carried over to every card that was not scanned."""
        return max(self.cards.values(), key=lambda c: (c.overhead_bytes, c.card), default=None)

    @property
    def run_overhead_bytes(self) -> int:
        """The most memory a trial took outside the allocator after setup, on any scanned card: subtracted from every
        capacity (it is the kernels' and libraries', which a model on another card loads as well)."""
        return max((c.run_overhead_bytes for c in self.cards.values()), default=0)

    @property
    def group_run_overhead_bytes(self) -> int:
        """The most memory a rank of a data-parallel group took outside the allocator after setup, on any card."""
        return max((c.group_run_overhead_bytes for c in self.cards.values()), default=0)

    @property
    def group_extra_bytes(self) -> int:
        """The most a rank of a data-parallel group lost against one GPU alone, on any card scanned in a group:
        carried to every card or size not scanned in one."""
        return max((c.group_extra_bytes for c in self.cards.values()), default=0)


def default_overhead_path() -> Path:
    """overhead.yaml shipped inside the package."""
    return Path(str((resources.files("memprobe") / "data" / "overhead.yaml")))


def load_overhead_table(path: str | Path | None = None) -> OverheadTable:
    """Read overhead.yaml. Raises OverheadError naming the file and the row."""
    path = Path(path) if path is not None else default_overhead_path()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise OverheadError(f"{path}: cannot read the overhead data ({type(exc).__name__})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("cards"), list):
        raise OverheadError(f"{path}: expected 'made_by' and a list of 'cards'")
    cards = {}
    for i, row in enumerate(data["cards"]):
        try:
            entry = ScannedCard(
                str(row["card"]),
                int(row["capacity_bytes"]),
                int(row["overhead_bytes"]),
                int(row["scans"]),
                tuple(map(str, row["devices"])),
                tuple(map(str, row["sources"])),
                int(row.get("run_overhead_bytes", 0)),
                int(row.get("group_capacity_bytes", 0)),
                int(row.get("group_run_overhead_bytes", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise OverheadError(f"{path}: card #{i + 1} is malformed ({type(exc).__name__}: {exc})") from None
        negative = min(entry.overhead_bytes, entry.run_overhead_bytes, entry.group_capacity_bytes)
        negative = min(negative, entry.group_run_overhead_bytes)
        if entry.capacity_bytes <= 0 or negative < 0:
            raise OverheadError(f"{path}: card #{i + 1} ({entry.card}) has a capacity <= 0 or an overhead < 0")
        cards[entry.card] = entry
    return OverheadTable(cards, str(data.get("made_by", "")))


@lru_cache(maxsize=1)
def default_overhead_table() -> OverheadTable:
    """The packaged table, read once per process."""
    return load_overhead_table()


@dataclass(frozen=True)
class Override:
    """An overhead given explicitly (predict --overhead-from / --overhead): subtracted from every size."""

    bytes: int
    source: str


@dataclass(frozen=True)
class Usable:
    """The capacity the allocator gets out of a memory size, and one sentence saying where it comes from."""

    memory_bytes: int
    capacity_bytes: int
    how: str


def usable_memory(
    label: str,
    memory_bytes: int,
    card: "Card | None" = None,
    override: Override | None = None,
    table: OverheadTable | None = None,
    group: bool = False,
) -> Usable:
    """The allocator capacity of `memory_bytes` (the memory of `card`, or a size given in bytes when None), by the
    module's rule; `group`: on a rank of a data-parallel group (predict --gpus N): a card scanned in one gets the
    capacity its ranks recorded less the most NCCL took outside the allocator in a group, any other card or size what
    it gets alone less the most a rank of a group lost against one GPU on a scanned card (an override is taken as
    given). Raises OverheadError when nothing is left once the overhead is subtracted."""
    table = table or default_overhead_table()
    scanned = table.cards.get(card.name) if card is not None else None
    in_group = group and override is None
    if in_group and scanned is not None and scanned.group_capacity_bytes:
        capacity = scanned.group_capacity_bytes - table.group_run_overhead_bytes
        how = (
            f"the allocator capacity memprobe measured on a rank of a data-parallel group of {scanned.card}s (the "
            f"smallest; memprobe/data/overhead.yaml), less {gib(table.group_run_overhead_bytes, 2)} GiB that NCCL, "
            "kernels and libraries took during the run (the most seen at a group's out-of-memory error)"
        )
    else:
        usable = _alone(memory_bytes, card, override, table, scanned)
        capacity, how = usable.capacity_bytes, usable.how
        if in_group and table.group_extra_bytes:
            capacity -= table.group_extra_bytes
            how += (
                f", less {gib(table.group_extra_bytes, 2)} GiB that a rank of a data-parallel group could not use "
                "(its process group and NCCL's buffers; the most measured on a scanned card)"
            )
    if capacity <= 0:
        raise OverheadError(
            f"{label} is not larger than the {gib(memory_bytes - capacity, 2)} GiB the allocator "
            "cannot use (CUDA context, driver)"
        )
    return Usable(memory_bytes, capacity, how)


def _alone(
    memory_bytes: int, card: "Card | None", override: Override | None, table: OverheadTable, scanned: ScannedCard | None
) -> Usable:
    """usable_memory on one GPU (the capacity may be 0 or less: the caller says so)."""
    if override is not None:
        capacity = memory_bytes - override.bytes
        how = f"{gib(override.bytes, 2)} GiB not allocatable, {override.source}"
    elif scanned is not None:
        capacity = scanned.capacity_bytes
        how = (
            f"the allocator capacity memprobe measured on the {scanned.card} ({scanned.scans} scanned precisions, "
            "the smallest; memprobe/data/overhead.yaml)"
        )
    else:
        carried = table.carried()
        if carried is None:
            return Usable(
                memory_bytes,
                memory_bytes,
                "no scanned card in memprobe/data/overhead.yaml: nothing subtracted, so the prediction is optimistic",
            )
        capacity = memory_bytes - carried.overhead_bytes
        how = (
            f"{gib(carried.overhead_bytes, 2)} GiB not allocatable, measured on the {carried.card} and carried "
            "over (not measured on this " + ("card" if card is not None else "size") + "; memprobe/data/overhead.yaml)"
        )
    if override is None and table.run_overhead_bytes:
        capacity -= table.run_overhead_bytes
        how += (
            f", less {gib(table.run_overhead_bytes, 2)} GiB that kernels and libraries took during the run (the most "
            "seen at a scan's out-of-memory error)"
        )
    return Usable(memory_bytes, capacity, how)


def overhead_from_files(paths: Sequence[str | Path]) -> Override:
    """The overhead measured in the newest result file under `paths` that recorded an allocator capacity (an
    explicit override). Raises OverheadError for a path that is not there or no usable scan under them."""
    from memprobe.core.records.results import load_results

    missing = [str(p) for p in paths if not Path(p).exists()]
    if missing:
        raise OverheadError(f"--overhead-from: {', '.join(missing)} does not exist")
    results = load_results([Path(p) for p in paths], strict_files=False)
    results.sort(key=lambda item: item[1].created_at, reverse=True)  # the newest measurement first
    catalog = default_catalog()
    for path, result in results:
        for p in result.precisions.values():
            found = overhead_for(result, p, catalog)
            if found is not None:
                return Override(found.bytes, f"from --overhead-from, {found.describe()} ({path})")
    raise OverheadError(
        f"--overhead-from: no scan result with a recorded allocator capacity in {', '.join(str(p) for p in paths)}"
    )


def choose_override(paths: Sequence[str | Path] | None = None, size: str | int | None = None) -> Override | None:
    """The overhead that replaces the shipped figures: measured in the result files `paths` (overhead_from_files),
    or `size` given directly (bytes or a size such as '1.5GiB'; 0 subtracts nothing); None when neither is given.
    Raises OverheadError for both, a size that is not one or is negative, or paths without a usable scan."""
    from memprobe.core.text.units import parse_size

    if paths and size is not None:
        raise OverheadError("give --overhead-from (overhead_from) or --overhead (overhead), not both")
    if size is not None:
        try:
            nbytes = size if isinstance(size, int) and not isinstance(size, bool) else parse_size(str(size))
        except ValueError as exc:
            raise OverheadError(f"--overhead: {exc}") from None
        if nbytes < 0:
            raise OverheadError(f"--overhead must be 0 or more, got {size!r}")
        return Override(nbytes, "given with --overhead")
    return overhead_from_files(paths) if paths else None
