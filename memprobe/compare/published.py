"""Published training figures (memprobe/data/published.csv): load them and say what they may be compared with.

No torch here. The file is a verbatim transcription of the reference tables (the 2020 study and the 2023-2025
PyTorch catalog); every row carries its source, date, implementation, unit and caveats. memprobe never
mixes these into its own measurements unmarked: callers show them as published.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

# Short citations for the notes under a table; the CSV's `reference` column has the exact table/file.
SOURCES: dict[str, str] = {
    "lambda-2020": "Lambda, 'Choosing the Best GPU for Deep Learning in 2020' (Feb 2020), tables of max batch and "
    "throughput; max batch = largest power-of-two that trained (a lower bound)",
    "lambda-2019-sweeps": "raw April 2019 sweeps behind the 2020 study (fairseq Transformer Big FP16, batch in tokens); "
    "largest fitting grid point (a lower bound)",
    "lambda-bench": "lambdal/deeplearning-benchmark PyTorch catalog 2023-2025 (commit aa5addb6), single-GPU rows; "
    "batch sizes hand-picked per memory size, not searched; its 'FP32' is TF32 on Ampere and newer",
}

METRICS = ("max_batch", "throughput")
FIELDS = (  # the columns of published.csv and published_multi_gpu.csv
    "source",
    "date",
    "gpu",
    "gpu_as_published",
    "num_gpu",
    "workload",
    "memprobe_workload",
    "precision",
    "metric",
    "value",
    "unit",
    "implementation",
    "reference",
    "caveat",
)


class PublishedDataError(ValueError):
    """The published-figures file is missing or malformed."""


@dataclass(frozen=True)
class Figure:
    """One published number: one source, card, workload, precision and metric.

    value is None where the source printed '-'. unit is the batch unit for max_batch ("images", "tokens")
    and a rate for throughput ("images/s"). memprobe_workload is "" when no memprobe workload matches.
    """

    source: str
    date: str
    gpu: str
    gpu_as_published: str
    workload: str
    memprobe_workload: str
    precision: str
    metric: str
    value: float | None
    unit: str
    implementation: str
    reference: str
    caveat: str
    num_gpu: int = 1  # > 1: a machine's figure, all its GPUs together (published_multi_gpu.csv)

    @property
    def is_lower_bound(self) -> bool:
        """A published max batch is never a searched maximum: any value above 0 is a batch that fit."""
        return self.metric == "max_batch" and bool(self.value)


def default_published_path() -> Path:
    """The published.csv shipped inside the package."""
    return Path(str((resources.files("memprobe") / "data" / "published.csv")))


def default_published_multi_gpu_path() -> Path:
    """The published_multi_gpu.csv shipped inside the package (machines of several GPUs)."""
    return Path(str((resources.files("memprobe") / "data" / "published_multi_gpu.csv")))


def load_published(path: str | Path | None = None, multi_gpu: bool = False) -> list[Figure]:
    """Read the published figures: one-GPU rows, or with `multi_gpu` machines of several GPUs (default file:
    published_multi_gpu.csv). Raises PublishedDataError naming the file and the line."""
    if path is None:
        path = default_published_multi_gpu_path() if multi_gpu else default_published_path()
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PublishedDataError(f"{path}: cannot read published figures ({exc.strerror or exc})") from exc
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    reader = csv.DictReader(lines)
    missing = set(FIELDS) - set(reader.fieldnames or ())
    if missing:
        raise PublishedDataError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
    figures = []
    for number, row in enumerate(reader, start=2):
        if row["metric"] not in METRICS:
            raise PublishedDataError(f"{path}: data line {number}: unknown metric '{row['metric']}'")
        if (row["num_gpu"] != "1") != multi_gpu or not row["num_gpu"].isdigit():
            where = "GPU counts above 1" if multi_gpu else "single-GPU rows"
            raise PublishedDataError(
                f"{path}: data line {number}: num_gpu '{row['num_gpu']}': only {where} belong here"
            )
        try:
            value = float(row["value"]) if row["value"].strip() else None
        except ValueError:
            raise PublishedDataError(f"{path}: data line {number}: value '{row['value']}' is not a number") from None
        figures.append(
            Figure(
                source=row["source"],
                date=row["date"],
                gpu=row["gpu"],
                gpu_as_published=row["gpu_as_published"],
                workload=row["workload"],
                memprobe_workload=row["memprobe_workload"],
                precision=row["precision"],
                metric=row["metric"],
                value=value,
                unit=row["unit"],
                implementation=row["implementation"],
                reference=row["reference"],
                caveat=row["caveat"],
                num_gpu=int(row["num_gpu"]),
            )
        )
    return figures


@lru_cache(maxsize=1)
def default_published() -> tuple[Figure, ...]:
    """The packaged figures, read once per process."""
    return tuple(load_published())


def comparable(figures: list[Figure] | tuple[Figure, ...] | None = None) -> list[Figure]:
    """Only the figures that map to a memprobe workload (the others are kept in the file for completeness)."""
    figures = default_published() if figures is None else figures
    return [f for f in figures if f.memprobe_workload]
