#!/usr/bin/env bash
# LLM generation with a static KV cache on one H200 per job: `memprobe scan --mode generate` (bf16) of llama-1b and
# llama-8b at prompt/new tokens 2048/64, 8192/64 and 512/512, one hf-config decoder with grouped-query attention
# (Qwen2-1.5B's published architecture: 12 heads, 2 KV heads), and one generation frontier of each llama (contexts 1k,
# 2k, 4k, ... and the max context at 1, 2, 4, ... sequences, N = 64); after each scan, `memprobe predict --mode
# generate --gpu H200 --compare` of it on the CPUs.
#
# A 4-GPU machine runs one PART in one 10-minute call, one job queue per GPU (CUDA_VISIBLE_DEVICES=0..3):
#   PART=a  GPU0 llama-1b 2048/64 | GPU1 llama-1b 8192/64 | GPU2 llama-1b 512/512 | GPU3 qwen2-1.5b 2048/64, then
#           the llama-1b frontier for the time left
#   PART=b  GPU0 llama-8b 2048/64 | GPU1 llama-8b 8192/64 | GPU2 llama-8b 512/512 | GPU3 the llama-8b frontier
#   PART=c  one GPU (QUEUES="3", say): qwen2-1.5b 2048/64, then llama-1b 8192/64 with --prefill-chunk 512
#   PART=d  GPU0 llama-1b 512/512 | GPU1 llama-8b 512/512 | GPU2 llama-1b 8192/64 --prefill-chunk 512 | GPU3 the
#           llama-1b frontier (the search's trials cut after 3 decode forwards; the chunked prefill's prediction);
#           scans of up to 540 s (DEADLINE_S 560, END_S 590 unless given)
#   PART=all  both in one call, as far as DEADLINE_S lets them: GPU0 llama-1b 2048/64, 512/512, qwen2-1.5b | GPU1
#           llama-1b 8192/64, its frontier | GPU2 llama-8b 2048/64, 512/512 | GPU3 llama-8b 8192/64, its frontier
# On fewer GPUs, QUEUES picks the queues to run (e.g. QUEUES="0 1" on 2 GPUs, then QUEUES="2 3" in a second call).
# Every scan runs under `timeout -s INT` (it writes what it finished, marked partial), no queue starts a scan past
# DEADLINE_S (default 480) from the start, each leaves 90 s for its prediction, every prediction ends by END_S (580),
# and $OUT/w is tarred to $OUT/r.tgz every 30 s and at the end. A frontier's prediction runs on the CPUs beside it.
# Env: PART (a), QUEUES ("0 1 2 3"), DEADLINE_S (480), END_S (580), SCAN_S (the limit of one scan, 420), FRONTIER_S
# (the budget of a frontier: 240 after the scan on GPU3 in part a, 420 in part b), PRECISION (bf16).
set -u
: "${OUT:?set OUT to the folder whose files come back}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PART="${PART:-a}"; QUEUES="${QUEUES:-0 1 2 3}"
if [ "$PART" = d ]; then  # one scan per GPU, each as long as the call allows: its predictions can be made on a CPU
    DEADLINE_S="${DEADLINE_S:-560}"; SCAN_S="${SCAN_S:-540}"; END_S="${END_S:-590}"
fi
DEADLINE_S="${DEADLINE_S:-480}"; SCAN_S="${SCAN_S:-420}"; END_S="${END_S:-580}"
PRECISION="${PRECISION:-bf16}"
QWEN="hf-config:benchmarks/zoo_models/configs/qwen2-1.5b.json"
W="$OUT/w"; mkdir -p "$W"
start=$(date +%s)
pack() { tar -czf "$OUT/r.tgz.tmp" -C "$OUT" w && mv "$OUT/r.tgz.tmp" "$OUT/r.tgz"; }
left() { echo $(( DEADLINE_S - ($(date +%s) - start) )); }
until_end() { echo $(( END_S - ($(date +%s) - start) )); }
{
    date -u +%FT%TZ; nvidia-smi; python3 -m memprobe device
    python3 -m pip list 2>/dev/null | grep -iE '^(torch|transformers|timm|numpy) '
} >"$W/env.log" 2>&1

