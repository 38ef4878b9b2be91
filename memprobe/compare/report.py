"""`memprobe report`: assemble the comparison tables and render them as github/plain/csv/json.

No torch.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from memprobe.compare.comparison import FORMATS, LEGEND, Comparison, build_comparison
from memprobe.compare.relative import Relative, relative_table, relative_throughput
from memprobe.compare.tables import (
    Cell,
    Table,
    gains_table,
    max_batch_table,
    source_notes,
    throughput_table,
    utilization_table,
)
from memprobe.core.records.results import ScanResult
from memprobe.core.records.versions import LIBRARIES, release
from memprobe.core.text import textwidth


def report_tables(comparison: Comparison, relative: Relative, basis: Any = None) -> list[Table]:
    """All the comparison tables, in the order `memprobe report` prints them; throughput and gains like for like
    where a `basis` (compare.curves.Basis) is given, else at B."""
    like, label = (basis.comparison, basis.label) if basis is not None else (comparison, "")
    tables = [
        max_batch_table(comparison),
        throughput_table(like, label),
        relative_table(relative),
        gains_table(like, label),
    ]
    util = utilization_table(comparison)
    if util.rows:
        tables.append(util)
    return tables


def _cell_json(cell: Any) -> Any:
    if isinstance(cell, Cell):
        return {"text": cell.text, "value": cell.value, "origin": cell.origin}
    return cell


def render(tables: Sequence[Table], fmt: str = "github", title: str = "", notes: Sequence[str] = ()) -> str:
    """Tables as text in one of FORMATS: github (markdown), plain, csv (one block per table), json.

    Raises ValueError for an unknown format.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format '{fmt}' (choose from {', '.join(FORMATS)})")
    if fmt == "json":
        return json.dumps(
            {
                "title": title,
                "notes": list(notes),
                "tables": [
                    {
                        "key": t.key,
                        "title": t.title,
                        "columns": t.columns,
                        "notes": t.notes,
                        "rows": [dict(zip(t.columns, map(_cell_json, row))) for row in t.rows],
                    }
                    for t in tables
                ],
            },
            indent=1,
        )
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        for line in ([title] if title else []) + list(notes):
            out.write(f"# {line}\n")
        for t in tables:
            out.write(f"\n# {t.title}\n")
            writer.writerow(t.columns)
            writer.writerows([[str(c) for c in row] for row in t.rows])
            for n in t.notes:
                out.write(f"# {n}\n")
        return out.getvalue()
    bullet = "- " if fmt == "github" else "  "
    rest = "  " if fmt == "github" else "    "
    parts = []
    if title:
        parts.append(f"## {title}" if fmt == "github" else f"{title}\n{'=' * len(title)}")
    if notes:
        parts.append(textwidth.notes_text(notes, bullet, rest))
    for t in tables:
        title, said = _heading(t.title)
        heading = f"### {title}" if fmt == "github" else f"{title}\n{'-' * len(title)}"
        heading += f"\n\n{textwidth.wrap(said, '', '')}" if said else ""
        body = textwidth.table(t.columns, t.rows, fmt, t.keep) if t.rows else "(no rows)"
        tail = textwidth.notes_text(t.notes, bullet, rest)
        parts.append("\n\n".join(x for x in (heading, body, tail) if x))
    return "\n\n".join(parts) + "\n"


def _heading(title: str) -> tuple[str, str]:
    """A table's title as a heading that fits textwidth.width(), and what did not fit (its last parenthesis, said
    under the heading instead; "" when it fits whole)."""
    columns = textwidth.width()
    if columns is None or len(title) + 4 <= columns or " (" not in title or not title.endswith(")"):
        return title, ""
    head, _, said = title.rpartition(" (")
    return head, said[:-1][:1].upper() + said[:-1][1:] + "."


def comparison_report(
    loaded: Sequence[tuple[Path, ScanResult]],
    reference: str | None = None,
    precisions: Sequence[str] | None = None,
    fmt: str = "github",
    with_published: bool = False,
    at_batch: str = "best",
) -> tuple[str, Comparison, Relative]:
    """Build and render `memprobe report`: returns the text and the data behind it (for charts): the comparison
    like for like (its throughputs at b* by default, as the tables') and the relative throughput.

    `at_batch` picks the like-for-like figure normalized (compare.curves: best, common or max).
    Raises ReportError (nothing to report, unknown reference or at_batch) and ValueError (unknown format).
    """
    built = build_report(loaded, reference, precisions, with_published, at_batch)
    return render(built.tables, fmt, built.title, built.notes), built.basis.comparison, built.relative


@dataclass
class Report:
    """`memprobe report` before rendering: its title, notes and tables, and the data behind them."""

    title: str
    notes: list[str]
    tables: list[Table]
    comparison: Comparison
    relative: Relative
    basis: Any  # compare.curves.Basis: the like-for-like comparison the relative table normalizes


def library_notes(results: Sequence[ScanResult]) -> list[str]:
    """A note when the results ran different versions of torch, transformers or timm (environment.versions): a
    version can change a model's code path, so figures side by side may not be like for like. [] when they agree."""
    seen: dict[tuple[str, ...], int] = {}
    for r in results:
        versions = r.environment.versions
        if not isinstance(versions, dict):
            continue
        key = tuple(release(versions.get(name, "?")) for name in LIBRARIES)
        seen[key] = seen.get(key, 0) + 1
    if len(seen) < 2:
        return []
    sets = "; ".join(
        ", ".join(f"{name} {v}" for name, v in zip(LIBRARIES, key)) + f" ({n} file{'s' if n > 1 else ''})"
        for key, n in sorted(seen.items())
    )
    return [
        f"The results ran different library versions: {sets}. A version can change a model's code path and so its "
        "memory and speed: compare like with like."
    ]


def build_report(
    loaded: Sequence[tuple[Path, ScanResult]],
    reference: str | None = None,
    precisions: Sequence[str] | None = None,
    with_published: bool = False,
    at_batch: str = "best",
) -> Report:
    """The comparison, its like-for-like basis, the throughput relative to `reference` and the tables of
    `memprobe report` in its order. Raises ReportError (nothing to report, unknown reference or at_batch)."""
    from memprobe.compare.curves import like_for_like, with_basis
    from memprobe.compare.generation import NOTES, generation_rows

    comparison = build_comparison(loaded, with_published=with_published, precisions=precisions)
    basis = like_for_like(comparison, at_batch)
    relative = relative_throughput(basis.comparison, reference)
    relative.basis = basis.label
    notes = [LEGEND] + comparison.notes + source_notes(comparison) + library_notes([r for _p, r in loaded])
    title = f"memprobe report: {len(loaded)} result file(s)" + (" + published figures" if with_published else "")
    tables = with_basis(report_tables(comparison, relative, basis), basis, comparison)
    generated = generation_rows(loaded)
    if generated:  # scans of --mode generate: the KV cache, the capacity and the tokens/s at B
        columns = list(generated[0])
        rows = [[row[c] for c in columns] for row in generated]
        tables.append(
            Table("generation", "Generation with a static KV cache (--mode generate)", columns, rows, NOTES, keep=3)
        )
    return Report(title, notes, tables, comparison, relative, basis)
