"""Measure where the memory goes in one training step, by category and by module, with PyTorch's MemTracker.

Instrument: torch.distributed._tools.mem_tracker.MemTracker (a TorchDispatchMode with module and optimizer
hooks) classifies every tensor storage as parameter, buffer, gradient, optimizer state, activation
(created in forward), temporary (created in backward) or external (the input batch), and keeps the
per-category snapshot at its own peak and per-module snapshots before and after each forward. It works
on CUDA, on the CPU and under FakeTensorMode, so the prediction (the fake-tensor trace) uses it too.
The allocator's own peaks (torch.cuda.max_memory_allocated/reserved, or the CPU fake allocator) give
the totals; core.breakdown.assemble turns the two into a record whose categories add up to them.

Autocast's low-precision weight copies are activations to the tracker (made in forward); they are
counted apart here: outputs of a dtype cast whose input is a parameter.
"""

from __future__ import annotations

import functools
import time
import warnings
import weakref
from typing import Any, Callable

import torch
from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType, _ModState

from memprobe.core.records.breakdown import Breakdown, assemble, top_modules
from memprobe.training.step import Memory, run_step, run_until_state
from memprobe.workloads.base import Amp, TrainTask

INSTRUMENT = "torch.distributed._tools.mem_tracker.MemTracker"
_CATEGORY = {
    _MemRefType.PARAM: "parameters",
    _MemRefType.BUFFER: "buffers",
    _MemRefType.GRAD: "gradients",
    _MemRefType.OPT: "optimizer_state",
    _MemRefType.ACT: "activations",
    _MemRefType.TEMP: "temporaries",
    _MemRefType.OTH: "inputs",
}
_CASTS = {torch.ops.aten._to_copy.default, torch.ops.aten.to.dtype, torch.ops.aten.to.dtype_layout}


class StepTracker(MemTracker):
    """MemTracker that also counts autocast's weight copies at the peak, and lets a root module (a GAN's
    discriminator) run more than once in a step, as a reused submodule may."""

    def __init__(self) -> None:
        super().__init__()
        self.copies_now = 0
        self.copies_at_peak = 0
        self._copies: set[int] = set()
        self._copy_refs: list[weakref.ref] = []
        self._casting = False
        self.copies_by_module: dict[str, int] = {}

    def _is_parameter(self, tensor: Any) -> bool:
        if not isinstance(tensor, torch.Tensor):
            return False
        info = self._WINFO.get(tensor.untyped_storage(), (None, None))[0]
        return info is not None and info.reftype == _MemRefType.PARAM

    def _count_copy(self, out: torch.Tensor) -> None:
        storage = out.untyped_storage()
        key = id(storage)
        if key in self._copies or storage.nbytes() == 0:
            return
        size = storage.nbytes()
        self._copies.add(key)
        self.copies_now += size

        def gone(_ref: Any) -> None:
            self._copies.discard(key)
            self.copies_now -= size

        self._copy_refs.append(weakref.ref(storage, gone))
        # The innermost module running made it: its activation count leaves the copy out.
        inner = max(self._mod_tracker.parents, key=lambda name: name.count("."), default="")
        self.copies_by_module[inner] = self.copies_by_module.get(inner, 0) + size

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in _CASTS and args and self._is_parameter(args[0]) and not self._mod_tracker.is_bw:
            self._casting = True
        res = super().__torch_dispatch__(func, types, args, kwargs)
        if self._casting:
            self._casting = False
            if isinstance(res, torch.Tensor):
                self._count_copy(res)
        return res

    def _update_peak_stats(self, peak_state: Any) -> None:
        before = dict(self._peak_mem)
        super()._update_peak_stats(peak_state)
        if self._peak_mem != before:
            self.copies_at_peak = self.copies_now

    def _pre_fw_hook(self, module: torch.nn.Module, inputs: Any) -> None:
        try:
            super()._pre_fw_hook(module, inputs)
        except NotImplementedError:
            # A root module called again within the step (GAN discriminators): record it like a reused
            # submodule (MemTracker refuses it to catch a second iteration; this tracker sees one step).
            stats = self.memory_tracking[module]
            snapshot = self.get_tracker_snapshot()
            stats.local_peak = {dev: snap["Total"] for dev, snap in snapshot.items()}
            stats.snapshots.setdefault(_ModState.PEAK_FW, []).append(snapshot)
            stats.snapshots.setdefault(_ModState.PRE_FW, []).append(self.get_tracker_snapshot())

    def state_bytes(self, optimizers: list[torch.optim.Optimizer], device: torch.device) -> int:
        """Bytes of the optimizers' state tensors on `device`, as the tracker counts them (its rounding)."""
        seen: dict[int, int] = {}
        for optimizer in optimizers:
            for state in optimizer.state.values():
                for value in state.values():
                    if isinstance(value, torch.Tensor) and value.device.type == device.type:
                        info = self._WINFO.get(value.untyped_storage(), (None, None))[0]
                        seen[id(value.untyped_storage())] = (
                            info.mem_consumed if info else value.untyped_storage().nbytes()
                        )
        return sum(seen.values())

    def categories_at_peak(self, device: torch.device, optimizers: list[torch.optim.Optimizer]) -> dict[str, int]:
        """Tracked bytes by breakdown category at the tracker's peak on `device`. Weight copies are taken out of
        activations; the tracker's "optimizer" bytes beyond the state tensors (which live through the step, so
        exist at the peak) are the optimizer step's temporaries (foreach intermediates)."""
        snapshot = next(
            (snap for dev, snap in self.get_tracker_snapshot("peak").items() if dev.type == device.type), {}
        )
        tracked = {name: int(snapshot.get(ref, 0)) for ref, name in _CATEGORY.items()}
        tracked["parameter_copies"] = self.copies_at_peak
        tracked["activations"] -= self.copies_at_peak
        state = min(self.state_bytes(optimizers, device), tracked["optimizer_state"])
        tracked["temporaries"] += tracked["optimizer_state"] - state
        tracked["optimizer_state"] = state
        return tracked

    def activations_by_module(self, device: torch.device) -> dict[str, int]:
        """Activation bytes each module's own forward added and still held at its end (its submodules' excluded),
        summed over its calls: the memory each module leaves for backward."""
        held: dict[str, int] = {}
        for stats in self.memory_tracking.values():
            pre, post = stats.snapshots.get(_ModState.PRE_FW, []), stats.snapshots.get(_ModState.POST_FW, [])

            def act(snap: dict) -> int:
                return int(next((s.get(_MemRefType.ACT, 0) for d, s in snap.items() if d.type == device.type), 0))

            held[stats.mod_fqn] = held.get(stats.mod_fqn, 0) + sum(act(b) - act(a) for a, b in zip(pre, post))
        own = {name: value - self.copies_by_module.get(name, 0) for name, value in held.items()}
        for name, value in held.items():
            parent = _nearest_ancestor(name, held)
            if parent is not None:
                own[parent] -= value
        return own

    def _track_module_params_and_buffers(
        self, module: torch.nn.Module, install_grad_hooks: bool = True
    ) -> tuple[int, int]:
        # MemTracker hooks every parameter, and register_hook raises for frozen ones (a GAN's VGG, a LoRA
        # base): hook only those that get gradients.
        sizes = super()._track_module_params_and_buffers(module, install_grad_hooks=False)
        if install_grad_hooks:
            for param in module.parameters():
                if param.requires_grad and self._param_to_grad_hook_handles.get(param, None) is None:
                    self._param_to_grad_hook_handles[param] = (
                        param.register_hook(self._grad_seen),
                        param.register_post_accumulate_grad_hook(lambda p: self._grad_seen(p.grad)),
                    )
        return sizes

    def _grad_seen(self, grad: torch.Tensor) -> None:
        self._update_and_maybe_create_winfos(grad, _MemRefType.GRAD)


