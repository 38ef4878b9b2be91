#!/usr/bin/env bash
# Several GPUs (issue 36, items 1-3): per-GPU max batch under DDP and FSDP2 proven in fresh process groups, the
# group's throughput and the scaling efficiency against 1 GPU, --parallel scans, and the search benchmark (before
# and after served process groups). One PART is one device call: it stops starting scans at BUDGET_S (default
# 510 s), every scan has a time limit (SIGTERM: memprobe writes what finished, marked partial, and ends its ranks),
# then the results are packed, so a call stays within its 10 minutes.
#
#   OUT=/some/dir PART=2a bash benchmarks/gpu/multi_gpu.sh        # from the repository root on the GPU machine
#
# What each PART runs, and about how long (from issue 36 on 2x H200: a fresh process group costs 23-33 s; DDP's
# bert-large fp16 edge took 150 s with a launch per search trial; a served search runs its trials in one group, so
# a scan on N GPUs should take 2-3 minutes: search, the proof's two fresh groups, the 1-GPU baseline):
# 2 GPUs (nvidia-h200-x2 or nvidia-h100-x2):
#   2a (~8 min) --parallel, one GPU per job: the six built-in workloads in bf16 (its wall time against the serial
#               sum of the jobs' times); at the same time on GPU 0 and 1: llama-1b bf16, and bert-large and
#               transformer-big fp16. These are the --gpus 1 results (the single-GPU scan, as --gpus 1,2 runs it).
#   2b (~8 min) search benchmark, bert-large fp16 on 2 GPUs, ddp: a launch per trial (before), served (after)
#   2c (~9 min) the same under fsdp (its "before" run is cut at half the budget if it takes longer)
#   2d (~8 min) bert-large bf16 ddp, fsdp; bert-large-squad bf16 ddp
#   2e (~8 min) bert-large-squad bf16 fsdp; transformer-big bf16 ddp, fsdp
#   2f (~8 min) resnet50 bf16 ddp, fsdp; transformer-big fp16 ddp
#   2g (~9 min) transformer-big fp16 fsdp; llama-1b bf16 ddp, fsdp
#   (bert-large fp16 ddp and fsdp on 2 GPUs: the "after" runs of 2b and 2c, written with the other results)
# 4 GPUs (nvidia-h200-x4 or nvidia-h100-x4):
#   4a (~8 min) --parallel over 4 GPUs: the six built-in workloads bf16; with llama-1b bf16 and bert-large and
#               transformer-big fp16 on a GPU each at the same time (--gpus 1)
#   4b (~8 min) on 4 GPUs: bert-large fp16 ddp, fsdp; bert-large bf16 ddp
#   4c (~8 min) on 4 GPUs: bert-large bf16 fsdp; bert-large-squad bf16 ddp, fsdp
#   4d (~8 min) on 4 GPUs: transformer-big bf16 ddp, fsdp; transformer-big fp16 ddp
#   4e (~8 min) on 4 GPUs: transformer-big fp16 fsdp; resnet50 bf16 ddp, fsdp
#   4f (~8 min) on 4 GPUs: llama-1b bf16 ddp, fsdp
#   4g (~9 min) on 2 GPUs, two scans at a time (GPUs 0,1 and 2,3): bert-large fp16 ddp | fsdp,
#               bert-large bf16 ddp | fsdp, bert-large-squad bf16 ddp | fsdp
#   4h (~9 min) the same for transformer-big bf16, transformer-big fp16, resnet50 bf16
#   4i (~5 min) the same for llama-1b bf16
# A scan that cannot start before BUDGET_S is listed in skipped.txt: run it in a later call with STEPS="name ..."
# (STEPS picks steps by name from every part of this machine's kind; PART is then not needed). DRY=1 lists what a
# PART would run (its commands, in steps.txt and summary.txt) without running anything.
#
# Every process gets NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 (exported here,
# and set by memprobe's launcher for every rank and child scan it starts). Throughput curves and breakdowns are not
# what this measures: every scan runs with --no-curve --no-breakdown.
# What comes back: $OUT/results.tgz (result files under reports/, logs, environment, the tables) and
# $OUT/summary.txt (the steps, their times, and the scaling table), two files.
# Afterwards, on the CPU: the result files go to reports/<kind>/ (e.g. reports/2x_h200, reports/4x_h200), and
#   python benchmarks/calibration.py reports/2x_h200 reports/4x_h200 --json reports/calibration_multi_gpu.json \
#       --md reports/calibration_multi_gpu.md
# writes the per-GPU predicted-against-measured table (with the 1-GPU B and the efficiency of each scan).
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}
export NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PY:-python3}
PART=${PART:-}
STEPS=${STEPS:-}
BUDGET_S=${BUDGET_S:-510}
KILL_AFTER_S=40  # after a scan's SIGTERM: memprobe ends its ranks (15 s) and writes its file
START=$(date +%s)
W=$(mktemp -d)  # the work folder stays outside $OUT: only the two files below come back (a call returns 8)
R="$W/reports"
mkdir -p "$R"
GPUS=${GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
DRY=${DRY:-0}  # 1: write each command to steps.txt instead of running it (to see what a PART runs)

left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }

