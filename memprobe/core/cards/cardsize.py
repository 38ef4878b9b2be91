"""Turn `--memory` sizes and `--gpu` card names into the memory sizes a prediction is made for. No torch.

People think in card names ("H200"), the driver in bytes (143771 MiB), datasheets in decimal-looking
sizes ("141 GB"). A card given by name gets the total its driver reports (catalog field
driver_total_mib, with its source), or its datasheet size where no one has read the driver's figure,
said so. A size given in bytes is read exactly as written, and the reading is said back (141GB is
decimal: 131.3 GiB), with a hint when it looks like a card's datasheet size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memprobe.core.cards.cardnames import CardNameError, resolve_cards
from memprobe.core.cards.catalog import Card, Catalog, default_catalog
from memprobe.core.text.units import parse_size


class SizeError(ValueError):
    """A --memory size or --gpu name that cannot be used; the message is one line, `option` the option to blame."""

    def __init__(self, message: str, option: str = "--memory") -> None:
        super().__init__(message)
        self.option = option


@dataclass
class Sizes:
    """(label, bytes) per memory size to predict for, notes saying how each was read, and the card of each label
    given by card name."""

    labels: list[tuple[str, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cards: dict[str, Card] = field(default_factory=dict)


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.0f} MiB"


def card_size(card: Card) -> tuple[int, str]:
    """The memory to predict for on `card`: (bytes, how it was chosen). The driver-reported total where the
    catalog records one, else the datasheet size (labelled as such: the real total is a little lower)."""
    if card.driver_total_bytes:
        return card.driver_total_bytes, (
            f"{card.name}: {_mib(card.driver_total_bytes)} as the driver reports it ({card.driver_total_source})"
        )
    return card.memory_bytes, (
        f"{card.name}: no driver-reported total in the catalog, so the datasheet size "
        f"{card.memory_bytes / 2**30:g} GiB is used; a real card reports a little less, so the "
        "prediction may be one or two batches high"
    )


def _datasheet_match(nbytes: int, catalog: Catalog) -> list[Card]:
    """Cards whose datasheet size this is, read as GB or as GiB (141GB, 141GiB, 80GB ...)."""
    out = []
    for card in catalog.cards:
        gib_size = card.memory_bytes / 2**30
        if nbytes in (card.memory_bytes, int(round(gib_size * 10**9))):
            out.append(card)
    return out


# No GPU has had more than a few hundred GB; a size past this is a typo, not a card.
MAX_MEMORY_BYTES = 16 * 2**40


def read_sizes(memory: str | None, gpus: str | None, catalog: Catalog | None = None, hints: bool = True) -> Sizes:
    """The sizes named by `memory` (comma-separated byte sizes) and `gpus` (comma-separated card names, resolved by
    cardnames.resolve_card), in that order. Raises SizeError for an unreadable or non-positive size, an unknown or
    empty card name, a size past MAX_MEMORY_BYTES, or nothing given at all. `hints`: say how each size was read and
    name the cards whose datasheet size it is (off for memprobe's own default sizes)."""
    catalog = catalog or default_catalog()
    sizes = Sizes()
    for item in (t.strip() for t in (memory or "").split(",")):
        if not item:
            continue
        try:
            nbytes = parse_size(item)
        except ValueError as exc:
            raise SizeError(str(exc)) from None
        if nbytes <= 0:
            raise SizeError(f"memory size '{item}' must be larger than 0 (e.g. 24GiB)")
        if nbytes > MAX_MEMORY_BYTES:
            raise SizeError(f"memory size '{item}' is more than any GPU has (at most {MAX_MEMORY_BYTES // 2**40}TiB)")
        same = next((label for label, known in sizes.labels if known == nbytes), None)
        if same is not None:  # "24GiB,24GiB": one prediction, not two alike, and said so
            twice = "given twice" if item == same else f"{same} again ({nbytes:,} bytes)"
            sizes.notes.append(f"--memory {item} is {twice}: predicted once")
            continue
        sizes.labels.append((item, nbytes))
        if not hints:
            continue
        unit = item.lstrip("0123456789. ").lower()
        if unit in ("gb", "mb", "tb", "kb"):
            sizes.notes.append(
                f"{item} read as decimal {unit.upper()}: {nbytes:,} bytes = {nbytes / 2**30:.2f} GiB "
                f"(write {item[: -len(unit)].strip()}{unit[0].upper()}iB for binary)"
            )
        elif unit in ("", "b", "k", "m", "g", "t"):
            sizes.notes.append(f"{item} read as {nbytes:,} bytes = {nbytes / 2**30:.2f} GiB")
        matches = _datasheet_match(nbytes, catalog)
        if matches:
            names = ", ".join(f'--gpu "{c.name}"' for c in matches[:3])
            sizes.notes.append(
                f"{item} is the datasheet size of {', '.join(c.name for c in matches[:3])}; "
                f"a real card reports a different total: {names} uses the card's own figure"
            )
    try:
        resolved = resolve_cards(gpus, catalog)
    except CardNameError as exc:
        raise SizeError(str(exc), "--gpu") from None
    for found in resolved:
        nbytes, how = card_size(found.card)
        sizes.labels.append((found.card.name, nbytes))
        sizes.cards[found.card.name] = found.card
        sizes.notes += [n for n in (found.note, how) if n]
    if not sizes.labels:
        raise SizeError("give at least one memory size (--memory 24GiB) or card (--gpu H200)", "--memory")
    return sizes
