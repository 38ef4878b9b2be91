#!/usr/bin/env bash
# LLM fine-tuning edges on one GPU (H100 80GB; ~9 minutes): max batch, max sequence length,
# checkpointing and LoRA, each scanned and predicted.
#   1. llama-1b bf16, batch search at seq 2048
#   2. llama-1b-4k bf16, batch search at seq 4096
#   3. llama-1b bf16, longest sequence at batch 1
#   4. llama-1b bf16, longest sequence at batch 1 with activation checkpointing
#   5. llama-8b bf16 + LoRA r=16, batch search at seq 2048
#   6. llama-8b bf16 full fine-tuning with checkpointing: nothing fits on 80 GB; the traced need and
#      the settings that would fit are printed and stored in the result
#   7. llama-8b bf16 + LoRA r=16 + checkpointing, longest sequence at batch 1
#   then predictions for each scanned variant with --compare (predicted vs measured), on the CPU.
# Steps run in this order while the time budget lasts (BUDGET_S, default 500 s; predictions may take 70 s more); a step cut short
# leaves its log. Results and logs go to $OUT/w, packed into $OUT/r.tgz at the end.
# Run from the repository root: OUT=/some/dir bash benchmarks/gpu/llm_edges.sh
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
W="$OUT/w"
mkdir -p "$W/reports" "$W/predict"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PY:-python3}
BUDGET_S=${BUDGET_S:-500}
START=$(date +%s)

left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }

{ nvidia-smi; $PY -m pip show peft transformers torch 2>/dev/null | grep -E '^(Name|Version)'; } > "$W/environment.txt" 2>&1

# --no-curve exists once throughput curves land: skip them here (the edges are what this script measures).
EXTRA=()
if $PY -m memprobe scan --help 2>/dev/null | grep -q -- "--no-curve"; then EXTRA+=(--no-curve); fi
# Short timed runs: the long-sequence steps take seconds each.
COMMON=(-p bf16 --out "$W/reports" --warmup 2 --timed-steps 5 "${EXTRA[@]}")

step() {  # step NAME MIN_SECONDS ARGS...: run one scan if at least MIN_SECONDS of the budget are left
  local name=$1 need=$2; shift 2
  local remaining; remaining=$(left)
  if (( remaining < need )); then
    echo "skipped $name: ${remaining}s left of ${BUDGET_S}s" | tee -a "$W/skipped.txt"
    return
  fi
  echo "== $name ($(date -u +%T), ${remaining}s left)"
  local t0; t0=$(date +%s)
  timeout --signal=INT --kill-after=20 "$remaining" $PY -m memprobe scan "$@" "${COMMON[@]}" > "$W/$name.out" 2> "$W/$name.log"
  echo "$name: rc=$? in $(( $(date +%s) - t0 ))s" | tee -a "$W/steps.txt"
}

step 1b-seq2048        60  -m llama-1b
step 1b-seq4096        60  -m llama-1b-4k
step 1b-maxseq-b1      90  -m llama-1b --search seq-len --batch 1 --max-batch 262144
step 1b-maxseq-b1-ckpt 90  -m llama-1b --search seq-len --batch 1 --checkpointing --max-batch 262144
step 8b-lora16         90  -m llama-8b --lora 16
step 8b-ckpt           60  -m llama-8b --checkpointing
step 8b-lora16-ckpt-maxseq-b1 90 -m llama-8b --lora 16 --checkpointing --search seq-len --batch 1 --max-batch 262144

# Predictions beside the measurements (CPU only; about 10-40 s each on fake tensors).
predict() {  # predict NAME RESULT_GLOB ARGS...
  local name=$1 pattern=$2; shift 2
  local file; file=$(ls -t "$W"/reports/*"$pattern"_train_*.json 2>/dev/null | head -1)
  if [[ -z "$file" ]]; then echo "no result for $name: prediction skipped" >> "$W/skipped.txt"; return; fi
  if (( $(left) < 20 )); then echo "skipped prediction $name: out of time" >> "$W/skipped.txt"; return; fi
  timeout "$(left)" $PY -m memprobe predict -p bf16 --overhead-from "$W/reports" --compare "$file" "$@" \
    > "$W/predict/$name.md" 2> "$W/predict/$name.log"
  echo "predict $name: rc=$?" >> "$W/steps.txt"
}
BUDGET_S=$(( BUDGET_S + 70 ))  # predictions may use 70 s past the scans' budget
predict 1b-seq2048        "_llama-1b"                -m llama-1b
predict 1b-seq4096        "_llama-1b-4k"             -m llama-1b-4k
predict 1b-maxseq-b1      "_llama-1b-maxseq-b1"      -m llama-1b --search seq-len --batch 1
predict 1b-maxseq-b1-ckpt "_llama-1b-ckpt-maxseq-b1" -m llama-1b --search seq-len --batch 1 --checkpointing
predict 8b-lora16         "_llama-8b-lora16"         -m llama-8b --lora 16

$PY -m memprobe report --scans "$W/reports" > "$W/scans.md" 2> "$W/scans.log"
$PY -m memprobe report --llm "$W/reports" > "$W/llm.md" 2>> "$W/scans.log"
tar -czf "$OUT/r.tgz" -C "$OUT" w
echo "done in $(( $(date +%s) - START ))s; results in $OUT/r.tgz"