wanted() {  # NAME: whether STEPS (when given) names this step
  [[ -z "$STEPS" ]] || [[ " $STEPS " == *" $1 "* ]]
}

can_start() {  # NAME MIN_SECONDS: enough of the budget left to start it? Else it is listed as skipped.
  local remaining; remaining=$(left)
  if (( remaining < $2 )); then
    echo "$1" >> "$W/skipped.txt"
    echo "skipped $1: ${remaining}s left of ${BUDGET_S}s" | tee -a "$W/steps.txt"
    return 1
  fi
}

timed() {  # NAME LIMIT_SECONDS COMMAND...: run it under a time limit, log it, note its exit and time
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s)
  echo "== $name ($(date -u +%T), limit ${limit}s): $*" >> "$W/steps.txt"
  if [[ "$DRY" == 1 ]]; then
    echo "$name: dry run, env NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS=$NVSHMEM_DISABLE_NVLS CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}" >> "$W/steps.txt"
    return
  fi
  timeout --signal=TERM --kill-after="$KILL_AFTER_S" "$limit" "$@" > "$W/logs/$name.out" 2> "$W/logs/$name.log"
  echo "$name: rc=$? in $(( $(date +%s) - t0 ))s" | tee -a "$W/steps.txt"
}

scans() {  # MIN_SECONDS SPEC...: scans at the same time, each SPEC "NAME|CUDA_VISIBLE_DEVICES|SCAN ARGS"
  local min=$1; shift
  local chosen=() spec
  for spec in "$@"; do wanted "${spec%%|*}" && chosen+=("$spec"); done
  (( ${#chosen[@]} )) || return 0
  local remaining; remaining=$(left)
  if (( remaining < min )); then
    for spec in "${chosen[@]}"; do can_start "${spec%%|*}" "$min"; done
    return 0
  fi
  local name devices args
  for spec in "${chosen[@]}"; do
    IFS='|' read -r name devices args <<< "$spec"
    # shellcheck disable=SC2086  # ARGS are words without spaces
    ( if [[ -n "$devices" ]]; then export CUDA_VISIBLE_DEVICES=$devices; fi
      timed "$name" "$remaining" $PY -m memprobe scan $args --no-curve --no-breakdown --out "$R" ) &
  done
  wait
}

scan() {  # NAME MIN_SECONDS SCAN ARGS...: one scan on every GPU of the machine
  local name=$1 min=$2; shift 2
  scans "$min" "$name||$*"
}

bench() {  # NAME MIN_SECONDS STRATEGY: the search benchmark on 2 GPUs, before and after served groups
  local name=$1 min=$2 strategy=$3
  wanted "$name" || return 0
  can_start "$name" "$min" || return 0
  local remaining; remaining=$(left)
  local per_run=$(( (remaining - 80) / 2 ))  # each run then has time to write its file after SIGTERM
  mkdir -p "$W/bench"
  timed "$name" "$remaining" $PY benchmarks/multi_gpu_search.py --model bert-large -p fp16 --gpus 2 \
    --strategy "$strategy" --timeout "$per_run" --out "$W/bench" --out-after "$R" --json "$W/bench/$name.json"
}

mkdir -p "$W/logs"
: > "$W/steps.txt"
: > "$W/skipped.txt"
if [[ "$DRY" != 1 ]]; then
  {
    nvidia-smi
    echo; nvidia-smi topo -m
    echo; $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"
    $PY -m pip show transformers timm nvidia-ml-py 2>/dev/null | grep -E '^(Name|Version)'
    env | grep -E '^(NCCL_|TORCH_SYMM|NVSHMEM|CUDA_VISIBLE|MEMPROBE_)' | sort
    echo; git log -1 --format='%H %s' 2>/dev/null
  } > "$W/environment.txt" 2>&1
  timeout 20 $PY -m memprobe device >> "$W/environment.txt" 2>&1
fi

SIX=nasnet-large,resnet50,transformer-big,pix2pixhd,bert-large,bert-large-squad  # longest search first

part_2a() {
  scan 2a-parallel-six-bf16 240 -m "$SIX" -p bf16 --parallel --gpus 2
  scans 120 "2a-llama-1b-bf16-1gpu|0|-m llama-1b -p bf16" \
            "2a-bert-large-transformer-big-fp16-1gpu|1|-m bert-large,transformer-big -p fp16"
}
part_2b() { bench 2b-bench-bert-large-fp16-ddp 300 ddp; }
part_2c() { bench 2c-bench-bert-large-fp16-fsdp 300 fsdp; }
part_2d() {
  scan 2d-bert-large-bf16-2ddp 120 -m bert-large -p bf16 --gpus 2 --strategy ddp
  scan 2d-bert-large-bf16-2fsdp 120 -m bert-large -p bf16 --gpus 2 --strategy fsdp
  scan 2d-bert-large-squad-bf16-2ddp 120 -m bert-large-squad -p bf16 --gpus 2 --strategy ddp
}
part_2e() {
  scan 2e-bert-large-squad-bf16-2fsdp 120 -m bert-large-squad -p bf16 --gpus 2 --strategy fsdp
  scan 2e-transformer-big-bf16-2ddp 120 -m transformer-big -p bf16 --gpus 2 --strategy ddp
  scan 2e-transformer-big-bf16-2fsdp 120 -m transformer-big -p bf16 --gpus 2 --strategy fsdp
}
part_2f() {
  scan 2f-resnet50-bf16-2ddp 120 -m resnet50 -p bf16 --gpus 2 --strategy ddp
  scan 2f-resnet50-bf16-2fsdp 120 -m resnet50 -p bf16 --gpus 2 --strategy fsdp
  scan 2f-transformer-big-fp16-2ddp 120 -m transformer-big -p fp16 --gpus 2 --strategy ddp
}
part_2g() {
  scan 2g-transformer-big-fp16-2fsdp 120 -m transformer-big -p fp16 --gpus 2 --strategy fsdp
  scan 2g-llama-1b-bf16-2ddp 150 -m llama-1b -p bf16 --gpus 2 --strategy ddp
  scan 2g-llama-1b-bf16-2fsdp 150 -m llama-1b -p bf16 --gpus 2 --strategy fsdp
}

part_4a() {
  scan 4a-parallel-six-bf16 200 -m "$SIX" -p bf16 --parallel --gpus 4
  scans 120 "4a-llama-1b-bf16-1gpu|0|-m llama-1b -p bf16" "4a-bert-large-fp16-1gpu|1|-m bert-large -p fp16" \
            "4a-transformer-big-fp16-1gpu|2|-m transformer-big -p fp16"
}
part_4b() {
  scan 4b-bert-large-fp16-4ddp 120 -m bert-large -p fp16 --gpus 4 --strategy ddp
  scan 4b-bert-large-fp16-4fsdp 120 -m bert-large -p fp16 --gpus 4 --strategy fsdp
  scan 4b-bert-large-bf16-4ddp 120 -m bert-large -p bf16 --gpus 4 --strategy ddp
}
part_4c() {
  scan 4c-bert-large-bf16-4fsdp 120 -m bert-large -p bf16 --gpus 4 --strategy fsdp
  scan 4c-bert-large-squad-bf16-4ddp 120 -m bert-large-squad -p bf16 --gpus 4 --strategy ddp
  scan 4c-bert-large-squad-bf16-4fsdp 120 -m bert-large-squad -p bf16 --gpus 4 --strategy fsdp
}
part_4d() {
  scan 4d-transformer-big-bf16-4ddp 120 -m transformer-big -p bf16 --gpus 4 --strategy ddp
  scan 4d-transformer-big-bf16-4fsdp 120 -m transformer-big -p bf16 --gpus 4 --strategy fsdp
  scan 4d-transformer-big-fp16-4ddp 120 -m transformer-big -p fp16 --gpus 4 --strategy ddp
}
part_4e() {
  scan 4e-transformer-big-fp16-4fsdp 120 -m transformer-big -p fp16 --gpus 4 --strategy fsdp
  scan 4e-resnet50-bf16-4ddp 120 -m resnet50 -p bf16 --gpus 4 --strategy ddp
  scan 4e-resnet50-bf16-4fsdp 120 -m resnet50 -p bf16 --gpus 4 --strategy fsdp
}
part_4f() {
  scan 4f-llama-1b-bf16-4ddp 150 -m llama-1b -p bf16 --gpus 4 --strategy ddp
  scan 4f-llama-1b-bf16-4fsdp 150 -m llama-1b -p bf16 --gpus 4 --strategy fsdp
}
pairs() {  # PREFIX MODEL PRECISION: ddp on GPUs 0,1 and fsdp on GPUs 2,3 at the same time
  scans 120 "$1-$2-$3-2ddp|0,1|-m $2 -p $3 --gpus 2 --strategy ddp" \
            "$1-$2-$3-2fsdp|2,3|-m $2 -p $3 --gpus 2 --strategy fsdp"
}
part_4g() { pairs 4g bert-large fp16; pairs 4g bert-large bf16; pairs 4g bert-large-squad bf16; }
part_4h() { pairs 4h transformer-big bf16; pairs 4h transformer-big fp16; pairs 4h resnet50 bf16; }
part_4i() { pairs 4i llama-1b bf16; }

TWO=(2a 2b 2c 2d 2e 2f 2g)
FOUR=(4a 4b 4c 4d 4e 4f 4g 4h 4i)
if [[ -n "$STEPS" && -z "$PART" ]]; then
  if (( GPUS >= 4 )); then parts=("${FOUR[@]}"); else parts=("${TWO[@]}"); fi
else
  parts=("$PART")
fi
for part in "${parts[@]}"; do
  case "$part" in
    2[a-g]) (( GPUS >= 2 )) || { echo "PART $part needs 2 GPUs, this machine has $GPUS" >&2; exit 2; } ;;
    4[a-i]) (( GPUS >= 4 )) || { echo "PART $part needs 4 GPUs, this machine has $GPUS" >&2; exit 2; } ;;
    *) echo "PART must be one of ${TWO[*]} ${FOUR[*]} (or give STEPS)" >&2; exit 2 ;;
  esac
  "part_$part"
