#!/usr/bin/env bash
# The whole suite: `memprobe scan` of every workload in fp32/fp16/bf16, training, with throughput curves.
#
# Run from the repository root on a GPU machine, with OUT set (results come back from $OUT). Everything goes
# under $OUT/w (result files, one log per model, suite.log with the times) and is tarred to $OUT/r.tgz at the end.
# Survives being cut: each model's scan runs under `timeout -s INT`, and memprobe writes the precisions it
# finished (marked partial) on Ctrl-C; the tarball is rewritten after every model.
# Resumable by model list: MODELS (comma-separated, default all six) picks the models, so the suite can be
# split over two ~9-minute device calls, e.g.
#   MODELS=nasnet-large,resnet50,bert-large-squad   bash benchmarks/gpu/suite.sh
#   MODELS=bert-large,transformer-big,pix2pixhd      bash benchmarks/gpu/suite.sh
# and the suite time is the sum of the two "suite total" lines. A model whose line says "cut" or "not started"
# is rerun by naming it in MODELS.
# Env: MODELS, PRECISIONS (fp32,fp16,bf16), BUDGET_S (seconds for the whole call, default 520: a 600 s call
# minus start-up and the tarball), EXTRA (more `memprobe scan` options, e.g. "--no-curve"), MODE (train, or
# infer: suite_infer.sh sets it), PER_MODEL_S (the most seconds one model may take; default: what is left).
set -u
: "${OUT:?set OUT to the folder whose files come back}"
MODELS="${MODELS:-nasnet-large,resnet50,bert-large-squad,bert-large,transformer-big,pix2pixhd}"
PRECISIONS="${PRECISIONS:-fp32,fp16,bf16}"
BUDGET_S="${BUDGET_S:-520}"
EXTRA="${EXTRA:-}"
MODE="${MODE:-train}"
PER_MODEL_S="${PER_MODEL_S:-$BUDGET_S}"
W="$OUT/w"
mkdir -p "$W/results" "$W/logs"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ "$MODE" = infer ]; then NAME=infer; else NAME=suite; fi
LOG="$W/$NAME.log"
start=$(date +%s)
pack() { tar -czf "$OUT/r.tgz.tmp" -C "$OUT" w && mv "$OUT/r.tgz.tmp" "$OUT/r.tgz"; }
say() { echo "$*" | tee -a "$LOG"; }

say "$NAME ($MODE): models $MODELS, precisions $PRECISIONS, budget ${BUDGET_S}s, $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$LOG"
python3 -m memprobe device >>"$LOG" 2>&1
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' >>"$LOG" 2>&1
pack

IFS=',' read -r -a models <<<"$MODELS"
for model in "${models[@]}"; do
    now=$(date +%s)
    left=$(( BUDGET_S - (now - start) ))
    if (( left < 45 )); then
        say "$model: not started (${left}s left of the budget)"
        continue
    fi
    limit=$(( left < PER_MODEL_S ? left : PER_MODEL_S ))
    say "$model: start $(date -u +%T), up to ${limit}s"
    t0=$(date +%s)
    # -k: if the scan does not end within 20 s of the INT (writing its partial file), kill it
    timeout -s INT -k 20 "$limit" python3 -m memprobe scan --model "$model" --precision "$PRECISIONS" \
        --mode "$MODE" --out "$W/results" $EXTRA >"$W/logs/$model.log" 2>&1
    rc=$?
    t1=$(date +%s)
    case $rc in
        0) state="done" ;;
        124|130|137) state="cut at ${limit}s (rc $rc): finished precisions kept, marked partial" ;;
        *) state="failed (rc $rc)" ;;
    esac
    say "$model: $state in $(( t1 - t0 ))s"
    # per precision: when each started, the best batch, the curve's cost, the proof and the file
    grep -E "^\[$model [a-z0-9]+\] starting|predicted max batch|no predicted start|best batch b\*|curve took|fresh-process check|wrote " "$W/logs/$model.log" \
        | sed "s/^/  $model: /" | tee -a "$LOG"
    pack
done
end=$(date +%s)
say "$NAME total: $(( end - start ))s for models $MODELS ($(date -u +%FT%TZ))"
if [ "$MODE" = infer ]; then
    python3 -m memprobe report --scans "$W/results" >"$W/infer_scans.md" 2>>"$LOG"
else
    python3 -m memprobe report --scans "$W/results" >"$W/scans.md" 2>>"$LOG"
    python3 -m memprobe report "$W/results" >"$W/report.md" 2>>"$LOG"
fi
ls -la "$W/results" >>"$LOG"
pack
