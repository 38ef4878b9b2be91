"""Trace a workload as rank 0 of N data-parallel GPUs (DDP or FSDP2) with a fake process group, no GPU.

The model is wrapped by the same code the GPU ranks run (probe/distributed/wrap.wrap_model), inside the fake
tensor session, in a process group of the `fake` backend: collectives return at once and move no data. So
the trace holds what that wrapper allocates on a rank: DDP's gradient buckets (a second copy of the
gradients, `gradient_as_bucket_view=False`), FSDP2's parameter, gradient and optimizer-state shards, the
parameters it gathers block by block and the full gradients it reduce-scatters. What the trace cannot hold
is memory NCCL takes outside PyTorch's caching allocator (its communicator buffers): that is measured on
the GPUs and taken off the usable memory (core/cards/overhead.py, group figures), not traced. DDP's bucket rebuild after
the first step, which the fake process group cannot run, is put into each trial's events (ddp_rebuild.py).
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.distributed as dist

from memprobe.predict.ddp_rebuild import BucketRebuild
from memprobe.predict.torch_internals import internal, require_internals
from memprobe.training.wrap import STRATEGIES, StrategyError, wrap_model

_DDP_MODULE = "torch.nn.parallel.distributed"
# DDP's constructor checks parameter shapes across ranks and broadcasts rank 0's weights; both read tensor
# data, which fake tensors do not have, and neither allocates on a rank beyond a transient copy.
_DDP_CONSTRUCTION_SYNCS = ("_verify_param_shape_across_processes", "_sync_module_states")


@dataclass(frozen=True)
class World:
    """N GPUs training data-parallel under one strategy; predictions are per GPU (rank 0)."""

    size: int
    strategy: str

    def __post_init__(self) -> None:
        if self.size < 2:
            raise ValueError(f"a data-parallel world has at least 2 GPUs, got {self.size}")
        if self.strategy not in STRATEGIES:
            raise StrategyError(f"unknown strategy '{self.strategy}'; choose from {', '.join(STRATEGIES)}")

    @property
    def label(self) -> str:
        return f"{self.size} GPUs, {self.strategy}"


FSDP_VIEW_WARNING = r"FSDP2-wrapped module .* returned a view tensor"


@contextmanager
def fake_world(world: World) -> Iterator[Any]:
    """This process as rank 0 of `world.size` in a fake process group; yields the 1-D device mesh FSDP
    shards over. Raises RuntimeError when a process group is already initialised here."""
    require_internals(("data_parallel",))
    fake_store = internal("torch.testing._internal.distributed.fake_pg.FakeStore")  # registers the `fake` backend
    init_device_mesh = internal("torch.distributed.device_mesh.init_device_mesh")
    if dist.is_initialized():
        raise RuntimeError("a torch.distributed process group is already initialised in this process")
    dist.init_process_group("fake", rank=0, world_size=world.size, store=fake_store())
    try:
        with warnings.catch_warnings():
            # FSDP2 warns on every traced step that a wrapped module returns a view (said once in notes()).
            warnings.filterwarnings("ignore", message=FSDP_VIEW_WARNING, category=UserWarning)
            # Made before the fake tensor modes are entered: the mesh finds this rank's coordinates in a
            # real tensor.
            yield init_device_mesh("cpu", (world.size,))
    finally:
        dist.destroy_process_group()


class _ReducerKeepingBuckets:
    """DDP's reducer with its bucket rebuild skipped (everything else is the real reducer).

    After the first backward DDP rebuilds its buckets in the order gradients became ready; the rebuild
    broadcasts the new order in a tensor it reads, which a fake tensor cannot give. The rebuilt buckets
    have the same total size, in another split into blocks, and the old one is held through the second step (on
    the GPUs): ddp_rebuild.py puts the rebuild into each traced trial's events instead.
    """

    def __init__(self, reducer: Any) -> None:
        self._reducer = reducer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reducer, name)

    def _rebuild_buckets(self) -> bool:
        return False


def _average_in_place(world_size, bucket):  # no annotations: DDP refuses a hook whose bucket is not typed GradBucket
    """DDP's default all-reduce hook without the collective: divides the bucket in place, as it does.
    (The fake process group's futures carry no tensor, which the reducer refuses.)"""
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(bucket.buffer().div_(world_size))
    return future


@contextmanager
def _ddp_without_construction_syncs() -> Iterator[None]:
    module = internal(_DDP_MODULE)
    saved = {name: internal(f"{_DDP_MODULE}.{name}") for name in _DDP_CONSTRUCTION_SYNCS}
    for name in saved:
        setattr(module, name, lambda *args, **kwargs: None)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def wrap_for_trace(task: Any, world: World, precision: str, mesh: Any) -> dict[str, Any]:
    """Wrap `task.model` (built in a fake session) as the GPU ranks do; returns wrap_model's description.

    Raises StrategyError when the strategy cannot wrap this model (fsdp without blocks).
    """
    device = torch.device("cpu")  # the fake session's tensors are CPU fakes standing for CUDA ones
    if world.strategy == "ddp":
        with _ddp_without_construction_syncs():
            wrapped = wrap_model(task.model, "ddp", precision, device)
        ddp: Any = wrapped.module  # a DistributedDataParallel, whose reducer is swapped below
        ddp.register_comm_hook(world.size, _average_in_place)
        ddp.reducer = _ReducerKeepingBuckets(ddp.reducer)
        task.trial_edit = BucketRebuild.of(ddp)  # the rebuild the reducer skips, put into each trial's events
    else:
        wrapped = wrap_model(task.model, world.strategy, precision, device, mesh=mesh)
    task.model = wrapped.module
    task.scaler_class = wrapped.scaler_class
    return wrapped.describe


def notes(world: World) -> list[str]:
    """What a data-parallel prediction counts and what it leaves out, for the printed notes."""
    out = [
        f"per GPU: rank 0 of {world.size} GPUs under {world.strategy}, wrapped by the scan's own code in a fake "
        "process group (collectives move no data). NCCL's own buffers, allocated outside PyTorch's caching "
        "allocator, are not in the trace: they are taken off the usable memory, as memprobe's multi-GPU scans "
        "measured them (memprobe/data/overhead.yaml)."
    ]
    if world.strategy == "ddp":
        out.append(
            "ddp: the gradient buckets are in the trace, with their rebuild before the second step (buckets of 1 "
            "and 25 MiB in reversed parameter order allocated; the first bucket, of every gradient, held to the "
            "second step's end, as the trials of fresh process groups on the GPUs showed)."
        )
    else:
        out.append(
            "fsdp: FSDP2 all-gathers and reduce-scatters on streams of their own; the caching allocator keeps "
            "each stream's blocks apart, the allocator model here has one pool, so fragmentation across "
            "streams is not predicted."
        )
        out.append(
            "fsdp: torch's warning that a wrapped module returned a view tensor (an in-place op on it would "
            "skip the all-gather and give wrong gradients) is not repeated for every traced step: it is about "
            "the model's outputs, not about the memory predicted here."
        )
    return out