def _nearest_ancestor(name: str, known: dict[str, int]) -> str | None:
    """The closest enclosing module name of `name` present in `known` (containers that never run are skipped)."""
    while "." in name:
        name = name.rsplit(".", 1)[0]
        if name in known:
            return name
    return None


def _reset_peak(memory: Memory) -> None:
    """Start the allocator's peak from now, keeping its cached blocks (the steady state of a run)."""
    if memory.device.type == "cuda":
        torch.cuda.synchronize(memory.device)
        torch.cuda.reset_peak_memory_stats(memory.device)
    elif memory.cpu is not None:
        memory.cpu.reset_peak()


def outside_pytorch_bytes(device: torch.device) -> int | None:
    """Device memory in use that PyTorch's allocator does not hold (CUDA context, driver, library handles):
    the device's used bytes (cudaMemGetInfo) minus reserved. None on the CPU. Other processes on the card
    count too, so a scan runs alone."""
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    return int(total - free - torch.cuda.memory_reserved(device))


def measure_breakdown(
    task: TrainTask,
    precision: str,
    batch: int,
    steps: int,
    memory: Memory,
    per_sample_bytes: int | None = None,
    loss_scale: float | None = None,
    note: str = "",
    before: Callable[[], Any] | None = None,
) -> Breakdown:
    """Run `steps` training steps at `batch` as a trial does (training/step.py), the last one under the tracker,
    and return the breakdown at that step's peak. The earlier steps create optimizer state and warm the
    allocator, so the tracked step is a steady-state one. `before` runs after the memory reset (the --memory-cap
    re-cap), as in a trial. Raises what the step raises (an OOM included):
    the caller runs this in its own process and classifies the failure.
    """
    started = time.perf_counter()
    memory.reset()
    if before is not None:
        before()
    task.start()
    amp = Amp.for_task(task, precision, loss_scale)
    inputs = task.make_batch(batch)
    step = functools.partial(run_step, task, amp, inputs, "train")
    try:
        run_until_state(step, amp, max(steps - 1, 2), "train")
        tracker = StepTracker()
        tracker.track_external(task.model, *task.optimizers, inputs)
        _reset_peak(memory)
        with tracker, warnings.catch_warnings():
            # MemTracker warns for each backward hook whose module was collected (a transient wrapper).
            warnings.filterwarnings("ignore", message="Module is None")
            step()
        memory.synchronize()
        peak_allocated, peak_reserved = memory.peaks()
        tracked = tracker.categories_at_peak(task.device, task.optimizers)
        modules = top_modules(tracker.activations_by_module(task.device))
        outside = outside_pytorch_bytes(task.device)
    finally:
        del step, inputs, amp  # the batch goes before the state is dropped
        task.stop()
    if peak_allocated is None or peak_reserved is None:
        raise RuntimeError("no peak memory statistics on this device (CPU without the fake allocator)")
    return assemble(
        batch,
        "measured",
        tracked,
        peak_allocated,
        peak_reserved,
        per_sample_bytes=per_sample_bytes,
        outside_pytorch=outside,
        top_modules=modules,
        instrument=INSTRUMENT,
        seconds=round(time.perf_counter() - started, 3),
        device=str(task.device),
        note=note,
    )
