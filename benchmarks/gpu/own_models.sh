#!/usr/bin/env bash
# Your own model on a GPU (~7 min on an H100), three ways in, each scanned in bf16 and predicted.
#
#   timm:vit_large_patch16_224, timm:convnext_large   (timm by name, pretrained_cfg input size, SGD momentum)
#   hf:gpt2-large --task causal-lm --seq-len 1024     (packaged transformers config, AdamW)
#   examples/my_model.py:build                        (the README's user module, AdamW)
#
# Each: `memprobe scan --precision bf16` (max batch proven in fresh processes, throughput at it), then
# `memprobe predict` at the card's datasheet memory with --compare against that scan (predicted max batch
# at the scan's own allocator capacity beside the measured one). The predictions run on the CPU in the
# background (4 threads) while the next scan runs. Every result file and log goes to $OUT/w, then $OUT/r.tgz.
# Run from the repository root: OUT=/some/dir bash benchmarks/gpu/own_models.sh
set -u
: "${OUT:?set OUT to the output folder}"
W="$OUT/w"
mkdir -p "$W"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
finish() {
    wait
    tar -czf "$OUT/r.tgz" -C "$OUT" w && rm -rf "$W"
}
trap finish EXIT

start=$(date +%s)
{
    date -u
    nvidia-smi
    $PY -m memprobe device
    $PY -c "import torch, transformers, timm; print('torch', torch.__version__, 'transformers', transformers.__version__, 'timm', timm.__version__)"
    git rev-parse HEAD
} > "$W/device.txt" 2>&1

# The card's datasheet memory from memprobe's catalog (what `predict --memory` means), else NVML's total.
CARD_MEM=$($PY - <<'PY'
from memprobe.core.cards.catalog import find_card
from memprobe.probe.device import visible_gpu
gpu = visible_gpu()
card = find_card(gpu.name)
print(f"{card.memory_bytes / 2**30:g}GiB" if card else f"{gpu.total_bytes / 2**30:.0f}GiB")
PY
)
CARD_MEM=${CARD_MEM:-80GiB}  # no catalog card and no NVML answer: an 80 GB card
echo "card memory for predict: $CARD_MEM" | tee -a "$W/device.txt"

EXTRA=""
if $PY -m memprobe scan --help | grep -q -- "--no-curve"; then EXTRA="--no-curve"; fi

run_one() {  # name slug [model options...]
    local model="$1" slug="$2"; shift 2
    echo "== scan $model ($(($(date +%s) - start)) s in)"
    # SIGINT at the limit: the scan writes what finished (marked partial) instead of nothing.
    timeout -s INT 120 $PY -m memprobe scan --model "$model" --precision bf16 $EXTRA "$@" --out "$W/$slug" \
        > "$W/${slug}_scan.txt" 2> "$W/${slug}_scan.log"
    echo "scan exit $?" >> "$W/${slug}_scan.log"
    local result
    result=$(ls -t "$W/$slug"/*.json 2>/dev/null | head -1)
    local compare=()
    [ -n "$result" ] && compare=(--compare "$result")
    ( OMP_NUM_THREADS=4 timeout 300 $PY -m memprobe predict --model "$model" --precision bf16 --memory "$CARD_MEM" \
        --overhead-from reports "${compare[@]}" "$@" > "$W/${slug}_predict.txt" 2>&1
      echo "predict exit $?" >> "$W/${slug}_predict.txt" ) &
}

run_one examples/my_model.py:build my_model
run_one hf:gpt2-large gpt2-large --task causal-lm --seq-len 1024
run_one timm:convnext_large convnext_large
run_one timm:vit_large_patch16_224 vit_large
echo "== scans done ($(($(date +%s) - start)) s in); waiting for the predictions"
wait
echo "== all done ($(($(date +%s) - start)) s)"
