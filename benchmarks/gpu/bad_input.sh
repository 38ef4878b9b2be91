#!/usr/bin/env bash
# A user's model misbehaving in a real scan on one GPU (issue 51), ~4 min on an H200: each case's exit status,
# its Error line and its time, next to a plain scan that must still work as before.
#
#   never_returns   build() never returns: one Error line once MEMPROBE_TIME_LIMIT (30 s here) has passed, exit 1
#   own_alarm       build() installs its own SIGALRM handler and returns: the scan runs to its max batch, exit 0
#   weird_loss      loss() raises an exception whose str() raises: user-error naming Weird, exit 1 (not max batch 0)
#   prints          build() prints and chdirs: the scan's stdout holds its tables only, its file lands in --out
#   resnet50        a plain bf16 scan (no curve, no breakdown): the trial build's time limit changes nothing
#
# Every scan runs under `timeout -s INT`; every result file and log goes to $OUT/w, packed into $OUT/r.tgz after
# each case. Run from the repository root: OUT=/some/dir bash benchmarks/gpu/bad_input.sh
set -u
: "${OUT:?set OUT to the output folder}"
W="$OUT/w"
mkdir -p "$W"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}
pack() { tar -czf "$OUT/r.tgz" -C "$OUT" w; }
trap pack EXIT

{
    date -u
    nvidia-smi
    $PY -m memprobe device
    git rev-parse HEAD
} > "$W/device.txt" 2>&1

TASK='import torch
from torch import nn
from memprobe.workloads.base import TrainTask


class Task(TrainTask):
    def make_batch(self, n):
        return torch.randn(n, 1024, device=self.device), torch.randint(0, 10, (n,), device=self.device)

    def loss(self, batch):
        return nn.functional.cross_entropy(self.model(batch[0]), batch[1])


def model(device):
    return nn.Sequential(nn.Linear(1024, 8192), nn.ReLU(), nn.Linear(8192, 10)).to(device)
'
printf 'import time\n\ndef build(device, precision):\n    while True:\n        time.sleep(0.1)\n' > "$W/never_returns.py"
printf '%s\nimport signal\n\ndef build(device, precision):\n    signal.signal(signal.SIGALRM, lambda *a: None)\n    return Task(model(device), {"name": "adamw"}, device)\n' "$TASK" > "$W/own_alarm.py"
printf '%s\nclass Weird(Exception):\n    def __str__(self):\n        raise RuntimeError("no message")\n\n\nclass W(Task):\n    def loss(self, batch):\n        raise Weird()\n\n\ndef build(device, precision):\n    return W(model(device), {"name": "adamw"}, device)\n' "$TASK" > "$W/weird_loss.py"
printf '%s\nimport os\n\ndef build(device, precision):\n    print("hello from build")\n    os.makedirs("/tmp/memprobe-elsewhere", exist_ok=True)\n    os.chdir("/tmp/memprobe-elsewhere")\n    return Task(model(device), {"name": "adamw"}, device)\n' "$TASK" > "$W/prints.py"

run() {  # slug limit_s model [scan options...]
    local slug="$1" limit="$2" model="$3"; shift 3
    local start=$(date +%s)
    MEMPROBE_TIME_LIMIT=30 timeout -s INT "$limit" $PY -m memprobe scan --model "$model" -p bf16 --no-curve \
        --no-breakdown --out "$W/$slug" "$@" > "$W/${slug}.out" 2> "$W/${slug}.err"
    echo "$slug: exit $? after $(($(date +%s) - start)) s; $(grep -m1 '^Error' "$W/${slug}.err")" | tee -a "$W/summary.txt"
    pack
}
run never_returns 150 "$W/never_returns.py:build"
run own_alarm 150 "$W/own_alarm.py:build"
run weird_loss 150 "$W/weird_loss.py:build"
run prints 150 "$W/prints.py:build"
grep -c hello "$W/prints.out" | sed 's/^/prints: lines of the build in stdout: /' | tee -a "$W/summary.txt"
run resnet50 240 resnet50
$PY -m memprobe report --scans "$W"/*/ > "$W/scans.md" 2>> "$W/summary.txt"
