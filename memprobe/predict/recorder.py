"""Record every storage a fake-tensor training step allocates and frees, in order, as CUDA would."""

from __future__ import annotations

import weakref
from functools import partial
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten

from memprobe.predict.allocator import ALLOC, FREE, MARK
from memprobe.predict.fake_mode import FakeCudaMode
from memprobe.predict.fakecuda import CUBLAS_OPS, INT32_COUNT_OPS, Target
from memprobe.predict.workspaces import kernel_workspaces


class Recorder(FakeCudaMode):
    """Records storage allocations and frees of CPU-device fake tensors (standing in for CUDA memory).

    A storage is allocated when it first appears in an op's output and freed when the last tensor
    seen holding it dies. A tensor made without an op (Parameter(t), .data) can keep a storage alive
    unseen; such storages wait in `_lingering` until they really die (StorageWeakRef), so nothing is
    freed early.
    """

    def __init__(self, target: Target) -> None:
        super().__init__()
        self.target = target
        self.events: list[tuple] = []
        self._live: dict[int, list] = {}  # storage cdata -> [alloc id, nbytes, tensors seen, StorageWeakRef]
        self._objs: dict[int, weakref.ref] = {}  # id(tensor) -> weakref with the death callback
        self._lingering: dict[int, list] = {}
        self._pending: list[int] = []
        self._next_id = 0
        self._ops = 0
        self.cublas_allocated = False
        self.recording = True
        # op -> the most output elements one call of it made (INT32_COUNT_OPS), since the trial began
        self.int32_counts: dict[str, int] = {}

    # events
    def _alloc(self, nbytes: int, label: Any = "") -> int:
        self._next_id += 1
        self.events.append((ALLOC, self._next_id, nbytes, label))
        return self._next_id

    def _free(self, alloc_id: int) -> None:
        self.events.append((FREE, alloc_id))

    def mark(self, name: str) -> int:
        """Add a named point to the trace; return its index."""
        self.sweep()
        self.events.append((MARK, name))
        return len(self.events) - 1

    def boundary(self, name: str) -> None:
        """Add a named point without moving any event: the deaths since the last op are settled here, as the
        next op would settle them first thing; storages that linger wait for their usual sweep."""
        self._settle()
        self.events.append((MARK, name))

    # storage lifetimes
    def track(self, t: torch.Tensor, label: Any = "") -> None:
        if is_traceable_wrapper_subclass(t):
            return  # a wrapper (FSDP2's DTensor parameters) holds no memory; its inner tensors are tracked
        device = getattr(t, "fake_device", None) or t.device  # fake_device: no dispatch to ask
        if device.type != "cpu":
            return  # meta tensors (models built on the meta device) hold no memory
        known = self._objs.get(id(t))
        if known is not None and known() is t:
            return
        storage = t.untyped_storage()
        key = storage._cdata
        entry = self._live.get(key)
        if entry is not None and entry[3].expired():  # an old storage at a reused address
            self._release(key)
            entry = None
        if entry is None:
            entry = self._lingering.pop(key, None)
        if entry is None:
            entry = [self._alloc(storage.nbytes(), label), storage.nbytes(), 0, StorageWeakRef(storage)]
        self._live[key] = entry
        entry[2] += 1
        self._objs[id(t)] = weakref.ref(t, partial(self._dead, key, id(t)))

    def before_swap(self, t1: torch.Tensor, t2: torch.Tensor) -> None:
        for t in (t1, t2):
            ref = self._objs.get(id(t))
            if ref is None or ref() is not t:
                continue
            del self._objs[id(t)]  # the weakref dies with its last reference: no callback
            key = t.untyped_storage()._cdata
            entry = self._live.get(key)
            if entry is not None:
                entry[2] -= 1
                if entry[2] <= 0:
                    self._lingering[key] = self._live.pop(key)
            del ref

    def after_swap(self, t1: torch.Tensor, t2: torch.Tensor) -> None:
        if self.recording:
            self.track(t1)
            self.track(t2)

    def _dead(self, key: int, obj_id: int, ref: weakref.ref) -> None:
        # Runs while the tensor is being destroyed, before it lets go of its storage: whether the
        # storage dies with it is checked at the next op (_settle).
        if self._objs.get(obj_id) is ref:
            del self._objs[obj_id]
        entry = self._live.get(key)
        if entry is None:
            return
        entry[2] -= 1
        if entry[2] <= 0:
            self._pending.append(key)

    def _settle(self) -> None:
        """Free the storages whose last seen tensor died since the last op, if nothing else holds them."""
        pending, self._pending = self._pending, []
        for key in pending:
            entry = self._live.get(key)
            if entry is None or entry[2] > 0:
                continue  # seen again in the meantime
            if entry[3].expired():
                self._release(key)
            else:
                self._lingering[key] = self._live.pop(key)

    def _release(self, key: int) -> None:
        entry = self._live.pop(key)
        self._free(entry[0])

    def sweep(self) -> None:
        """Settle recent deaths and free lingering storages that have died since."""
        self._settle()
        for key in [k for k, e in self._lingering.items() if e[3].expired()]:
            self._free(self._lingering.pop(key)[0])

    def observe(self, func, args, kwargs, out) -> None:
        if not self.recording:
            return
        self._ops += 1
        if self._pending:
            self._settle()
        if self._lingering and self._ops % 64 == 0:
            self.sweep()
        if isinstance(out, torch.Tensor):
            self.track(out, func)
        elif isinstance(out, (tuple, list)):
            for item in tree_flatten(out)[0]:
                if isinstance(item, torch.Tensor):
                    self.track(item, func)
        if func in INT32_COUNT_OPS and isinstance(out, torch.Tensor):
            name = INT32_COUNT_OPS[func]
            self.int32_counts[name] = max(self.int32_counts.get(name, 0), out.numel())
        if func in CUBLAS_OPS and not self.cublas_allocated:
            # The cuBLAS workspace comes from the caching allocator at the first GEMM and stays.
            self.cublas_allocated = True
            self._alloc(self.target.cublas_workspace_bytes, "cuBLAS workspace")
        temps = [self._alloc(w.nbytes, w) for w in kernel_workspaces(func, args, out) if w.nbytes > 0]
        for alloc_id in temps:
            self._free(alloc_id)
