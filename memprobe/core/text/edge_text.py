"""The repeat rule in words: "B 7093, 2 of 2 fresh runs; 7094-7100 flaky (7094: 1 of 2 fitted, ...)".

No torch. One wording for the scan's notes, the scan and scaling tables (text report and HTML page) and the zoo's
table, read from a proof record (core/records.Proof); a file from before the repeat rule says nothing of it.
"""

from __future__ import annotations

from memprobe.core.records.records import Band, Proof


def runs_text(proof: Proof | None, short: bool = False) -> str:
    """How many of B's fresh runs fitted, "2 of 2 fresh runs" ("2 of 2" when `short`, for a table's cell); "" for a
    file from before the repeat rule."""
    if proof is None or proof.runs_at_b is None or proof.fits_at_b is None:
        return ""
    said = f"{proof.fits_at_b} of {proof.runs_at_b}"
    return said if short else f"{said} fresh run{'s' if proof.runs_at_b != 1 else ''}"


def band_span(band: Band) -> str:
    """The band's batches, "7094-7100" (one batch: "7094")."""
    return str(band.low) if band.low == band.high else f"{band.low}-{band.high}"


def band_text(proof: Proof | None, counts: bool = True) -> str:
    """The flaky band, "7094-7100 flaky (7094: 1 of 2 fitted, 7100: 1 of 1)", without the counts when `counts` is
    False; "" when none was seen."""
    band = proof.band if proof is not None else None
    if band is None:
        return ""
    text = f"{band_span(band)} flaky"
    if counts and band.runs:
        runs = [f"{r.batch}: {r.fits} of {r.fits + r.fails}" for r in band.runs]
        runs[0] += " fitted"
        text += f" ({', '.join(runs)})"
    return text


def edge_text(max_batch: int | None, proof: Proof | None, counts: bool = True) -> str:
    """B with its fresh runs and the flaky band: "B 7093, 2 of 2 fresh runs; 7094-7100 flaky (...)"; "" without B."""
    if max_batch is None:
        return ""
    parts = [f"B {max_batch}" + (f", {runs_text(proof)}" if runs_text(proof) else "")]
    if band_text(proof, counts):
        parts.append(band_text(proof, counts))
    return "; ".join(parts)
