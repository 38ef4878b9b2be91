#!/usr/bin/env bash
# Why the edge moves (issue 48): fresh runs of small-activation timm CNNs whose H200 edge was not verified in a fresh
# process (reports/zoo/accuracy.md's *), at B and B+1 several times each, each in a process of its own with PyTorch's
# memory history on and cuDNN's plan choice logged (benchmarks/edge_repeat.py run), and one first run per model that
# times the interpreter, imports, CUDA context, cuBLAS and cuDNN handles, build, FLOPs count and first step apart.
# B comes from the model's committed zoo result (reports/zoo/h200/results/<model>__train__bf16/).
#
# Run from the repository root with OUT set. Models run on GPUs of their own at once where there are enough (one GPU:
# one after the other, about 5 minutes for the defaults). Everything goes under $OUT/w, packed into
# $OUT/edge_repeat.tgz after every run; at the end benchmarks/edge_repeat.py summarize writes $OUT/w/edge_repeat.md.
# Env: MODELS (default "mobilenetv2_100 mobilenetv3_large_100 inception_v3"; levit_256 is the fourth flaky one),
# REPEATS (runs per batch, default 3), RUN_LIMIT_S (each run's limit, default 120), DEADLINE_S (no run starts after
# it, default 480), CUDNN_LOG (1: keep cudnn_frontend's plan lines, default 1), GPUS (the GPU indices to use, space-
# separated; default every GPU).
set -u
: "${OUT:?set OUT to the folder whose files come back}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
MODELS="${MODELS:-mobilenetv2_100 mobilenetv3_large_100 inception_v3}"
REPEATS="${REPEATS:-3}"
RUN_LIMIT_S="${RUN_LIMIT_S:-120}"
DEADLINE_S="${DEADLINE_S:-480}"
CUDNN_LOG="${CUDNN_LOG:-1}"
W="$OUT/w"
mkdir -p "$W/logs"
start=$(date +%s)
# each model's runs pack as they finish, at once on several GPUs: a temporary file of each packer's own, then a rename
pack() { local tmp="$OUT/.edge_repeat.$BASHPID.tgz"; tar -czf "$tmp" -C "$OUT" w && mv "$tmp" "$OUT/edge_repeat.tgz"; }
{
    date -u +%FT%TZ
    nvidia-smi
    python3 -m memprobe device
    python3 -m pip list 2>/dev/null | grep -iE '^(torch|timm|nvidia-cudnn-cu[0-9]+) '
} >"$W/logs/device.txt" 2>&1

one_run() {  # gpu model batch tag [extra args]: one fresh process, its wall time in walls.tsv
    local gpu=$1 model=$2 batch=$3 tag=$4
    shift 4
    if [ $(( $(date +%s) - start )) -gt "$DEADLINE_S" ]; then
        echo "$tag: not started (deadline)" >>"$W/logs/runs.log"
        return
    fi
    local log="$W/logs/$tag.log" plans="$W/cudnn_$tag.full.log" t0
    t0=$(date +%s.%N)
    EDGE_T0=$t0 CUDA_VISIBLE_DEVICES=$gpu \
        CUDNN_FRONTEND_LOG_INFO=$CUDNN_LOG CUDNN_FRONTEND_LOG_FILE="$plans" TORCH_CUDNN_V8_API_DEBUG=$CUDNN_LOG \
        timeout -k 10 "$RUN_LIMIT_S" python3 benchmarks/edge_repeat.py run --model "timm:$model" --batch "$batch" \
        --out "$W" --tag "$tag" "$@" >"$log" 2>&1
    local rc=$?
    printf '%s\t%s\t%s\t%s\n' "$tag" "$t0" "$(date +%s.%N)" "$rc" >>"$W/walls.tsv"
    # keep the plan lines only (the frontend's full log runs to megabytes): the engines and plans tried and chosen
    if [ -f "$plans" ]; then
        grep -hiE 'tag|engine|plan|knob' "$plans" "$log" 2>/dev/null | sed -E 's/0x[0-9a-f]+/0x_/g' | sort -u \
            | head -3000 >"$W/cudnn_$tag.log"
        rm -f "$plans"
    fi
    echo "$tag: rc $rc at $(( $(date +%s) - start )) s: $(tail -1 "$log")" >>"$W/logs/runs.log"
    pack
}

model_runs() {  # gpu model: the first run, then REPEATS runs at B and at B+1, alternating
    local gpu=$1 model=$2 edge b b1
    edge=$(python3 benchmarks/edge_repeat.py edge "reports/zoo/h200/results/${model}__train__bf16") || return
    read -r b b1 <<<"$edge"
    one_run "$gpu" "$model" 1 "${model}_first" --handles --flops --no-history
    for r in $(seq 1 "$REPEATS"); do
        one_run "$gpu" "$model" "$b" "${model}_b${b}_r$r"
        one_run "$gpu" "$model" "$b1" "${model}_b${b1}_r$r"
    done
}

read -r -a gpus <<<"${GPUS:-$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd' ' -)}"
read -r -a models <<<"$MODELS"
pids=()
if [ "${#gpus[@]}" -ge "${#models[@]}" ]; then
    for i in "${!models[@]}"; do
        model_runs "${gpus[$i]}" "${models[$i]}" &
        pids+=($!)
    done
    wait "${pids[@]}"
else
    for model in "${models[@]}"; do model_runs "${gpus[0]}" "$model"; done
fi
python3 benchmarks/edge_repeat.py summarize "$W" --md "$W/edge_repeat.md" >/dev/null 2>"$W/logs/summarize.err"
echo "done after $(( $(date +%s) - start )) s" >>"$W/logs/runs.log"
pack
cat "$W/logs/runs.log"
