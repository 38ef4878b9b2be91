"""torch's view of the device, in the trial process: versions, device properties and the numeric flags in force."""

from __future__ import annotations

from typing import Any


def torch_environment(device, set_in_process: dict[str, Any] | None = None) -> dict[str, Any]:
    """torch's view: versions, device properties and the numeric flags that change memory or speed, with the
    settings the process made itself (`set_in_process`: attribute path under torch -> value read back) under
    flags.set_in_trial_process."""
    import torch

    env: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "device_type": device.type,
        "flags": {
            "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "cudnn_deterministic": torch.backends.cudnn.deterministic,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "set_in_trial_process": dict(set_in_process or {}),
        },
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env["gpu"] = {
            "name": props.name,
            "total_bytes": int(props.total_memory),
            "compute_capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
            "uuid": str(getattr(props, "uuid", "")),
        }
    else:
        env["gpu"] = {"name": "cpu", "total_bytes": None}
    return env
