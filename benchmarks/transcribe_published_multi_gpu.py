"""Transcribe the published multi-GPU rows (lambdal/deeplearning-benchmark, ../shared/reference/) into
memprobe/data/published_multi_gpu.csv, verbatim: mixed-precision throughput and batch of every machine
with num_gpu > 1, for the two workloads memprobe has (bert_large_squad, resnet50).

`gpu` is the name of the same card's one-GPU row in published.csv ("2x A100 80GB SXM4" -> "A100 80GB SXM4",
"LambdaCloud 2x H100 80GB SXM5" -> "LambdaCloud 1x H100 80GB SXM5"), so the scaling against one GPU can be
read off the two files; `gpu_as_published` keeps the machine's own name.

    python benchmarks/transcribe_published_multi_gpu.py ../shared/reference/lambda-pytorch-benchmark
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from memprobe.compare.published import FIELDS  # noqa: E402 - the columns the reader checks

OUT = REPO / "memprobe" / "data" / "published_multi_gpu.csv"
WORKLOADS = {
    "bert_large_squad": (
        "bert-large-squad",
        "sequences",
        "BERT-Large SQuAD v1.1 fine-tuning, seq 384, NVIDIA DeepLearningExamples (NGC PyTorch)",
        "timer includes the first steps (no warm-up excluded), 100 steps",
    ),
    "resnet50": (
        "resnet50",
        "images",
        "ResNet-50 224x224, synthetic data, NVIDIA DeepLearningExamples (NGC PyTorch)",
        "compute only (data time excluded)",
    ),
}
FILES = {"throughput": "throughput-fp16.csv", "max_batch": "batch-fp16.csv"}
ORIGINAL = {"throughput": "pytorch-train-throughput-fp16.csv", "max_batch": "pytorch-train-bs-fp16.csv"}
HEADER = """# Published multi-GPU training figures transcribed verbatim from ../shared/reference/lambda-pytorch-benchmark
# (throughput-fp16.csv, batch-fp16.csv) by benchmarks/transcribe_published_multi_gpu.py: every machine with
# num_gpu > 1, mixed precision, the two workloads memprobe has. throughput: the whole machine's; max_batch: the
# batch of the whole machine (all GPUs together), hand-picked, NOT searched. gpu: the same card's one-GPU row in
# published.csv. These are figures from elsewhere: memprobe always marks them as published.
"""


def one_gpu_name(name: str) -> str:
    """The one-GPU row's name for a machine's name: 'Nx ' dropped, or 'LambdaCloud Nx' -> 'LambdaCloud 1x'."""
    if name.startswith("LambdaCloud "):
        return re.sub(r"^LambdaCloud \d+x ", "LambdaCloud 1x ", name)
    return re.sub(r"^\d+x ", "", name)


def rows(folder: Path) -> list[dict[str, str]]:
    out = []
    for metric, filename in FILES.items():
        with open(folder / filename, newline="") as handle:
            for row in csv.DictReader(handle):
                if row["num_gpu"] == "1":
                    continue
                for workload, (memprobe, unit, implementation, timing) in WORKLOADS.items():
                    out.append(
                        {
                            "source": "lambda-bench",
                            "date": "2023-2025",
                            "gpu": one_gpu_name(row["name_gpu"]),
                            "gpu_as_published": row["name_gpu"],
                            "num_gpu": row["num_gpu"],
                            "workload": workload,
                            "memprobe_workload": memprobe,
                            "precision": "fp16",
                            "metric": metric,
                            "value": row[workload].strip().replace("-", ""),
                            "unit": f"{unit}/s" if metric == "throughput" else unit,
                            "implementation": implementation,
                            "reference": f"github.com/lambdal/deeplearning-benchmark pytorch/csv_v1_v2 @ aa5addb6/{ORIGINAL[metric]}",
                            "caveat": (
                                f"2023-2025 catalog, {row['num_gpu']} GPUs in one machine: figures for all GPUs "
                                "together; batch NOT searched (hand-written configs per memory size); 3 runs "
                                f"averaged, truncated to integers; mixed precision (AMP / FP16); {timing}"
                            ),
                        }
                    )
    return out


def main(folder: str) -> None:
    found = rows(Path(folder))
    with open(OUT, "w", newline="") as handle:
        handle.write(HEADER)
        writer = csv.DictWriter(handle, FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(found)
    print(f"{OUT}: {len(found)} rows")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(REPO.parent / "shared" / "reference" / "lambda-pytorch-benchmark"))
