#!/usr/bin/env bash
# The throughput cliff: profile resnet50 fp16 at its max batch B and at its best batch b*, and either
# side of the batch where the stem's output passes 2^31 elements; then time NasNet-Large's first step at new
# batch sizes (per-batch-size set-up that makes its trials take 10-34 s). About 3 minutes.
#
# What it showed on an H200 (docs/results.md): resnet50's first convolution writes B x 64 x 112 x 112 values, more
# than 2^31 from batch 2675 (2^31 / 802816 = 2674.9); past it PyTorch's native batch norm with 64-bit indexing
# replaces cuDNN's NHWC batch norm for those layers, and max-pool switches to 64-bit indexing: a step at 2680 takes
# 1.5x one at 2672. An H100 (B = 1870 in fp16) never gets there; an H200 (B = 3321) does.
#
# Run from the repository root on a GPU machine (an H200 shows the cliff), with OUT set; profiles (JSON) and logs
# go under $OUT/w, tarred to $OUT/r.tgz. Env: B and BSTAR (defaults by GPU: H200 3321 and 1870, H100 1870 and
# 1024; take them from the scan's result file when there is one), NASNET_BATCHES (8,16,8).
set -u
: "${OUT:?set OUT to the folder whose files come back}"
W="$OUT/w"
mkdir -p "$W"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
LOG="$W/cliff.log"
pack() { tar -czf "$OUT/r.tgz.tmp" -C "$OUT" w && mv "$OUT/r.tgz.tmp" "$OUT/r.tgz"; }
say() { echo "$*" | tee -a "$LOG"; }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$gpu" in
    *H200*) dB=3321; dS=1870 ;;
    *) dB=1870; dS=1024 ;;
esac
B="${B:-$dB}"
BSTAR="${BSTAR:-$dS}"
say "cliff on $gpu: resnet50 fp16 B=$B b*=$BSTAR, $(date -u +%FT%TZ)"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' >>"$LOG" 2>&1

# One process per case: a case near B must not share the GPU with the previous case's model.
cases=("$BSTAR" "$B")
if (( B > 2680 )); then cases+=(2672 2680); fi
for batch in "${cases[@]}"; do
    mkdir -p "$W/resnet50_fp16_$batch"
    t0=$(date +%s)
    timeout -s INT -k 10 90 python3 benchmarks/profile_step.py --case "resnet50:fp16:$batch" --warmup 3 --steps 3 \
        --out "$W/resnet50_fp16_$batch" >"$W/profile_resnet50_fp16_$batch.log" 2>&1
    say "resnet50 fp16 batch $batch: rc $? in $(( $(date +%s) - t0 ))s"
    grep -E "^== |^   [a-z]" "$W/profile_resnet50_fp16_$batch.log" | head -14 | sed 's/^/  /' | tee -a "$LOG"
    pack
done

# NasNet-Large: step times at new and repeated batch sizes in one process, the first step at the second size
# profiled (CPU operators: is it cuDNN plan building?), then with cuDNN off to attribute it.
NB="${NASNET_BATCHES:-8,16,8}"
t0=$(date +%s)
timeout -s INT -k 10 120 python3 benchmarks/first_step_cost.py --case nasnet-large:bf16 --batches "$NB" --profile \
    --out "$W/first_step" >"$W/first_step_nasnet.log" 2>&1
say "nasnet-large bf16 first steps ($NB): rc $? in $(( $(date +%s) - t0 ))s"
t0=$(date +%s)
timeout -s INT -k 10 90 python3 benchmarks/first_step_cost.py --case nasnet-large:bf16 --batches "$NB" --no-cudnn \
    --out "$W/first_step" >"$W/first_step_nasnet_nocudnn.log" 2>&1
say "nasnet-large bf16 first steps, cuDNN off: rc $? in $(( $(date +%s) - t0 ))s"
grep -E "^==|batch|profiled|ms  x" "$W"/first_step_nasnet*.log | sed 's/^/  /' | tee -a "$LOG"
pack
