"""How the GPUs of a multi-GPU run are connected (NVML, nvidia-smi topo), without torch."""

from __future__ import annotations

import subprocess
from typing import Any

from memprobe.core.process.child_env import child_env
from memprobe.core.text.textlists import visible_devices

# nvmlGpuTopologyLevel_t: the closest common ancestor of two GPUs on the PCIe tree.
_LEVELS = {
    0: "same board",
    10: "single PCIe switch",
    20: "multiple PCIe switches",
    30: "PCIe host bridge",
    40: "same NUMA node (PCIe + CPU)",
    50: "across CPU sockets (SMP interconnect)",
}


def interconnect(indices: list[int]) -> dict[str, Any]:
    """The link between each pair of the GPUs `indices` (NVML indices): NVLink peer-to-peer or not,
    the PCIe common ancestor, and each GPU's active NVLink count; plus `nvidia-smi topo -m` as text.
    Never raises: what cannot be read is reported under "error"."""
    facts: dict[str, Any] = {"gpus": indices}
    try:
        import pynvml

        pynvml.nvmlInit()
        handles = {i: pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices}
        facts["nvlinks_active"] = {str(i): _active_links(pynvml, h) for i, h in handles.items()}
        pairs = []
        for a in indices:
            for b in indices:
                if a >= b:
                    continue
                pair: dict[str, Any] = {"gpus": [a, b]}
                try:
                    level = pynvml.nvmlDeviceGetTopologyCommonAncestor(handles[a], handles[b])
                    pair["pcie_common_ancestor"] = _LEVELS.get(int(level), str(level))
                except pynvml.NVMLError as exc:
                    pair["pcie_common_ancestor"] = f"unknown ({exc})"
                try:
                    status = pynvml.nvmlDeviceGetP2PStatus(handles[a], handles[b], pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
                    pair["nvlink_p2p"] = status == pynvml.NVML_P2P_STATUS_OK
                except (pynvml.NVMLError, AttributeError) as exc:
                    pair["nvlink_p2p"] = f"unknown ({exc})"
                pairs.append(pair)
        facts["pairs"] = pairs
        facts["summary"] = summary(facts)
    except Exception as exc:  # noqa: BLE001 - a missing driver or library leaves the fact unknown
        facts["error"] = f"{type(exc).__name__}: {exc}"
    facts["nvidia_smi_topo"] = _smi_topo()
    return facts


def _active_links(pynvml, handle) -> int:
    count = 0
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            if pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED:
                count += 1
        except pynvml.NVMLError:
            break
    return count


def summary(facts: dict[str, Any]) -> str:
    """One phrase for reports: 'NVLink (18 links per GPU)', 'PCIe (single PCIe switch)' or 'unknown'."""
    pairs = facts.get("pairs") or []
    if not pairs:
        return "single GPU" if len(facts.get("gpus", [])) == 1 else "unknown"
    if all(p.get("nvlink_p2p") is True for p in pairs):
        links = sorted(set((facts.get("nvlinks_active") or {}).values()))
        return "NVLink" + (f" ({links[0]} links per GPU)" if len(links) == 1 and links[0] else "")
    return "PCIe (" + ", ".join(sorted({str(p.get("pcie_common_ancestor")) for p in pairs})) + ")"


def _smi_topo() -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20, env=child_env())
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def visible_indices(world_size: int, visible: str | None) -> list[int]:
    """NVML indices of the first `world_size` GPUs the ranks will use (CUDA_VISIBLE_DEVICES order when set
    as indices; UUIDs or unset: 0..N-1)."""
    items = visible_devices(visible)
    if items:
        if all(v.isdigit() for v in items):
            return [int(v) for v in items[:world_size]]
    return list(range(world_size))
