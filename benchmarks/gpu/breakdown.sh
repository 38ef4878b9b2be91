#!/usr/bin/env bash
# Memory breakdown at B, measured on this GPU and predicted on fake tensors at the same batch, per category.
# Usage: benchmarks/gpu/breakdown.sh OUT_DIR [MODELS...]   (default: the six workloads, llama-1b, a timm model)
# Env: PRECISIONS (fp32,fp16,bf16).
set -euo pipefail
out=${1:?usage: breakdown.sh OUT_DIR [MODELS...]}; shift || true
models=("$@"); [ ${#models[@]} -gt 0 ] || models=(bert-large bert-large-squad transformer-big nasnet-large resnet50 pix2pixhd llama-1b timm:vit_base_patch16_224)
mkdir -p "$out"
for m in "${models[@]}"; do
  memprobe scan --model "$m" -p "${PRECISIONS:-fp32,fp16,bf16}" --breakdown --no-curve --out "$out/scans"
done
python - "$out" <<'PY'
import sys, pathlib
import memprobe
from memprobe.core.records.breakdown import write_predicted
from memprobe.core.records.results import load_results
out = pathlib.Path(sys.argv[1]); records = []
for _path, result in load_results([out / "scans"]):
    for precision, p in result.precisions.items():
        if p.breakdown is not None:
            predicted = memprobe.breakdown(
                result.workload["name"], precision, p.breakdown.batch, gpu=result.gpu_name(unknown="") or None
            )
            records.append({"workload": result.workload["name"], "precision": precision,
                            "memory": f"the measured B on {result.gpu_name()}", "breakdown": predicted})
write_predicted(out / "predicted-breakdowns.json", records)
PY
memprobe report --breakdown "$out/scans" --predicted "$out/predicted-breakdowns.json" | tee "$out/breakdown-table.md"
