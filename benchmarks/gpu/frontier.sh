#!/usr/bin/env bash
# The batch x sequence-length frontier of an LLM workload, measured and predicted, and the two side by side.
# Usage: OUT=... benchmarks/gpu/frontier.sh     Env: MODEL (llama-1b), PRECISION (bf16), BUDGET_S (seconds the
# measured frontier may take, per setting; 480), SETTINGS ("plain checkpointing"), REPEAT (scan --repeat: the fresh
# runs each point's B needs; default the scan's, 2).
# With as many GPUs as settings, each setting measures on a GPU of its own at once (one call of under 10 minutes);
# with one GPU they run one after the other (a call per setting: SETTINGS=plain, then SETTINGS=checkpointing).
# A point costs 40-90 s on an H200 (llama-1b: 39 s for the max batch at length 512, 90 s for the longest length at
# batch 1, the later ones less; reports/h200_frontier), so 480 s give the 8 points or more the frontier needs (at
# 150 s a setting measured 2). The walk starts no point whose cost, by the longest so far, would end past the budget.
# Everything goes under $OUT/w (scans/, predicted/, logs, frontier.md) and is tarred to $OUT/r.tgz after each step.
set -u
: "${OUT:?set OUT to the folder whose files come back}"
MODEL="${MODEL:-llama-1b}"; PRECISION="${PRECISION:-bf16}"; BUDGET_S="${BUDGET_S:-480}"
SETTINGS="${SETTINGS:-plain checkpointing}"; REPEAT="${REPEAT:-}"
W="$OUT/w"; mkdir -p "$W/scans" "$W/predicted" "$W/logs"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
pack() { local tmp="$OUT/.r.$BASHPID.tgz"; tar -czf "$tmp" -C "$OUT" w && mv "$tmp" "$OUT/r.tgz"; }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
read -r -a gpus <<<"$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd' ' -)"
read -r -a settings <<<"$SETTINGS"

one_setting() {  # setting gpu-index
    local setting=$1 index=$2 flag="" t0 pred
    [ "$setting" = checkpointing ] && flag="--checkpointing"
    # the prediction runs on the CPUs while the GPU measures
    CUDA_VISIBLE_DEVICES= python3 -m memprobe predict --model "$MODEL" -p "$PRECISION" --search frontier --gpu "$gpu" \
        $flag --out "$W/predicted" >"$W/logs/predict-$setting.log" 2>&1 &
    pred=$!
    t0=$(date +%s)
    CUDA_VISIBLE_DEVICES=$index timeout -s INT -k 20 $(( BUDGET_S + 60 )) python3 -m memprobe scan --model "$MODEL" \
        -p "$PRECISION" --search frontier --frontier-budget "$BUDGET_S" $flag ${REPEAT:+--repeat "$REPEAT"} \
        --out "$W/scans/$setting" >"$W/logs/scan-$setting.log" 2>&1
    echo "$setting: scan rc $? in $(( $(date +%s) - t0 ))s" >>"$W/frontier.log"
    wait "$pred"; echo "$setting: predict rc $?" >>"$W/frontier.log"
    python3 - "$W/scans/$setting" "$setting" >>"$W/frontier.log" <<'EOF'
import json, pathlib, sys
files = sorted(p for p in pathlib.Path(sys.argv[1]).glob("*.json"))
points = [p for f in files for fr in (json.loads(f.read_text()).get("frontier") or {}).values() for p in fr["points"]]
measured = [p for p in points if p["status"] == "measured"]
print(f"{sys.argv[2]}: {len(measured)} measured points ({len(points) - len(measured)} skipped or failed)")
EOF
    pack
}

if [ "${#gpus[@]}" -ge "${#settings[@]}" ]; then
    pids=()
    for i in "${!settings[@]}"; do one_setting "${settings[$i]}" "${gpus[$i]}" & pids+=($!); done
    wait "${pids[@]}"
else
    for setting in "${settings[@]}"; do one_setting "$setting" "${gpus[0]}"; done
fi
python3 -m memprobe report --frontier "$W/scans" "$W/predicted" >"$W/frontier.md" 2>>"$W/frontier.log"
cat "$W/frontier.log" "$W/frontier.md"
pack
