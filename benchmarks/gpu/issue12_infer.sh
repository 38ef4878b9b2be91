#!/usr/bin/env bash
# Issue 12, inference: `memprobe scan --mode infer` of all six workloads in fp16 and bf16, with throughput curves
# (~6 minutes: the goal is under 60 s per workload and precision).
#
# Run from the repository root on a GPU machine, with OUT set. Result files, one log per model and infer.log (the
# time per model and in total) go under $OUT/w, tarred to $OUT/r.tgz after every model. Each model runs under
# `timeout -s INT` (partial result files are kept) with at most PER_MODEL_S seconds, and none starts when less than
# 45 s of BUDGET_S is left. Env: MODELS (default all six), PRECISIONS (fp16,bf16), BUDGET_S (520), PER_MODEL_S (150).
set -u
: "${OUT:?set OUT to the folder whose files come back}"
MODELS="${MODELS:-resnet50,bert-large-squad,bert-large,transformer-big,nasnet-large,pix2pixhd}"
PRECISIONS="${PRECISIONS:-fp16,bf16}"
BUDGET_S="${BUDGET_S:-520}"
PER_MODEL_S="${PER_MODEL_S:-150}"
W="$OUT/w"
mkdir -p "$W/results" "$W/logs"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
LOG="$W/infer.log"
start=$(date +%s)
pack() { tar -czf "$OUT/r.tgz.tmp" -C "$OUT" w && mv "$OUT/r.tgz.tmp" "$OUT/r.tgz"; }
say() { echo "$*" | tee -a "$LOG"; }

say "issue12 inference: models $MODELS, precisions $PRECISIONS, budget ${BUDGET_S}s, $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$LOG"
pack
IFS=',' read -r -a models <<<"$MODELS"
for model in "${models[@]}"; do
    left=$(( BUDGET_S - ($(date +%s) - start) ))
    if (( left < 45 )); then
        say "$model: not started (${left}s left of the budget)"
        continue
    fi
    limit=$(( left < PER_MODEL_S ? left : PER_MODEL_S ))
    t0=$(date +%s)
    timeout -s INT -k 20 "$limit" python3 -m memprobe scan --model "$model" --precision "$PRECISIONS" \
        --mode infer --out "$W/results" >"$W/logs/$model.log" 2>&1
    rc=$?
    t1=$(date +%s)
    case $rc in
        0) state="done" ;;
        124|130|137) state="cut at ${limit}s (rc $rc): finished precisions kept" ;;
        *) state="failed (rc $rc)" ;;
    esac
    say "$model: $state in $(( t1 - t0 ))s"
    # per precision: when each finished (the trial timeline), the max batch and the best batch
    grep -E "^\[$model (fp16|bf16)\] starting|best batch b\*|fresh-process check|wrote " "$W/logs/$model.log" \
        | sed "s/^/  /" | tee -a "$LOG"
    pack
done
say "inference total: $(( $(date +%s) - start ))s ($(date -u +%FT%TZ))"
python3 -m memprobe report --scans "$W/results" >"$W/infer_scans.md" 2>>"$LOG"
pack
