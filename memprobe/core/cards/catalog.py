"""The GPU catalog (memprobe/data/gpus.yaml): card facts, device-name matching and peak TFLOP/s.

No torch here. The catalog answers three questions: which card is this device name ("NVIDIA H100 80GB HBM3"
is an H100 SXM), what are its memory, dense peaks, bandwidth, power and price (each with a source), and
what is its peak for a precision (for MFU). Values that are not sourced are None, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from memprobe.core.cards.memcap import is_emulated

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
# TF32 and BF16 tensor cores arrived with Ampere (compute capability 8.0).
_NEEDS_AMPERE = ("tf32", "bf16")


class CatalogError(ValueError):
    """The catalog file is missing or malformed (a packaging bug, or a bad --catalog file)."""


@dataclass(frozen=True)
class Price:
    """One typical price: USD, when, and the source id that gives it."""

    usd: float
    date: str
    source: str
    note: str = ""


@dataclass(frozen=True)
class Card:
    """One catalog card. memory_bytes is the datasheet capacity (GiB-based), not what a process can allocate."""

    name: str
    aliases: tuple[str, ...]
    device_patterns: tuple[str, ...]
    architecture: str
    compute_capability: str
    memory_bytes: int
    peak_tflops: dict[str, float | None]
    peak_source: str
    bandwidth_gb_s: float | None
    tdp_w: float | None
    spec_source: str
    prices: tuple[Price, ...] = field(default_factory=tuple)
    # The total the driver reports (NVML, nvidia-smi) on a real card, and where that figure comes from;
    # None where no one has read it on a real card (then the datasheet size stands in, labelled so).
    driver_total_bytes: int | None = None
    driver_total_source: str = ""

    @property
    def price(self) -> Price | None:
        """The typical price (the first listed), or None when none is sourced."""
        return self.prices[0] if self.prices else None

    def supports(self, precision: str) -> bool:
        """Whether the card can train in this precision at all (tf32/bf16 need compute capability >= 8.0)."""
        if precision in _NEEDS_AMPERE:
            major = int(self.compute_capability.split(".")[0])
            return major >= 8
        return True

    def matches(self, name: str) -> bool:
        """True when `name` is this card's name or an alias (case-insensitive), or a device pattern matches it."""
        folded = name.strip().casefold()
        if folded == self.name.casefold() or any(folded == a.casefold() for a in self.aliases):
            return True
        return any(re.search(p, name, flags=re.IGNORECASE) for p in self.device_patterns)


@dataclass(frozen=True)
class Catalog:
    """All cards in file order, the source ids with their citations, and the cards a name that fits several
    resolves to (cardnames.resolve_card), in order of preference."""

    cards: tuple[Card, ...]
    sources: dict[str, str]
    preferred: tuple[str, ...] = ()
    # name -> what find answered: a report asks about the same few names thousands of times
    _found: dict[str, Card | None] = field(default_factory=dict, compare=False, repr=False)

    def find(self, name: str) -> Card | None:
        """The card a device, catalog or published name refers to, or None. Exact names win over patterns.

        An emulated card (scan --memory-cap) is no catalog card, whatever chip it ran on.
        """
        if name not in self._found:
            self._found[name] = self._search(name)
        return self._found[name]

    def _search(self, name: str) -> Card | None:
        if is_emulated(name):
            return None
        folded = name.strip().casefold()
        for card in self.cards:
            if folded == card.name.casefold() or any(folded == a.casefold() for a in card.aliases):
                return card
        for card in self.cards:
            if any(re.search(p, name, flags=re.IGNORECASE) for p in card.device_patterns):
                return card
        return None

    def canonical(self, name: str) -> str:
        """The catalog name for a device or published name; the name itself when the catalog does not know it."""
        card = self.find(name)
        return card.name if card else name


def default_catalog_path() -> Path:
    """The gpus.yaml shipped inside the package."""
    return Path(str((resources.files("memprobe") / "data" / "gpus.yaml")))