# scan JOB MODEL PROMPT NEW [OPTION...]: one generation scan of MODEL, then its prediction with --compare
scan() {
    local job=$1 model=$2 prompt=$3 new=$4 extra=() limit
    shift 4
    extra=("$@")  # more scan and predict options (--prefill-chunk C)
    [ "$model" = "$QWEN" ] && extra+=(--task causal-lm)
    limit=$(left); [ "$limit" -gt "$SCAN_S" ] && limit=$SCAN_S
    if [ "$limit" -lt 60 ]; then echo "$job: not started ($limit s left)" >>"$W/generate.log"; return; fi
    mkdir -p "$W/$job"
    local t0; t0=$(date +%s)
    timeout -s INT -k 30 "$limit" python3 -m memprobe scan --model "$model" "${extra[@]}" --mode generate \
        -p "$PRECISION" --prompt-len "$prompt" --new-tokens "$new" --curve-budget 45 --out "$W/$job" \
        >"$W/$job/scan.log" 2>&1
    echo "$job: scan rc $? in $(( $(date +%s) - t0 )) s" >>"$W/generate.log"
    local file; file=$(ls -t "$W/$job"/*.json 2>/dev/null | head -1)
    if [ -n "$file" ] && [ "$(until_end)" -gt 20 ]; then  # on the CPUs, the GPUs hidden: predict for this card
        t0=$(date +%s)
        CUDA_VISIBLE_DEVICES= timeout -s INT "$(until_end)" python3 -m memprobe predict --model "$model" "${extra[@]}" \
            --mode generate -p "$PRECISION" --prompt-len "$prompt" --new-tokens "$new" --gpu H200 --compare "$file" \
            >"$W/$job/predict.md" 2>"$W/$job/predict.log"
        echo "$job: predict rc $? in $(( $(date +%s) - t0 )) s" >>"$W/generate.log"
    fi
}

# frontier JOB MODEL BUDGET: the generation frontier (N = 64) measured, and predicted for the H200 on the CPUs beside it
frontier() {
    local job=$1 model=$2 budget=$3 t0 pred
    [ "$budget" -gt $(( $(left) - 30 )) ] && budget=$(( $(left) - 30 ))
    if [ "$budget" -lt 60 ]; then echo "$job: not started ($(left) s left)" >>"$W/generate.log"; return; fi
    mkdir -p "$W/$job"; t0=$(date +%s)
    CUDA_VISIBLE_DEVICES= timeout -s INT "$(until_end)" python3 -m memprobe predict --model "$model" --mode generate \
        -p "$PRECISION" --new-tokens 64 --search frontier --frontier-budget "$budget" --gpu H200 \
        --out "$W/$job/predicted" >"$W/$job/predict.md" 2>"$W/$job/predict.log" &
    pred=$!
    timeout -s INT -k 30 $(( budget + 60 )) python3 -m memprobe scan --model "$model" --mode generate \
        -p "$PRECISION" --new-tokens 64 --search frontier --frontier-budget "$budget" --out "$W/$job" \
        >"$W/$job/scan.log" 2>&1
    echo "$job: frontier scan rc $? in $(( $(date +%s) - t0 )) s" >>"$W/generate.log"
    wait "$pred"; echo "$job: frontier predict rc $?" >>"$W/generate.log"
    python3 -m memprobe report --frontier "$W/$job" "$W/$job/predicted" >"$W/$job/frontier.md" 2>&1
}

queue() {  # the jobs of GPU $1 in PART
    case "$PART$1" in
        a0) scan llama-1b-p2048-n64 llama-1b 2048 64 ;;
        a1) scan llama-1b-p8192-n64 llama-1b 8192 64 ;;
        a2) scan llama-1b-p512-n512 llama-1b 512 512 ;;
        a3) SCAN_S=200 scan qwen2-1.5b-p2048-n64 "$QWEN" 2048 64; frontier llama-1b-frontier llama-1b "${FRONTIER_S:-240}" ;;
        b0) scan llama-8b-p2048-n64 llama-8b 2048 64 ;;
        b1) scan llama-8b-p8192-n64 llama-8b 8192 64 ;;
        b2) scan llama-8b-p512-n512 llama-8b 512 512 ;;
        b3) frontier llama-8b-frontier llama-8b "${FRONTIER_S:-420}" ;;
        # PART=all: both models in one call, the llama-1b scans two to a GPU, each frontier after a scan
        all0) scan llama-1b-p2048-n64 llama-1b 2048 64; scan llama-1b-p512-n512 llama-1b 512 512
              SCAN_S=150 scan qwen2-1.5b-p2048-n64 "$QWEN" 2048 64 ;;
        all1) SCAN_S=200 scan llama-1b-p8192-n64 llama-1b 8192 64; frontier llama-1b-frontier llama-1b 240 ;;
        all2) scan llama-8b-p2048-n64 llama-8b 2048 64; scan llama-8b-p512-n512 llama-8b 512 512 ;;
        all3) SCAN_S=240 scan llama-8b-p8192-n64 llama-8b 8192 64; frontier llama-8b-frontier llama-8b 240 ;;
        # PART=c: one GPU: the grouped-query decoder, then llama-1b's 8192-token prompts prefilled 512 at a time
        c*) SCAN_S=220 scan qwen2-1.5b-p2048-n64 "$QWEN" 2048 64
            SCAN_S=220 scan llama-1b-p8192-n64-c512 llama-1b 8192 64 --prefill-chunk 512 ;;
        # PART=d: the cut search trials (prefill + 3 decode forwards; whole generations only in the fresh runs that
        # prove a fit) at 512/512, the chunked prefill predicted with its full-cache attention, the frontier's points
        # started from their prediction. One GPU each: QUEUES="0 1" on 2 GPUs, "0 1 2 3" on 4.
        d0) scan llama-1b-p512-n512 llama-1b 512 512 ;;
        d1) scan llama-8b-p512-n512 llama-8b 512 512 ;;
        d2) scan llama-1b-p8192-n64-c512 llama-1b 8192 64 --prefill-chunk 512 ;;
        d3) frontier llama-1b-frontier llama-1b "${FRONTIER_S:-420}" ;;
        *) echo "no queue $1 in part $PART" >>"$W/generate.log" ;;
    esac
}

( while sleep 30; do pack; done ) &
packer=$!
pids=()
for q in $QUEUES; do
    CUDA_VISIBLE_DEVICES=$q queue "$q" &
    pids+=($!)
done
wait "${pids[@]}"
kill "$packer" 2>/dev/null
echo "part $PART: $(( $(date +%s) - start )) s" >>"$W/generate.log"
cat "$W/generate.log"
pack
