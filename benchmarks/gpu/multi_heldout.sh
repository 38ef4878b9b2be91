#!/usr/bin/env bash
# The multi-GPU held-out set (benchmarks/zoo_models/multi_heldout.yaml): each model scanned on 2 GPUs under DDP and
# FSDP2 in bf16, two 2-GPU scans at once on a 4-GPU machine (GPU pairs 0,1 and 2,3), each under its own time limit,
# results under reports/multi_heldout/<FOLDER>/results/<job>/ (benchmarks/zoo.py's queue: a job whose folder already
# holds a complete result is skipped, so a part cut by the deadline goes on at the next call).
#
# Run from the repository root with OUT set; one call is one PART (at most 10 minutes):
#   PART=a  pythia-1.4b, qwen2-1.5b          (decoders at 2048 tokens)
#   PART=b  tinyllama-1.1b, xlm-roberta-base
#   PART=c  deit3_large_patch16_224, resnet152
#   PART=d  convnext_base
#   PART=all  every model, in that order, as far as the deadline goes
# Env: FOLDER (default from the GPU name), DEADLINE_S (no job starts after it, default 520), JOB_LIMIT_S (each scan's
# limit, SIGTERM then, default 250), GPUS (default: every visible GPU; 2 GPUs run one scan at a time).
# The folder is tarred to $OUT/multi_heldout.tgz every 30 s and at the end. Then, on a CPU:
#   python benchmarks/multi_heldout.py      # predicts each scan per GPU and writes reports/multi_heldout/accuracy.md
set -u
: "${OUT:?set OUT to the folder whose files come back}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$name" in
    *H200*) default=h200 ;;
    *H100*) default=h100 ;;
    *) default=$(echo "$name" | tr 'A-Z ' 'a-z-') ;;
esac
FOLDER="${FOLDER:-$default}"
DEADLINE_S="${DEADLINE_S:-520}"
JOB_LIMIT_S="${JOB_LIMIT_S:-250}"
PART="${PART:-a}"
case "$PART" in
    a) ONLY=pythia-1.4b,qwen2-1.5b ;;
    b) ONLY=tinyllama-1.1b,xlm-roberta-base ;;
    c) ONLY=deit3_large_patch16_224,resnet152 ;;
    d) ONLY=convnext_base ;;
    all) ONLY= ;;
    *) echo "PART must be a, b, c, d or all" >&2; exit 2 ;;
esac
GPUS="${GPUS:-$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)}"
Z="reports/multi_heldout/$FOLDER"
mkdir -p "$Z/logs"
start=$(date +%s)
pack() { tar -czf "$OUT/multi_heldout.tgz.tmp" "$Z" && mv "$OUT/multi_heldout.tgz.tmp" "$OUT/multi_heldout.tgz"; }
( while sleep 30; do pack; done ) &
packer=$!
{
    date -u +%FT%TZ
    nvidia-smi
    nvidia-smi topo -m
    python3 -m memprobe device
    python3 -m pip list 2>/dev/null | grep -iE '^(torch|transformers|timm|nvidia-nccl-cu[0-9]+) '
} >"$Z/logs/device_$(date -u +%Y%m%d-%H%M%S)_part$PART.txt" 2>&1
timeout -k 30 $(( DEADLINE_S + 60 )) python3 benchmarks/zoo.py \
    --zoo-file benchmarks/zoo_models/multi_heldout.yaml scan --out "$Z" --kinds gpus2 --gpus "$GPUS" \
    --deadline "$DEADLINE_S" --job-limit "$JOB_LIMIT_S" ${ONLY:+--only "$ONLY"} >>"$Z/logs/scan_part$PART.out" 2>&1
echo "part $PART: rc $? after $(( $(date +%s) - start )) s" >>"$Z/logs/scan_part$PART.out"
kill $packer 2>/dev/null
pack
tail -12 "$Z/logs/scan_part$PART.out"
