"""DDP's gradient-bucket rebuild after the first step, put into a traced trial's events (no GPU).

With find_unused_parameters off (the scan's DDP), torch's DDP starts with one gradient bucket per dtype holding every
parameter's gradient, and at the next forward rebuilds its buckets in the order the gradients became ready: a first
bucket of 1 MiB, then buckets of 25 MiB (each closed once it reaches its cap), the old bucket freed first
(reducer.cpp: rebuild_buckets, compute_bucket_assignment_by_size, initialize_buckets). The fake process group cannot
run the rebuild (it broadcasts the new order in a tensor it reads), so the traced reducer keeps its first bucket. This
module puts the rebuild into every traced trial where it happens on a GPU, before the second step: the first bucket
freed, the rebuilt ones allocated and kept, for the allocator model to place among the blocks the first step left.
The ready order is taken as the parameters' order reversed (the order DDP itself assumes before it has seen one).
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
        """`trial` (a STEP_MARK before each step) with the rebuild before its second step: the first buckets freed,
        the rebuilt ones allocated (alive to the trial's end, as on the GPU). Unchanged without a second step or
        without adopted buckets."""
        marks = [i for i, e in enumerate(trial) if e[0] == MARK and e[1] == step_mark]
        if len(marks) < 2 or len(self.ids) != len(self.initial):
            return trial
        at = marks[1]
        rebuild: list[tuple] = [(FREE, i) for i in self.ids]
        rebuild += [(ALLOC, -(_ID_BASE + k), nbytes, "DDP bucket (rebuilt)") for k, nbytes in enumerate(self.rebuilt)]
        return trial[:at] + rebuild + trial[at:]
