"""Wrap a built training task for data parallelism: DDP, or FSDP2 `fully_shard` per block."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from memprobe.core.workload.strategies import NONE, STRATEGIES, StrategyError

_MP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class Wrapped:
    """A model wrapped for a strategy: the module to train, what was done (`describe`, recorded in the result's
    settings as `wrap`), and the fp16 loss scaler the wrapped model needs (None: the default), for
    TrainTask.scaler_class."""

    module: nn.Module
    describe: dict[str, Any]
    scaler_class: type | None = None


def shard_blocks(model: nn.Module) -> list[nn.Module]:
    """The blocks FSDP shards one by one: the children of the outermost ModuleList or Sequential
    containers that hold parameters (a transformer's layers, a ResNet stage's bottlenecks).

    Walks top-down and stops at the first container whose parameterised children are blocks (modules
    with submodules of their own, or at least two leaf layers), so a block's inner Sequentials are not
    sharded again. A model with no such container (NASNet keeps its cells as plain attributes) shards
    the root's parameterised children. The root takes what is left (embeddings, heads, stems).
    """
    blocks: list[nn.Module] = []

    def holders(module: nn.Module) -> list[nn.Module]:
        return [c for c in module.children() if any(True for _ in c.parameters())]

    def visit(module: nn.Module) -> None:
        if isinstance(module, (nn.ModuleList, nn.Sequential)):
            found = holders(module)
            if len(found) >= 2 or any(any(True for _ in c.children()) for c in found):
                blocks.extend(found)
                return
        for child in module.children():
            visit(child)

    visit(model)
    if not blocks:
        found = holders(model)
        if len(found) >= 2:
            blocks = found
    return blocks


def wrap_model(model: nn.Module, strategy: str, precision: str, device: torch.device, mesh: Any = None) -> Wrapped:
    """Wrap `model` for `strategy`.

    ddp: DistributedDataParallel with its defaults (25 MiB gradient buckets). fsdp: FSDP2
    `fully_shard` on each block (shard_blocks) and on the root, with a MixedPrecisionPolicy that
    gathers parameters in the autocast dtype for fp16/bf16 (float32 where the model has BatchNorm;
    gradients reduced in float32), none for fp32/tf32; channels_last parameters are made contiguous;
    for fp16, a loss scaler that agrees across ranks. `mesh`: the device mesh to shard over (default:
    one dimension over the process group's ranks). Raises StrategyError for an unknown strategy or
    a model without blocks (fsdp).
    """
    if strategy == NONE:
        return Wrapped(model, {"strategy": NONE})
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        wrapped = DistributedDataParallel(model, device_ids=ids)
        return Wrapped(wrapped, {"strategy": "ddp", "bucket_cap_mb": 25, "gradient_as_bucket_view": False})
    if strategy == "fsdp":
        return _wrap_fsdp(model, precision, device, mesh)
    raise StrategyError(f"unknown strategy '{strategy}'; choose from {', '.join(STRATEGIES)}")


def _wrap_fsdp(model: nn.Module, precision: str, device: torch.device, mesh: Any) -> Wrapped:
    """wrap_model's fsdp: FSDP2 on each block and the root, under the precision's MixedPrecisionPolicy. Raises
    StrategyError for a model without blocks."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    blocks = shard_blocks(model)
    if not blocks:
        raise StrategyError(f"fsdp: found no blocks to shard in {type(model).__name__}")
    if mesh is None:
        mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    # FSDP2 shards only contiguous parameters: channels_last weights (the timm CNNs on CUDA) go back
    # to the default layout; the inputs stay channels_last, so convolutions still run in it.
    relaid = 0
    for param in model.parameters():
        if not param.is_contiguous():
            param.data = param.data.contiguous()
            relaid += 1
    dtype = _MP_DTYPES.get(precision)
    batch_norm = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    if batch_norm:
        # BatchNorm's float32 running statistics need float32 weights (bf16 weights fail on the CPU,
        # and FSDP1 exempts BatchNorm for the same reason): gather in float32 and let autocast cast
        # per op, as on one GPU.
        dtype = None
    block_types = sorted({type(b).__name__ for b in blocks})  # before fully_shard renames the classes
    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32) if dtype else MixedPrecisionPolicy()
    scaler_class = None
    if precision == "fp16":
        # Each rank sees only its shard of the gradients: the scaler must all_reduce its inf check,
        # or ranks would skip different steps and run different numbers of collectives.
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        scaler_class = ShardedGradScaler
    for block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return Wrapped(
        model,
        {
            "strategy": "fsdp",
            "api": "torch.distributed.fsdp.fully_shard (FSDP2)",
            "blocks": len(blocks),
            "block_type": block_types,
            "reshard_after_forward": True,
            "param_dtype": str(dtype).replace("torch.", "") if dtype else "float32",
            "reduce_dtype": "float32",
            "param_dtype_note": "float32: the model has BatchNorm" if batch_norm and precision in _MP_DTYPES else None,
            "parameters_made_contiguous": relaid,
            "loss_scaler": "ShardedGradScaler" if precision == "fp16" else None,
        },
        scaler_class,
    )
