#!/usr/bin/env bash
# The held-out zoo on one GPU machine (benchmarks/zoo.py): one `memprobe scan` per GPU at a time, results under
# reports/zoo/<FOLDER>/results/<job>/, logs beside them; trace_diff recordings of TRACES first.
#
# Run from the repository root with OUT set. Jobs whose folder already holds a complete result are skipped, so the
# zoo of one card spans several ~9-minute calls: commit what came back into reports/zoo/<FOLDER>/ and call again.
# The folder is tarred to $OUT/zoo.tgz every 30 s and at the end, so a call cut at its limit still returns what
# finished; each scan is sent SIGTERM at its own limit or the deadline and writes what it finished (partial).
#
# Env: FOLDER (h200, h100, ...: default from the GPU name), DEADLINE_S (seconds from the start after which no scan
# runs, default 520), KINDS (train,fp32,infer,gpus2), ONLY (zoo ids), JOB_LIMIT_S (each scan's limit; default by kind,
# 540 s for a --gpus 2 scan: JOB_LIMIT_S=300 lets each GPU pair of a 4-GPU machine run two or three in one call),
# TRACES (id[:precision[:batch[:mode]]], recorded by
# `trace_diff.py record` at batch 2 in bf16 on GPU 0 while the others scan; it joins them after), PREDICT_HOST (when set, also predict every
# scanned job on this machine's CPUs with the GPUs hidden, as host PREDICT_HOST, after the scans).
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
KINDS="${KINDS:-train,fp32,infer,gpus2}"
ONLY="${ONLY:-}"
TRACES="${TRACES:-}"
Z="reports/zoo/$FOLDER"
mkdir -p "$Z/logs"
start=$(date +%s)
pack() { tar -czf "$OUT/zoo.tgz.tmp" "$Z" && mv "$OUT/zoo.tgz.tmp" "$OUT/zoo.tgz"; }
( while sleep 30; do pack; done ) &
packer=$!
{
    date -u +%FT%TZ
    nvidia-smi
    python3 -m memprobe device
    python3 -m pip list 2>/dev/null | grep -iE '^(torch|transformers|timm|peft|numpy) '
    python3 --version
} >"$Z/logs/device_$(date -u +%Y%m%d-%H%M%S).txt" 2>&1

record_traces() {
    mkdir -p "$Z/traces"
    IFS=',' read -r -a ids <<<"$TRACES"
    for item in "${ids[@]}"; do
        IFS=':' read -r id prec batch mode <<<"$item"  # id[:precision[:batch[:mode]]], bf16, batch 2, train by default
        prec=${prec:-bf16}
        batch=${batch:-2}
        mode=${mode:-train}
        args=$(python3 benchmarks/zoo.py args "$id")
        eval "CUDA_VISIBLE_DEVICES=$TRACE_GPU timeout -k 10 150 python3 benchmarks/trace_diff.py record $args \
            -p $prec --mode $mode --batch $batch --out $Z/traces --name ${id}_${prec}_${mode}_b${batch}" >>"$Z/logs/traces.log" 2>&1
        echo "$item: rc $? at $(( $(date +%s) - start )) s" >>"$Z/logs/traces.log"
    done
}

# With TRACES, GPU TRACE_GPU (default the first) records them first and then joins the other GPUs' queue of KINDS.
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)
TRACE_GPU="${TRACE_GPU:-${gpus%%,*}}"
flag="$Z/logs/.traces_done"
rm -f "$flag"
if [ -n "$TRACES" ]; then
    rest=$(echo "$gpus" | tr ',' '\n' | grep -vx "$TRACE_GPU" | paste -sd, -)
    ( record_traces; touch "$flag" ) &
    tracer=$!
    join="--join $TRACE_GPU:$flag"
else
    rest=$gpus
    tracer=
    join=
fi
python3 benchmarks/zoo.py scan --out "$Z" --deadline "$DEADLINE_S" --gpus "$rest" --kinds "$KINDS" $join \
    ${ONLY:+--only "$ONLY"} ${JOB_LIMIT_S:+--job-limit "$JOB_LIMIT_S"} >>"$Z/logs/zoo_scan.out" 2>&1
[ -n "$tracer" ] && wait "$tracer"
rm -f "$flag"
echo "scan phase done after $(( $(date +%s) - start )) s" >>"$Z/logs/zoo_scan.out"
if [ -n "${PREDICT_HOST:-}" ]; then
    CARD=$( [ "$FOLDER" = h100 ] && echo H100 || echo H200 )
    CUDA_VISIBLE_DEVICES= python3 benchmarks/zoo.py predict --results "$Z" --card "$CARD" --host "$PREDICT_HOST" \
        >>"$Z/logs/zoo_predict.out" 2>&1
fi
kill $packer 2>/dev/null
pack
tail -3 "$Z"/logs/zoo_scan*.out; tail -20 "$Z/logs/traces.log" 2>/dev/null
