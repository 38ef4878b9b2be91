#!/usr/bin/env bash
# The batch x sequence-length frontier of an LLM workload, measured and predicted, and the two side by side.
# Usage: OUT=... benchmarks/gpu/frontier.sh     Env: MODEL (llama-1b), PRECISION (bf16), BUDGET_S (seconds the
# measured frontier may take, per setting; 200), SETTINGS ("plain checkpointing").
# Everything goes under $OUT/w (scans/, predicted/, logs, frontier.md) and is tarred to $OUT/r.tgz after each step.
set -u
: "${OUT:?set OUT to the folder whose files come back}"
MODEL="${MODEL:-llama-1b}"; PRECISION="${PRECISION:-bf16}"; BUDGET_S="${BUDGET_S:-200}"
SETTINGS="${SETTINGS:-plain checkpointing}"
W="$OUT/w"; mkdir -p "$W/scans" "$W/predicted" "$W/logs"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
pack() { tar -czf "$OUT/r.tgz.tmp" -C "$OUT" w && mv "$OUT/r.tgz.tmp" "$OUT/r.tgz"; }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
for setting in $SETTINGS; do
    flag=""; [ "$setting" = checkpointing ] && flag="--checkpointing"
    # the prediction runs on the CPUs while the GPU measures
    python3 -m memprobe predict --model "$MODEL" -p "$PRECISION" --search frontier --gpu "$gpu" $flag \
        --out "$W/predicted" >"$W/logs/predict-$setting.log" 2>&1 &
    pred=$!
    t0=$(date +%s)
    timeout -s INT -k 20 $(( BUDGET_S + 120 )) python3 -m memprobe scan --model "$MODEL" -p "$PRECISION" \
        --search frontier --frontier-budget "$BUDGET_S" $flag --out "$W/scans" >"$W/logs/scan-$setting.log" 2>&1
    echo "$setting: scan rc $? in $(( $(date +%s) - t0 ))s" | tee -a "$W/frontier.log"
    wait "$pred"; echo "$setting: predict rc $?" | tee -a "$W/frontier.log"
    pack
done
python3 -m memprobe report --frontier "$W/scans" "$W/predicted" >"$W/frontier.md" 2>>"$W/frontier.log"
cat "$W/frontier.md"
pack
