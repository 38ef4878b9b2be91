"""Byte sizes: parse "24GiB" / "11GB" / "512MiB", format bytes for people. No torch."""

from __future__ import annotations

import re
from decimal import Decimal

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
}


def parse_size(text: str) -> int:
    """Parse a size such as '24GiB', '11 GB', '1.5g' or '1024' into bytes. Raises ValueError."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text or "")
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: '{text}' (examples: 24GiB, 11GB, 512MiB)")
    # Decimal, not float: "4.1GB" must be 4100000000 bytes, not 4099999999.
    return int(Decimal(match.group(1)) * _UNITS[match.group(2).lower()])


def gib(value: float | int | None, digits: int = 1) -> str:
    """Bytes as GiB text, or '-' for None."""
    return "-" if value is None else f"{value / 2**30:.{digits}f}"
