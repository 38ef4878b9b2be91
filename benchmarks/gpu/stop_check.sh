#!/usr/bin/env bash
# Every process memprobe starts, on 2 GPUs, and how each way of stopping a scan ends them: the scans that start
# trial processes (exec'd and forked by the fork server), the predicted-start child, --parallel child scans and
# torchrun groups (served, with out-of-memory recoveries); then, mid-search, Ctrl-C (SIGINT) of a one-GPU scan, a
# 2-GPU FSDP2 scan and a --parallel scan, SIGTERM of a 2-GPU DDP scan, and SIGKILL of a one-GPU scan's parent. After each stop: the exit
# code (130 for SIGINT, 143 for SIGTERM), the file it kept (partial) and, 10 s later, every process left of the
# scan's tree and what nvidia-smi lists on the GPUs (both should be empty).
#
#   OUT=/some/dir bash benchmarks/gpu/stop_check.sh     # from the repository root on a 2-GPU machine, ~7 min
#
# What comes back: $OUT/stop_check.tgz (result files, logs) and $OUT/summary.txt.
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
W=$(mktemp -d)
mkdir -p "$OUT"
S="$OUT/summary.txt"  # written as it goes: a call cut short still brings it back
say() { echo "[$(date -u +%T)] $*" | tee -a "$S"; }
apps() { nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>&1; }
tree_of() { local p=$1; echo "$p"; for c in $(pgrep -P "$p"); do tree_of "$c"; done; }
SCAN=(python3 -m memprobe scan --no-curve --no-breakdown)
# Job control: a background job of a script otherwise starts with SIGINT ignored, and Ctrl-C would never reach it.
set -m

say "stop_check.sh on $(hostname)"  # the commit is not read here: the device's copy of .git may be older than its tree
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee -a "$S"
python3 -c "import torch, transformers, timm; print('torch', torch.__version__, 'transformers', transformers.__version__, 'timm', timm.__version__)" | tee -a "$S"

run() {  # NAME LIMIT ARGS...: one scan to its end
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s)
  timeout --signal=TERM --kill-after=40 "$limit" "${SCAN[@]}" "$@" --out "$W/$name" > "$W/$name.out" 2> "$W/$name.log"
  say "$name: exit $? in $(( $(date +%s) - t0 )) s"
  python3 -m memprobe report --scans "$W/$name" 2>/dev/null | sed -n '1,8p' | tee -a "$S"
}

stop() {  # NAME SIGNAL AFTER_PATTERN ARGS...: start a scan, send SIGNAL DELAY s (default 2) after its log shows
  # AFTER_PATTERN, then check
  local name=$1 sig=$2 pattern=$3; shift 3
  "${SCAN[@]}" "$@" --out "$W/$name" > "$W/$name.out" 2> "$W/$name.log" &
  local parent=$! waited=0  # memprobe's own pid: the command runs directly, not in a subshell
  until grep -qE "$pattern" "$W/$name.log" 2>/dev/null; do
    sleep 1; waited=$((waited + 1))
    if (( waited >= 240 )) || ! kill -0 "$parent" 2>/dev/null; then break; fi
  done
  sleep "${DELAY:-2}"
  local pids; pids=$(tree_of "$parent" | sort -u | tr '\n' ' ')
  say "$name: SIG$sig to the scan ($parent) after '$pattern' ($waited s); its tree: $pids; on the GPUs: $(apps | tr '\n' ' ')"
  kill -"$sig" "$parent"
  local t0 code; t0=$(date +%s)
  if [[ "$sig" == KILL ]]; then
    wait "$parent" 2>/dev/null; code=$?
  else
    for _ in $(seq 120); do kill -0 "$parent" 2>/dev/null || break; sleep 1; done
    wait "$parent" 2>/dev/null; code=$?
  fi
  say "$name: exit $code, $(( $(date +%s) - t0 )) s after the signal"
  sleep 10
  local left=""
  for p in $pids; do
    if [[ "$p" != "$parent" && -e /proc/$p ]] && ! grep -q "^State:.*Z" /proc/$p/status 2>/dev/null; then left="$left $p"; fi
  done
  say "$name: 10 s later, processes of the scan left:${left:- none}; on the GPUs: $(apps | tr '\n' ' ' | sed 's/^ *$/none/')"
  tail -n 2 "$W/$name.log" | sed "s/^/  $name log: /" | tee -a "$S"
  for f in "$W/$name"/*.json; do
    [[ -f "$f" ]] && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('  kept', sys.argv[1].rsplit('/',1)[1], 'status', d.get('status'), {k: (v.get('status'), v.get('max_batch'), len(v.get('attempts') or [])) for k, v in d['precisions'].items()})" "$f" | tee -a "$S"
  done
  pkill -9 -f "memprobe" 2>/dev/null  # nothing of one check may reach into the next
  sleep 2
}

# 1. Through to the end: one-GPU scans as --parallel child scans (trial processes exec'd and forked, the predicted
#    start beside each), then a served DDP group that recovers from out-of-memory trials.
run parallel-bf16 200 -m bert-large,resnet50 -p bf16 --parallel --gpus 2
run squad-2ddp 200 -m bert-large-squad -p bf16 --gpus 2 --strategy ddp
# 2. Stopped mid-search.
stop one-gpu-int INT "trial 3 " -m bert-large -p bf16
stop ddp-term TERM "trial 4 " -m bert-large -p bf16 --gpus 2 --strategy ddp
stop fsdp-int INT "trial 4 " -m bert-large -p bf16 --gpus 2 --strategy fsdp
DELAY=25 stop parallel-int INT "started resnet50" -m bert-large,resnet50 -p bf16 --parallel --gpus 2
stop one-gpu-kill KILL "trial 3 " -m bert-large -p bf16

tar -czf "$OUT/stop_check.tgz" -C "$W" .
rm -rf "$W"
