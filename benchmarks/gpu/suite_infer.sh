#!/usr/bin/env bash
# Inference: `memprobe scan --mode infer` of all six workloads in fp16 and bf16, with throughput curves
# (~6 minutes: the goal is under 60 s per workload and precision).
#
# The suite script in inference mode: run from the repository root on a GPU machine, with OUT set. Result files,
# one log per model and infer.log (the time per model and in total) go under $OUT/w, tarred to $OUT/r.tgz after
# every model. Each model runs under `timeout -s INT` (partial result files are kept) with at most PER_MODEL_S
# seconds, and none starts when less than 45 s of BUDGET_S is left. Env: MODELS (default all six), PRECISIONS
# (fp16,bf16), BUDGET_S (520), PER_MODEL_S (150).
MODE=infer \
MODELS="${MODELS:-resnet50,bert-large-squad,bert-large,transformer-big,nasnet-large,pix2pixhd}" \
PRECISIONS="${PRECISIONS:-fp16,bf16}" \
PER_MODEL_S="${PER_MODEL_S:-150}" \
    exec bash "$(dirname "${BASH_SOURCE[0]}")/suite.sh"
