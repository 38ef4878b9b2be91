"""A fake allocator for the CPU: counts live tensor bytes and raises OOM above a budget.

The CPU has no caching allocator with peak statistics, so tests (and `scan --device cpu`) track
every tensor storage that aten creates, free it when its storage dies, and raise
torch.OutOfMemoryError once the live total passes the budget. That makes the trial runner's OOM
path and the search run on a machine with no GPU exactly as they would on one.
"""

from __future__ import annotations

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# Whether a storage's weak reference is dead. StorageWeakRef.expired() reaches this built-in through two Python
# calls; the sweep after every op asks it of every live storage (7.5 million times in one fp16 trial of
# toy-pix2pixhd, 12.3 s of which became 6.6 s this way), so it calls the built-in on the key (the ref's cdata).
_expired = torch.UntypedStorage._expired


class LiveBytes(TorchDispatchMode):
    """Dispatch mode that tracks live storage bytes; `peak` is the high-water mark since reset."""

    def __init__(self, budget_bytes: int | None = None) -> None:
        super().__init__()
        self.budget = budget_bytes
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.current = 0
        self.peak = 0

    def _sweep(self) -> None:
        dead = list(filter(_expired, self._live))  # the loop in C: no bytecode per storage
        for key in dead:
            self.current -= self._live.pop(key)[1]

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        ref = StorageWeakRef(storage)
        known = self._live.get(ref.cdata)
        if known is not None and not _expired(ref.cdata):
            return
        if known is not None:
            self.current -= known[1]
        self._live[ref.cdata] = (ref, storage.nbytes())
        self.current += storage.nbytes()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self._sweep()
        for item in tree_flatten(out)[0]:
            if isinstance(item, torch.Tensor) and item.device.type == "cpu":
                self._track(item)
        self.peak = max(self.peak, self.current)
        if self.budget is not None and self.current > self.budget:
            raise torch.OutOfMemoryError(
                f"CPU budget exceeded (memprobe fake allocator): {self.current} live bytes > {self.budget}"
            )
        return out

    def reset_peak(self) -> None:
        self._sweep()
        self.peak = self.current
