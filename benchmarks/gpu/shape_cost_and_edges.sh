#!/usr/bin/env bash
# Diagnostics on one GPU (about 5 minutes on an H200), three questions:
# 1. NasNet-Large's first step at a new batch size costs 16-25 s on the host: which cuDNN/PyTorch setting cuts it?
#    first_step_cost.py (batches 8,16,8) under several settings, in parallel (the cost is host-side; each process
#    uses a few GiB): default, the cuDNN v7 API, eager module loading, NCHW tensors, fp32, cuDNN off, and a profile.
# 2. An inference edge that moves between processes (bert-large-squad fp16 --mode infer on an H200: the search
#    fitted 9412, fresh processes failed at 9409-9413 and fitted 9405): infer_edge.py, each batch in a new process,
#    with the default allocator and with expandable segments.
# 3. resnet50 fp16's throughput cliff (2672 vs 2680 on an H200): profile_step.py at both sizes.
# Run from the repository root with OUT set; everything goes under $OUT/w, tarred to $OUT/r.tgz.
set -u
: "${OUT:?set OUT to the folder whose files come back}"
W="$OUT/w"
mkdir -p "$W"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
LOG="$W/diag.log"
pack() { tar -czf "$OUT/r.tgz.tmp" -C "$OUT" w && mv "$OUT/r.tgz.tmp" "$OUT/r.tgz"; }
say() { echo "$*" | tee -a "$LOG"; }
say "diagnostics $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$LOG"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1 | tee -a "$LOG"

fs() {  # TAG ENV... -- ARGS...: one first_step_cost run
    local tag=$1; shift
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
    env "${envs[@]}" OMP_NUM_THREADS=2 timeout -k 5 150 python3 benchmarks/first_step_cost.py --batches 8,16,8 --steps 2 \
        --tag "$tag" --out "$W/first_step" "$@" >"$W/fs_$tag.log" 2>&1
    echo "rc $?" >>"$W/fs_$tag.log"
}
t0=$(date +%s)
fs default -- --case nasnet-large:bf16 &
fs v7api TORCH_CUDNN_V8_API_DISABLED=1 -- --case nasnet-large:bf16 &
fs eager CUDA_MODULE_LOADING=EAGER -- --case nasnet-large:bf16 &
fs nchw -- --case nasnet-large:bf16 --set channels_last=false &
fs fp32 -- --case nasnet-large:fp32 &
fs fp32v7 TORCH_CUDNN_V8_API_DISABLED=1 -- --case nasnet-large:fp32 &
fs nocudnn -- --case nasnet-large:bf16 --no-cudnn &
fs profiled -- --case nasnet-large:bf16 --profile &
wait
say "first-step variants in $(( $(date +%s) - t0 ))s"
for f in "$W"/fs_*.log; do say "--- $(basename "$f")"; grep -E "^==|batch|profiled|ms  x|rc |Error" "$f" | head -20 | tee -a "$LOG"; done
pack

t0=$(date +%s)
timeout -k 5 120 python3 benchmarks/infer_edge.py --case bert-large-squad:fp16 --batches 9405,9407,9412 --out "$W/edge" 2>&1 | tee -a "$LOG"
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout -k 5 80 python3 benchmarks/infer_edge.py \
    --case bert-large-squad:fp16 --batches 9412,9440 --out "$W/edge" 2>&1 | tee -a "$LOG"
say "inference edge in $(( $(date +%s) - t0 ))s"
pack

t0=$(date +%s)
for batch in 2672 2680; do
    mkdir -p "$W/resnet50_fp16_$batch"
    timeout -k 5 60 python3 benchmarks/profile_step.py --case "resnet50:fp16:$batch" --warmup 3 --steps 3 \
        --out "$W/resnet50_fp16_$batch" >"$W/profile_resnet50_fp16_$batch.log" 2>&1
    say "resnet50 fp16 batch $batch: rc $?"
    grep -E "^== |^   [a-z]|^ +[0-9.]+%" "$W/profile_resnet50_fp16_$batch.log" | head -24 | sed 's/^/  /' | tee -a "$LOG"
done
say "cliff profiles in $(( $(date +%s) - t0 ))s"
pack
