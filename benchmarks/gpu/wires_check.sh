#!/usr/bin/env bash
# The typed wires on real GPUs: every process boundary a scan crosses, once, with the answers set beside the
# committed H200 results. A rank's record on one GPU (benchmarks/rank_wires.py: a torchrun launch under DDP and a
# served group under FSDP2, world size 1, with an out-of-memory trial and the rebuild after it: RankSetup, RankMarks,
# RankTrial, Timed, Rebuild read back); a one-GPU scan with the trial settings that travel as TrialSettings
# (--memory-cap, --cudnn-benchmark) and the breakdown request (answered by probe/child/breakdown.py); with 2 GPUs or
# more, a 2-GPU DDP scan (a served group: the ranks read their RankRequest from request.json and, prestarted, from
# go.json; the timed run's TimedSteps) and a 2-GPU FSDP scan (wrap_model's FSDP2 branch); and `predict` (its forked
# trace children answer with a TraceAnswer).
#
#   OUT=/some/dir bash benchmarks/gpu/wires_check.sh     # from the repository root; ~5 min on 1 GPU, ~9 on 2
#
# What comes back: $OUT/wires_check.tgz (result files, logs, rank_wires.json) and $OUT/summary.txt (each step's exit
# code and B, and the committed B of the same setting for comparison).
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
W="$OUT/wires_check"
mkdir -p "$W"
S="$OUT/summary.txt"  # written as it goes: a call cut short still brings it back
say() { echo "[$(date -u +%T)] $*" | tee -a "$S"; }
pack() { tar -czf "$OUT/wires_check.tgz" -C "$OUT" wires_check 2>/dev/null; }

say "wires_check.sh on $(hostname)"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee -a "$S"
python3 -c "import torch, transformers, timm; print('torch', torch.__version__, 'transformers', transformers.__version__, 'timm', timm.__version__)" | tee -a "$S"

run() {  # NAME LIMIT ARGS...: one scan to its end, every process under a time limit
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s)
  timeout --signal=TERM --kill-after=40 "$limit" python3 -m memprobe scan --no-curve "$@" --out "$W/$name" \
    > "$W/$name.out" 2> "$W/$name.log"
  say "$name: exit $? in $(( $(date +%s) - t0 )) s"
  for f in "$W/$name"/*.json; do
    [[ -f "$f" ]] && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('  ', sys.argv[1].rsplit('/',1)[1], d.get('status'), {k: (v.get('status'), v.get('max_batch'), (v.get('settings') or {}).get('breakdown_error')) for k, v in d['precisions'].items()})" "$f" | tee -a "$S"
  done
  tail -n 3 "$W/$name.log" | sed "s/^/  $name log: /" | tee -a "$S"
  pack
}

# 0. A rank's record on one GPU: a launch (DDP) and a served group (FSDP2) of one rank each.
t0=$(date +%s)
timeout --signal=TERM --kill-after=20 200 python3 benchmarks/rank_wires.py --model resnet50 --precision bf16 \
  --strategy fsdp --out "$W/rank_wires.json" > "$W/rank_wires.out" 2> "$W/rank_wires.log"
say "rank_wires: exit $? in $(( $(date +%s) - t0 )) s"
sed 's/^/  /' "$W/rank_wires.out" | cut -c1-300 | tee -a "$S"
pack
GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)

# 1. One GPU: the trial settings and the breakdown request (resnet50 bf16, an emulated 40 GiB card).
run resnet50-cap 240 -m resnet50 -p bf16 --memory-cap 40GiB --cudnn-benchmark --breakdown
# 2. Two GPUs, DDP: a served group and the launches started ahead (bert-large-squad bf16, as committed in
#    reports/h200_2gpu_host).
if (( GPUS >= 2 )); then
run squad-2ddp 240 -m bert-large-squad -p bf16 --gpus 2 --strategy ddp --no-breakdown
# 3. Two GPUs, FSDP2 (bert-large bf16, as committed in reports/h200_2gpu_host).
run bert-2fsdp 240 -m bert-large -p bf16 --gpus 2 --strategy fsdp --no-breakdown
else
  say "1 GPU: the 2-GPU DDP and FSDP scans skipped"
fi
# 4. predict, its traces in forked children (CUDA hidden by the CLI), compared with the DDP scan above.
t0=$(date +%s)
timeout --signal=TERM --kill-after=20 180 python3 -m memprobe predict -m bert-large-squad -p bf16 --gpu H200 \
  > "$W/predict.out" 2> "$W/predict.log"
say "predict: exit $? in $(( $(date +%s) - t0 )) s"
grep -E "predicted max|H200" "$W/predict.out" | head -n 6 | tee -a "$S"
pack

say "committed for comparison (reports/h200_2gpu_host):"
for f in reports/h200_2gpu_host/2x-nvidia-h200_bert-large-squad-ddp_train_*.json \
         reports/h200_2gpu_host/2x-nvidia-h200_bert-large-fsdp_train_*.json; do
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('  ', sys.argv[1].rsplit('/',1)[1], {k: v.get('max_batch') for k, v in d['precisions'].items()})" "$f" | tee -a "$S"
done
pack
say "done"
