"""The names people type for a GPU ("H100", "a100 80gb", "RTX 4090", "4090") resolved to one catalog card. No torch.

One function, resolve_card, for every command that takes a card by name (predict --gpu, guide --gpu). The rule:
1. Case, spaces, '-' and '_' do not matter, nor the brand words NVIDIA, GeForce and Tesla; a name equal to a
   card's catalog name or alias is that card.
2. Otherwise the name's words must all be among one card's words (its name and aliases: "4090" is the GeForce
   RTX 4090; "sxm" matches SXM2/SXM4/SXM5). One card: that card. Where none fits and letters run into digits
   ("RTX4090", "rtx8000"), the words split there are tried the same way.
3. Several cards (H100 = SXM or PCIe; A100 = 40 or 80 GB): the first of the catalog's `preferred` list that fits
   (the form most often rented), with a note naming the others; none of them preferred: an error naming them.
4. No card: an error with the three closest names (difflib). A memory size alone ("80GB") is refused, pointing at
   predict's --memory: it would fit every card of that size. Characters that cannot be in a card name (anything
   but ASCII letters, digits, spaces and - _ . ( ) /) are refused, so "H200 ☃" is not quietly the H200.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from memprobe.core.cards.catalog import Card, Catalog, default_catalog

# Words a card's name may carry or not: "NVIDIA GeForce RTX 4090" is the "RTX 4090".
_BRAND_WORDS = {"nvidia", "geforce", "tesla"}
_ALLOWED = re.compile(r"^[A-Za-z0-9 \-_.()/]+$")
_SIZE = re.compile(r"^\d+(\.\d+)?\s*[kmgt]i?b$", re.IGNORECASE)  # a size alone ("80GB", "24 GiB"), no card word
_MAX_NAME = 60  # longer than any catalog name or alias; a longer "name" is quoted shortened in the error


class CardNameError(ValueError):
    """A card name that names no catalog card, or several with none preferred; the message is one line."""


@dataclass(frozen=True)
class ResolvedCard:
    """The card a name resolved to, and a note when the name also fits other cards (else "")."""

    card: Card
    note: str = ""


def _words(text: str) -> tuple[str, ...]:
    """The words of a name, lower-case, without brand words; '80 GB' is one word '80gb', '2080Ti' two."""
    text = re.sub(r"(\d)\s*(gb|gib)\b", r"\1gb", text.casefold())
    text = re.sub(r"(\d)(ti|super|sxm\d?|pcie)\b", r"\1 \2", text)
    return tuple(w for w in re.split(r"[^a-z0-9]+", text) if w and w not in _BRAND_WORDS)


def _split(words: tuple[str, ...] | set[str]) -> tuple[str, ...]:
    """Words split where letters run into digits: "rtx4090" -> "rtx", "4090" (digits into letters stay: "80gb")."""
    return tuple(part for w in words for part in re.sub(r"([a-z])(\d)", r"\1 \2", w).split())


def _card_words(card: Card) -> set[str]:
    words: set[str] = set()
    for name in (card.name,) + card.aliases:
        for w in _words(name):
            words.add(w)
            form = re.fullmatch(r"(sxm|pcie)\d*", w)
            if form:
                words.add(form.group(1))  # "sxm" fits SXM2, SXM4 and SXM5 boards
    return words


def _shown(name: str) -> str:
    return name if len(name) <= _MAX_NAME else name[:_MAX_NAME] + "..."


def closest_names(name: str, catalog: Catalog, n: int = 3) -> list[str]:
    """The n catalog card names closest to `name` (difflib over names and aliases), closest first."""
    keys: dict[str, str] = {}
    for card in catalog.cards:
        for alias in (card.name,) + card.aliases:
            keys.setdefault(" ".join(_words(alias)), card.name)
    out: list[str] = []
    for key in difflib.get_close_matches(" ".join(_words(name)), list(keys), n=len(keys), cutoff=0.0):
        if keys[key] not in out:
            out.append(keys[key])
        if len(out) == n:
            break
    return out


def is_memory_size(name: str) -> bool:
    """Whether `name` is a memory size alone ("80GB", "24 GiB"), not a card's name."""
    return bool(_SIZE.match(name.strip()))


def resolve_card(name: str, catalog: Catalog | None = None) -> ResolvedCard:
    """The catalog card `name` refers to, by the module's rule. Raises CardNameError (one line)."""
    catalog = catalog or default_catalog()
    text = name.strip()
    if not text:
        raise CardNameError('empty card name (e.g. H100, "A100 80GB", 4090)')
    if not _ALLOWED.match(text):
        raise CardNameError(
            f"'{_shown(text)}' is not a card name (letters, digits, spaces and - _ . ( ) / "
            "only); `memprobe guide` lists the catalog"
        )
    if is_memory_size(text):  # "80GB" fits every 80 GB card: taken as one of them, the size would be lost
        raise CardNameError(
            f"'{text}' is a memory size, not a card name: `memprobe predict --memory {text.replace(' ', '')}` "
            'predicts for a size; --gpu takes a card (H100, "A100 80GB", 4090)'
        )
    words = _words(text)
    if not words:
        raise CardNameError(f"'{_shown(text)}' names no card; `memprobe guide` lists the catalog")
    for card in catalog.cards:
        if any(_words(alias) == words for alias in (card.name,) + card.aliases):
            return ResolvedCard(card)
    fits = [card for card in catalog.cards if set(words) <= _card_words(card)]
    if not fits and _split(words) != words:
        fits = [card for card in catalog.cards if set(_split(words)) <= set(_split(_card_words(card)))]
    if len(fits) == 1:
        return ResolvedCard(fits[0])
    if fits:
        chosen = next((c for p in catalog.preferred for c in fits if c.name == p), None)
        others = ", ".join(c.name for c in fits if c is not chosen)
        if chosen is None:
            raise CardNameError(f"'{_shown(text)}' fits several cards ({others}); give one of them")
        return ResolvedCard(
            chosen,
            f"'{text}' taken as the {chosen.name} (the most common form); it also fits "
            f"{others} (give that name for it)",
        )
    close = closest_names(text, catalog)
    raise CardNameError(
        f"unknown GPU '{_shown(text)}'; closest catalog names: {', '.join(close)} (`memprobe guide` lists them all)"
    )


def resolve_cards(names: str | None, catalog: Catalog | None = None) -> list[ResolvedCard]:
    """Each card of a comma-separated list, in order (duplicates kept once, the first saying so in its note). Raises
    CardNameError for a bad name or an empty list."""
    if names is None:
        return []
    items = [t.strip() for t in names.split(",")]
    if not any(items):
        raise CardNameError('no card name given (e.g. H100, or "H100 SXM,A100 80GB")')
    out: list[ResolvedCard] = []
    for item in items:
        if not item:
            continue
        found = resolve_card(item, catalog)
        first = next((i for i, r in enumerate(out) if r.card.name == found.card.name), None)
        if first is None:
            out.append(found)
            continue
        again = f"'{item}' is the {found.card.name} again: taken once"
        out[first] = ResolvedCard(out[first].card, f"{out[first].note}; {again}" if out[first].note else again)
    return out
