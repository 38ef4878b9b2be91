"""DDP's gradient-bucket rebuild after the first step, put into a traced trial's events (no GPU).

With find_unused_parameters off (the scan's DDP), torch's DDP starts with one gradient bucket per dtype holding every
parameter's gradient, and at the next forward rebuilds its buckets in the order the gradients became ready: a first
bucket of 1 MiB, then buckets of 25 MiB (each closed once it reaches its cap), dropping its reference to the old
bucket (reducer.cpp: rebuild_buckets, compute_bucket_assignment_by_size, initialize_buckets). The fake process group cannot
run the rebuild (it broadcasts the new order in a tensor it reads), so the traced reducer keeps its first bucket. This
module puts the rebuild into every traced trial where it happens on a GPU, before the second step: the rebuilt buckets
allocated and kept, for the allocator model to place among the blocks the first step left, and the first bucket freed
only when the second step ends. The ready order is taken as the parameters' order reversed (the order DDP itself
assumes before it has seen one).

Why the first bucket lives through the second step: in 25 of the 30 fresh fits at B of the committed DDP scans (2
and 4 H200s, 4 H100s; ResNet-50 to 1.4B-parameter decoders at 2048 tokens) the trial of a fresh process group peaked
above the timed steps that followed it in the same processes by 0.92-1.00 times the parameters' fp32 bytes, one whole
bucket (5.66 GB for Pythia-1.4B at 20 and 21 per GPU, 6.19 GB for Qwen2-1.5B at 9, 4.94 GB for llama-1b at 14); in
the other 5 by under 0.02 times, and two fresh groups of one scan did both (bert-large fp16 on 4 H100s). So the old
bucket can still be held at the second step's activation peak, and the steps after it do not hold it. Which reference
keeps it the result files do not say; the model keeps it to the second step's end, the longer case, so a prediction is
not below the peak a fresh group can reach (docs/edge.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from memprobe.predict.allocator import ALLOC, FREE, MARK

FIRST_BUCKET_BYTES = 1 << 20  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
BUCKET_BYTES = 25 << 20  # DDP's bucket_cap_mb=25, training/wrap.py's DDP
_ID_BASE = 10**9  # the rebuilt buckets' ids: negative and below repeat_last_step's, never the recorder's


def bucket_bytes(
    sizes: Iterable[tuple[Any, int]], limits: tuple[int, ...] = (FIRST_BUCKET_BYTES, BUCKET_BYTES)
) -> list[int]:
    """The bytes of each bucket DDP makes of gradients of (dtype, bytes) in ready order, as reducer.cpp's
    compute_bucket_assignment_by_size: per dtype, a bucket is closed once it holds its limit or more (the first limit,
    then the next, the last repeated); partly filled buckets follow, one per dtype. In the order they are allocated."""
    open_: dict[Any, list[int]] = {}  # dtype -> [bytes so far, index of its limit]
    closed: list[int] = []
    for dtype, nbytes in sizes:
        bucket = open_.setdefault(dtype, [0, 0])
        bucket[0] += nbytes
        if bucket[0] >= limits[bucket[1]]:
            closed.append(bucket[0])
            bucket[0], bucket[1] = 0, min(bucket[1] + 1, len(limits) - 1)
    return closed + [bucket[0] for bucket in open_.values() if bucket[0]]


@dataclass
class BucketRebuild:
    """The rebuild of one DDP-wrapped model: its first buckets' bytes (one per dtype), the rebuilt buckets' bytes, and
    the first buckets' allocation ids in its trace session (adopt)."""

    initial: list[int]
    rebuilt: list[int]
    ids: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, module: Any) -> "BucketRebuild":
        """The rebuild of a DistributedDataParallel `module` (its parameters that need a gradient)."""
        params = [p for p in module.parameters() if p.requires_grad]
        sizes = [(p.dtype, p.numel() * p.element_size()) for p in params]
        initial: dict[Any, int] = {}
        for dtype, nbytes in sizes:
            initial[dtype] = initial.get(dtype, 0) + nbytes
        return cls(list(initial.values()), bucket_bytes(reversed(sizes)))

    def adopt(self, events: list[tuple]) -> bool:
        """Find the first buckets among the allocations of the wrap (`events`: what the recorder saw while DDP was
        built). Returns whether every one was found (else the trials are left as traced)."""
        wanted = list(self.initial)
        self.ids = []
        for event in events:
            if event[0] == ALLOC and event[2] in wanted:
                wanted.remove(event[2])
                self.ids.append(event[1])
        return not wanted

    def __call__(self, trial: list[tuple], step_mark: str) -> list[tuple]:
        """`trial` (a STEP_MARK before each step and after the last) with the rebuild: the rebuilt buckets allocated
        before its second step (alive to the trial's end, as on the GPU), the first buckets freed when that step ends
        (at the trial's end if it is the last). Unchanged without a second step or without adopted buckets."""
        marks = [i for i, e in enumerate(trial) if e[0] == MARK and e[1] == step_mark]
        if len(marks) < 2 or len(self.ids) != len(self.initial):
            return trial
        at, freed_at = marks[1], marks[2] if len(marks) > 2 else len(trial)
        rebuilt = [(ALLOC, -(_ID_BASE + k), nbytes, "DDP bucket (rebuilt)") for k, nbytes in enumerate(self.rebuilt)]
        freed = [(FREE, i) for i in self.ids]
        return trial[:at] + rebuilt + trial[at:freed_at] + freed + trial[freed_at:]
