#!/usr/bin/env bash
# Inference traces near the measured B for the zoo models predict still misses (~6 min on 4 H200s, one per GPU).
#
# `benchmarks/trace_diff.py record --mode infer` at a batch a little below each scan's B, with PyTorch's memory
# history: the allocator's segments and blocks as the GPU served them, for `trace_diff.py diff` on a CPU.
#   beit_base_patch16_224 bf16 at 22880 (B 28140, predicted 21812: the trace's peak allocated agrees within 0.2%,
#       the allocator model reserves 155 GiB unlimited where the H200 reserved 133.2)
#   distilbert-base bf16 at 11000 (B 11838, predicted 9940)
#   cait_s24_224 bf16 at 19903 (B 20154, predicted 20352: above B)
#   swin_base_patch4_window7_224 bf16 at 7500 (B 7586)
# Each runs under a time limit; every file lands in $OUT/w and is packed into $OUT/r.tgz as it finishes.
# Run from the repository root: OUT=/some/dir bash benchmarks/gpu/infer_traces.sh
set -u
: "${OUT:?set OUT to the output folder}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
W="$OUT/w"
mkdir -p "$W"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
pack() { tar -czf "$OUT/r.tgz" -C "$OUT" w; }
trap pack EXIT
{ date -u; nvidia-smi -L; git rev-parse HEAD; } > "$W/device.txt" 2>&1

record() {  # gpu zoo-id batch
    local gpu="$1" id="$2" batch="$3" args
    args=$($PY benchmarks/zoo.py args "$id")
    eval "CUDA_VISIBLE_DEVICES=$gpu timeout -k 10 280 $PY benchmarks/trace_diff.py record $args -p bf16 --mode infer \
        --batch $batch --out $W --name ${id}_bf16_infer_b$batch" > "$W/${id}.log" 2>&1
    echo "exit $?" >> "$W/${id}.log"
    pack
}

record 0 beit_base_patch16_224 22880 &
record 1 distilbert-base 11000 &
record 2 cait_s24_224 19903 &
record 3 swin_base_patch4_window7_224 7500 &
wait
