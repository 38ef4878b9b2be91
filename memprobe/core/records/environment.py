"""What a scan ran and where: a result's workload definition, and its environment (host, versions, GPU, ranks).

No torch. Sections (core/records/records.py): each named key an attribute (None when the file lacks it), the keys a file
holds written back as read, unknown ones kept in `extra`. The workload is registry.Workload.to_dict(); the
environment is probe/device.host_environment() merged with the trial process's torch_environment() (and, for
several GPUs, the launch's distributed facts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from memprobe.core.records.fieldtypes import Batch1, Bytes1, LabelKeys, Name, Range, Ranks, Strategy, Unit, Words
from memprobe.core.records.records import ABSENT, Section


class Params(TypedDict, total=False):
    """A workload's parameters (family-specific): those that reports read, and any other, each named by a label."""

    axis: Annotated[str, Words(("batch", "seq_len"))] | None
    batch: Batch1 | None
    seq_len: Batch1 | None
    lora: Annotated[int, Range(1, 1 << 16)] | None
    checkpointing: bool | None


@dataclass(kw_only=True)
class WorkloadRecord(Section):
    """The workload a scan ran, as registry.Workload.to_dict() stores it: enough to tell whether two results
    compare (name, family, version, params, optimizer)."""

    name: Name
    family: Name | None = ABSENT
    version: Annotated[int, Range(0, 1 << 16)] | None = ABSENT
    description: str | None = ABSENT
    unit: Unit | None = ABSENT
    params: Annotated[Params, LabelKeys()] | None = ABSENT
    optimizer: dict[str, Any] | None = ABSENT


@dataclass(kw_only=True)
class GpuInfo(Section):
    """The GPU a scan ran on: its name (an emulated card's label under --memory-cap, with the real one in
    `real_name`), memory and identity; `predicted` for a predicted frontier's card."""

    name: Name
    total_bytes: Bytes1 | None = ABSENT
    compute_capability: str | None = ABSENT
    multiprocessors: int | None = ABSENT
    uuid: str | None = ABSENT
    real_name: str | None = ABSENT
    emulated_total_bytes: Bytes1 | None = ABSENT
    predicted: bool | None = ABSENT

    @property
    def memory_bytes(self) -> int | None:
        """The card's memory: an emulated card's cap (scan --memory-cap), else the driver's total; None unrecorded."""
        return self.emulated_total_bytes or self.total_bytes


class Interconnect(TypedDict, total=False):
    """How the GPUs of a distributed scan are linked (probe/distributed/topology.py); reports show `summary`."""

    summary: Name | None


@dataclass(kw_only=True)
class DistributedInfo(Section):
    """A distributed scan's ranks: world size, strategy, launcher, NCCL and the interconnect."""

    world_size: Ranks | None = ABSENT
    strategy: Strategy | None = ABSENT
    backend: str | None = ABSENT
    launcher: str | None = ABSENT
    nccl_version: str | None = ABSENT
    nccl_env: dict[str, Any] | None = ABSENT
    interconnect: Interconnect | None = ABSENT


@dataclass(kw_only=True)
class Environment(Section):
    """Where a scan ran: host, Python and library versions, driver, the environment variables that change memory,
    torch's versions and flags, the GPU, an emulated cap, and for several GPUs the ranks."""

    memprobe: str | None = ABSENT
    hostname: str | None = ABSENT
    platform: str | None = ABSENT
    python: str | None = ABSENT
    cpu: str | None = ABSENT
    cpu_count: int | None = ABSENT
    versions: dict[str, Any] | None = ABSENT
    PYTORCH_CUDA_ALLOC_CONF: str | None = ABSENT
    CUDA_VISIBLE_DEVICES: str | None = ABSENT
    driver: str | None = ABSENT
    driver_error: str | None = ABSENT
    cuda_driver: str | None = ABSENT
    torch: str | None = ABSENT
    cuda_runtime: str | None = ABSENT
    cudnn: int | None = ABSENT
    device_type: str | None = ABSENT
    flags: dict[str, Any] | None = ABSENT
    gpu: GpuInfo | None = ABSENT
    nccl_version: str | None = ABSENT
    distributed: DistributedInfo | None = ABSENT
    emulation: dict[str, Any] | None = ABSENT
