#!/usr/bin/env bash
# Reliability on a GPU: (1) the kill test -- SIGKILL a running `memprobe scan` mid-trial and show with
# nvidia-smi that no process is left on the GPU 10 s later; (2) the soak -- `scan --soak 1000` of
# bert-large fp16 and resnet50 fp16 (the found B trains 1000 more steps in a fresh process, lowered
# if it fails). Every log and result file goes under $OUT/w and is packed into $OUT/r.tgz.
#
#   PART=all|kill|bert|resnet  (default all)   SOAK=steps (default 1000)
#
# Time on an H100 80GB (step times from reports/h100 at the max batch: bert-large fp16 0.40 s,
# resnet50 fp16 0.36 s): kill ~1.5 min; bert ~1 min search/proof + 1000 x 0.40 s soak = ~8 min;
# resnet ~1 min + 1000 x 0.36 s = ~7 min. All three do not fit one 10-minute device call: run
# PART=kill, PART=bert and PART=resnet as three calls (or SOAK=300 for ~7 min in one call).
# Each scan is capped by `timeout` (SIGTERM: the scan stops like Ctrl-C and keeps a partial file).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:?set OUT to the folder for results}
W="$OUT/w"
mkdir -p "$W"
PART=${PART:-all}
SOAK=${SOAK:-1000}
export PYTHONPATH=$PWD
LOG="$W/soak_and_kill_${PART}.log"
say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }
apps() { nvidia-smi --query-compute-apps=pid,used_memory --format=csv 2>&1; }
tree_of() {  # pid and all its descendants
  local p=$1; echo "$p"; for c in $(pgrep -P "$p"); do tree_of "$c"; done
}
pack() { tar -czf "$OUT/r.tgz" -C "$OUT" w; say "packed $OUT/r.tgz"; }
trap pack EXIT

say "soak_and_kill.sh PART=$PART SOAK=$SOAK on $(hostname)"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv | tee -a "$LOG"
python3 -m memprobe device 2>&1 | tee -a "$LOG"

kill_test() {
  say "== kill test: memprobe scan --model bert-large --precision fp16, SIGKILL of the parent mid-trial"
  local klog="$W/kill_scan.log"
  python3 -m memprobe scan --model bert-large --precision fp16 --out "$W/kill" >"$klog" 2>&1 &
  local parent=$!
  say "scan parent pid $parent"
  # Wait until a trial process holds GPU memory (and a trial has started), at most 120 s.
  local waited=0
  until grep -q "trial [0-9]" "$klog" && apps | grep -qv "^pid"; do
    sleep 1; waited=$((waited + 1))
    if [ $waited -ge 120 ] || ! kill -0 "$parent" 2>/dev/null; then break; fi
  done
  sleep 3  # mid-trial
  local pids; pids=$(tree_of "$parent" | sort -u | tr '\n' ' ')
  say "before SIGKILL: processes of the scan: $pids"
  ps -o pid,ppid,sid,etimes,args -p "$(echo $pids | tr ' ' ',')" | tee -a "$LOG"
  say "nvidia-smi compute apps before SIGKILL:"; apps | tee -a "$LOG"
  tail -n 3 "$klog" | tee -a "$LOG"
  kill -KILL "$parent"
  say "SIGKILL sent to $parent; waiting 10 s"
  sleep 10
  say "nvidia-smi compute apps 10 s after SIGKILL:"; apps | tee -a "$W/kill_nvidia_smi_after.csv" | tee -a "$LOG"
  local left=""
  for p in $pids; do
    if [ "$p" != "$parent" ] && [ -e "/proc/$p" ] && ! grep -q "^State:.*Z" "/proc/$p/status" 2>/dev/null; then left="$left $p"; fi
  done
  local on_gpu; on_gpu=$(apps | grep -v "^pid" | grep -c . || true)
  if [ -z "$left" ] && [ "$on_gpu" = "0" ]; then
    say "KILL TEST PASS: no process of the scan alive, no compute process on the GPU"
  else
    say "KILL TEST FAIL: still alive:${left:- none}; compute processes on the GPU: $on_gpu"
    ps -o pid,ppid,sid,etimes,args -p "$(echo $left | tr ' ' ',')" 2>/dev/null | tee -a "$LOG"
  fi
}

soak_scan() {  # model
  local model=$1
  say "== memprobe scan --model $model --precision fp16 --soak $SOAK --no-throughput"
  local started=$SECONDS
  timeout --signal=TERM 560 python3 -m memprobe scan --model "$model" --precision fp16 --soak "$SOAK" \
    --no-throughput --out "$W/soak" >"$W/soak_${model}_fp16.log" 2>&1
  local rc=$?
  say "$model: exit $rc after $((SECONDS - started)) s"
  tail -n 25 "$W/soak_${model}_fp16.log" | tee -a "$LOG"
  local f; f=$(ls -t "$W"/soak/*_"${model}"_train_*.json 2>/dev/null | head -n 1)
  [ -n "$f" ] && python3 - "$f" <<'PY' | tee -a "$LOG"
import json, sys
d = json.load(open(sys.argv[1]))
for name, p in d["precisions"].items():
    s = p.get("proof", {}).get("soak")
    print(f"{sys.argv[1]}: status {d['status']}; {name}: max batch {p.get('max_batch')}, proof {p.get('proof', {}).get('fits')}"
          f" fits / {p.get('proof', {}).get('fails')} {p.get('proof', {}).get('fail_outcome')}; soak: "
          + (f"{s['steps']} steps, before {s['max_batch_before']}, after {s['max_batch']}, lowered {s['lowered']}, "
             f"{s['seconds']} s, runs {[(r['batch'], r['outcome'], r.get('steps'), r.get('seconds')) for r in s['runs']]}"
             if s else "none"))
PY
  say "nvidia-smi compute apps after the $model scan:"; apps | tee -a "$LOG"
}

case "$PART" in
  kill) kill_test ;;
  bert) soak_scan bert-large ;;
  resnet) soak_scan resnet50 ;;
  all) kill_test; soak_scan bert-large; soak_scan resnet50 ;;
  *) say "unknown PART=$PART (all, kill, bert, resnet)"; exit 2 ;;
esac
say "done"