def load_catalog(path: str | Path | None = None) -> Catalog:
    """Read and validate a catalog file. Raises CatalogError naming the file and the card."""
    path = Path(path) if path is not None else default_catalog_path()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read the GPU catalog ({exc.strerror or exc})") from exc
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path}: malformed YAML in the GPU catalog: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("cards"), list):
        raise CatalogError(f"{path}: expected 'sources' and a list of 'cards'")
    sources = {str(k): str(v) for k, v in (data.get("sources") or {}).items()}
    cards = tuple(_card(entry, f"{path}: card #{i + 1}") for i, entry in enumerate(data["cards"]))
    names = [c.name for c in cards]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise CatalogError(f"{path}: duplicate card name(s) {', '.join(dupes)}")
    preferred = tuple(str(n) for n in data.get("preferred") or ())
    unknown = [n for n in preferred if n not in names]
    if unknown:
        raise CatalogError(f"{path}: 'preferred' names no card {', '.join(unknown)}")
    return Catalog(cards=cards, sources=sources, preferred=preferred)


def _number(value: Any, where: str, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CatalogError(f"{where}: {what} must be a number or null, got {value!r}")
    return float(value)


def _card(entry: Any, where: str) -> Card:
    if not isinstance(entry, dict) or not entry.get("name"):
        raise CatalogError(f"{where}: expected a mapping with a name")
    where = f"{where} ({entry['name']})"
    for key in ("memory_gib", "compute_capability", "spec_source", "peak_source"):
        if entry.get(key) in (None, ""):
            raise CatalogError(f"{where}: '{key}' is required (every row names its source)")
    peaks = entry.get("peak_tflops") or {}
    if not isinstance(peaks, dict) or set(peaks) - set(PRECISIONS):
        raise CatalogError(f"{where}: peak_tflops must map some of {', '.join(PRECISIONS)} to numbers")
    prices = []
    for p in entry.get("prices") or []:
        if not isinstance(p, dict) or not p.get("source") or not p.get("date"):
            raise CatalogError(f"{where}: each price needs usd, date and source")
        prices.append(
            Price(
                usd=_number(p.get("usd"), where, "price usd") or 0.0,
                date=str(p["date"]),
                source=str(p["source"]),
                note=str(p.get("note", "")),
            )
        )
    return Card(
        name=str(entry["name"]),
        aliases=tuple(str(a) for a in entry.get("aliases") or ()),
        device_patterns=tuple(str(p) for p in entry.get("device_patterns") or ()),
        architecture=str(entry.get("architecture", "")),
        compute_capability=str(entry["compute_capability"]),
        memory_bytes=int(round((_number(entry["memory_gib"], where, "memory_gib") or 0.0) * 2**30)),  # not null: above
        peak_tflops={p: _number(peaks.get(p), where, f"peak_tflops.{p}") for p in PRECISIONS},
        peak_source=str(entry["peak_source"]),
        bandwidth_gb_s=_number(entry.get("bandwidth_gb_s"), where, "bandwidth_gb_s"),
        tdp_w=_number(entry.get("tdp_w"), where, "tdp_w"),
        spec_source=str(entry["spec_source"]),
        prices=tuple(prices),
        **_driver_total(entry, where),
    )


def _driver_total(entry: dict[str, Any], where: str) -> dict[str, Any]:
    """driver_total_mib (with its required driver_total_source) as Card fields; {} when absent."""
    mib = _number(entry.get("driver_total_mib"), where, "driver_total_mib")
    if mib is None:
        return {}
    if mib <= 0 or not entry.get("driver_total_source"):
        raise CatalogError(f"{where}: driver_total_mib must be positive and name its driver_total_source")
    return {"driver_total_bytes": int(mib) * 2**20, "driver_total_source": str(entry["driver_total_source"])}


@lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    """The packaged catalog, read once per process."""
    return load_catalog()


def find_card(device_name: str) -> Card | None:
    """The packaged catalog's card for a torch/NVML device name (or a catalog/published name), or None."""
    return default_catalog().find(device_name)


def peak_tflops(device_name: str, precision: str) -> float | None:
    """Dense peak TFLOP/s of this device in this precision, for MFU; None when unknown or unsupported.

    `device_name` is what torch or NVML report ("NVIDIA H100 80GB HBM3"); `precision` one of fp32, tf32,
    fp16, bf16 (memprobe's names). Never raises for an unknown card or precision: the caller says "no MFU".
    """
    card = find_card(device_name)
    if card is None or precision not in PRECISIONS or not card.supports(precision):
        return None
    return card.peak_tflops.get(precision)