done

# The parallel scans' summaries (wall time; serial estimate = the sum of the jobs' own wall times).
for f in "$R"/parallel_*/summary.jsonl; do
  [[ -f "$f" ]] && cp "$f" "$W/$(basename "$(dirname "$f")")-summary.jsonl"
done
# Tables: scaling (multi-GPU files, 1-GPU max batch from the single-GPU files, the published figures beside them),
# the single-GPU scan table, and the search benchmark's tables.
if [[ "$DRY" != 1 ]]; then
  timeout 25 $PY -m memprobe report "$R" --with-published > "$W/report.md" 2> "$W/logs/report.log"
  timeout 25 $PY -m memprobe report --scans "$R" > "$W/scans.md" 2>> "$W/logs/report.log"
fi
mkdir -p "$OUT"
ps -eo pid,etimes,args | grep -E "memprobe\.probe\.child\." | grep -v grep > "$W/leftover-processes.txt"
{
  echo "PART=${PART:-} STEPS=${STEPS:-} GPUS=$GPUS, $(( $(date +%s) - START ))s"
  cat "$W/steps.txt"
  echo; echo "skipped (run again with STEPS=\"...\"): $(tr '\n' ' ' < "$W/skipped.txt")"
  echo; echo "processes left: $(wc -l < "$W/leftover-processes.txt")"
  for f in "$W"/bench/*.json; do [[ -f "$f" ]] && $PY -c "import json,sys; print(json.load(open(sys.argv[1]))['table'])" "$f"; done
  echo; cat "$W/report.md" 2>/dev/null
} > "$OUT/summary.txt" 2>&1
tar -czf "$OUT/results.tgz" -C "$W" .
rm -rf "$W"
echo "done in $(( $(date +%s) - START ))s: $OUT/results.tgz, $OUT/summary.txt"
