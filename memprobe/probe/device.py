"""Facts about the machine: GPUs through NVML (no torch needed).

`gpus()` and `other_processes()` use nvidia-ml-py only, so the parent process (CLI, scan
orchestration) never initialises CUDA: a CUDA context in the parent would take memory from the
trial process it is measuring. torch's view of the device is the trial process's (probe/child/environment.py).
"""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any, Mapping

from memprobe import __version__
from memprobe.core.text.textlists import visible_devices


class NoGPUError(RuntimeError):
    """No usable CUDA device: no NVIDIA driver, no GPU, or a torch build without CUDA."""


@dataclass
class GPUProcess:
    pid: int
    used_bytes: int | None
    name: str = ""


@dataclass
class GPUInfo:
    index: int
    name: str
    uuid: str
    total_bytes: int
    free_bytes: int
    used_bytes: int
    processes: list[GPUProcess] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_driver() -> dict[str, Any]:
    """Driver version and the CUDA version the driver supports. Raises NoGPUError without NVML."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NoGPUError(f"no NVIDIA GPU driver found (NVML: {exc})") from exc
    cuda = pynvml.nvmlSystemGetCudaDriverVersion()
    return {
        "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
        "cuda_driver": f"{cuda // 1000}.{(cuda % 1000) // 10}",
    }


def gpus() -> list[GPUInfo]:
    """Every GPU NVML sees, with memory and the processes holding memory on it.

    Raises NoGPUError when there is no driver or no GPU.
    """
    import pynvml

    nvml_driver()
    count = pynvml.nvmlDeviceGetCount()
    if count == 0:
        raise NoGPUError("the NVIDIA driver reports no GPU")
    found = []
    for index in range(count):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
        found.append(
            GPUInfo(
                index,
                _text(pynvml.nvmlDeviceGetName(handle)),
                _text(pynvml.nvmlDeviceGetUUID(handle)),
                int(mem.total),
                int(mem.free),
                int(mem.used),
                _processes(handle),
            )
        )
    return found


def _processes(handle) -> list[GPUProcess]:
    import pynvml

    procs: dict[int, GPUProcess] = {}
    for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        try:
            running = getattr(pynvml, getter)(handle)
        except (pynvml.NVMLError, AttributeError):
            continue
        for p in running:
            used = getattr(p, "usedGpuMemory", None)
            name = ""
            try:
                name = _text(pynvml.nvmlSystemGetProcessName(p.pid))
            except pynvml.NVMLError:
                pass
            procs[p.pid] = GPUProcess(int(p.pid), int(used) if used is not None else None, name)
    return list(procs.values())


def visible_gpu(env: Mapping[str, str] | None = None) -> GPUInfo:
    """The GPU a trial process will use: the first of CUDA_VISIBLE_DEVICES in `env` (default: this process's
    environment; a scan passes what its processes see), else index 0."""
    all_gpus = gpus()
    visible = visible_devices((os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES"))
    if visible:
        for g in all_gpus:
            if visible[0] in (str(g.index), g.uuid):
                return g
    return all_gpus[0]


def host_environment(seen: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What the parent can say without torch: host, Python, library versions, driver, and the variables the trial
    processes see (`seen`, default this process's environment)."""
    env_vars = os.environ if seen is None else seen

    def version(pkg: str) -> str | None:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    env: dict[str, Any] = {
        "memprobe": __version__,
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "versions": {pkg: version(pkg) for pkg in ("torch", "transformers", "timm", "nvidia-ml-py", "lightning")},
        "PYTORCH_CUDA_ALLOC_CONF": env_vars.get("PYTORCH_CUDA_ALLOC_CONF"),
        "CUDA_VISIBLE_DEVICES": env_vars.get("CUDA_VISIBLE_DEVICES"),
    }
    try:
        env.update(nvml_driver())
    except NoGPUError as exc:
        env["driver"] = None
        env["driver_error"] = str(exc)
    return env
