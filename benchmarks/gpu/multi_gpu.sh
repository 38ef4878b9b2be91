#!/usr/bin/env bash
# Several GPUs (2x H200; ~9 minutes per part): per-GPU max batch
# under DDP and FSDP2, 1-to-2 scaling, and a --parallel scan, with memprobe.
#   PART=1 (default): `--parallel` scan of the six workloads in bf16 over both GPUs (its wall time against the
#                     serial estimate, the sum of the jobs' own times; these are also the 1-GPU edges), then
#                     bert-large bf16 on 2 GPUs under ddp and under fsdp: per-GPU edge proven in fresh process
#                     groups, group throughput and 1-GPU throughput at that per-GPU batch, efficiency.
#   PART=2: transformer-big and resnet50 bf16 on 2 GPUs under ddp and fsdp.
#   PART=3: bert-large and transformer-big fp16 --gpus 1,2 --strategy ddp,fsdp.
#   PART=4: resnet50 fp16 --gpus 1,2 --strategy ddp,fsdp.
#   PART=all: every part in that order (about 35 minutes: more than one device command allows).
# Steps run in order while the time budget lasts (BUDGET_S, default 520 s, so that clean-up and packing stay within a 10-minute command); a step cut short by the
# budget is interrupted with SIGINT, so memprobe writes what finished (marked partial) and ends every rank.
# Every process gets NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1
# (exported here, and set by memprobe's launcher for every rank and child scan it starts).
# Results and logs go to $OUT/w, packed into $OUT/r.tgz at the end.
# Run from the repository root: OUT=/some/dir [PART=1] bash benchmarks/gpu/multi_gpu.sh
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}
export NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
PART=${PART:-1}
W="$OUT/w"
R="$W/reports"
mkdir -p "$R"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PY:-python3}
BUDGET_S=${BUDGET_S:-520}
START=$(date +%s)

left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }

{
  nvidia-smi
  echo; nvidia-smi topo -m
  echo; $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"
  $PY -m pip show transformers timm nvidia-ml-py 2>/dev/null | grep -E '^(Name|Version)'
  env | grep -E '^(NCCL_|TORCH_SYMM|NVSHMEM|CUDA_VISIBLE)' | sort
} > "$W/environment.txt" 2>&1
$PY -m memprobe device >> "$W/environment.txt" 2>&1

# Throughput curves are not what this script measures: skip them where the option exists.
EXTRA=()
if $PY -m memprobe scan --help 2>/dev/null | grep -q -- "--no-curve"; then EXTRA+=(--no-curve); fi

step() {  # step NAME MIN_SECONDS ARGS...: run one scan if at least MIN_SECONDS of the budget are left
  local name=$1 need=$2; shift 2
  local remaining; remaining=$(left)
  if (( remaining < need )); then
    echo "skipped $name: ${remaining}s left of ${BUDGET_S}s" | tee -a "$W/skipped.txt"
    return
  fi
  echo "== $name ($(date -u +%T), ${remaining}s left)"
  local t0; t0=$(date +%s)
  timeout --signal=INT --kill-after=30 "$remaining" $PY -m memprobe scan "$@" --out "$R" "${EXTRA[@]}" \
    > "$W/$name.out" 2> "$W/$name.log"
  echo "$name: rc=$? in $(( $(date +%s) - t0 ))s" | tee -a "$W/steps.txt"
}

part1() {
  # The six workloads on one GPU each, two at a time, longest first (H100 bf16 searches: nasnet-large 170 s,
  # resnet50 41 s, transformer-big 32 s, pix2pixhd 29 s, bert-large 13 s, bert-large-squad 13 s), so the last
  # job to start is a short one. These are also the --gpus 1 results of the scans below (same files).
  step parallel-six-bf16   120 -m nasnet-large,resnet50,transformer-big,pix2pixhd,bert-large,bert-large-squad \
                               -p bf16 --parallel --gpus 2
  step bert-large-bf16-ddp  100 -m bert-large -p bf16 --gpus 2 --strategy ddp
  step bert-large-bf16-fsdp 100 -m bert-large -p bf16 --gpus 2 --strategy fsdp
}
part2() {
  step transformer-big-bf16-ddp  100 -m transformer-big -p bf16 --gpus 2 --strategy ddp
  step transformer-big-bf16-fsdp 100 -m transformer-big -p bf16 --gpus 2 --strategy fsdp
  step resnet50-bf16-ddp         100 -m resnet50 -p bf16 --gpus 2 --strategy ddp
  step resnet50-bf16-fsdp        100 -m resnet50 -p bf16 --gpus 2 --strategy fsdp
}
part3() {
  step bert-large-fp16-gpus12      150 -m bert-large -p fp16 --gpus 1,2 --strategy ddp,fsdp
  step transformer-big-fp16-gpus12 150 -m transformer-big -p fp16 --gpus 1,2 --strategy ddp,fsdp
}
part4() {
  step resnet50-fp16-gpus12        150 -m resnet50 -p fp16 --gpus 1,2 --strategy ddp,fsdp
}
case "$PART" in
  1) part1 ;;
  2) part2 ;;
  3) part3 ;;
  4) part4 ;;
  all) part1; part2; part3; part4 ;;
  *) echo "PART must be 1, 2, 3, 4 or all" >&2; exit 2 ;;
esac

# The parallel scan's summary (wall time, serial estimate = sum of the jobs' own wall times) is the last
# line of $R/parallel_*/summary.jsonl; copy it beside the logs.
for f in "$R"/parallel_*/summary.jsonl; do [[ -f "$f" ]] && cp "$f" "$W/parallel-summary.jsonl"; done
# Tables: the scaling table (multi-GPU files) and the single-GPU scan table.
timeout 120 $PY -m memprobe report "$R" > "$W/report.md" 2> "$W/report.log"
timeout 120 $PY -m memprobe report --scans "$R" > "$W/scans.md" 2>> "$W/report.log"
ps -eo pid,etimes,args | grep -E "memprobe\.probe\.(distributed|worker)" | grep -v grep > "$W/leftover-processes.txt"
tar -czf "$OUT/r.tgz" -C "$OUT" w
echo "done in $(( $(date +%s) - START ))s; results in $OUT/r.tgz"
