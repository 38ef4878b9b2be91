"""Workload builders, one module per family. Imported only inside the trial process (they need torch)."""

from memprobe.workloads.torchvision_guard import ensure_loadable

# Before any family module imports timm or transformers: an installed torchvision that cannot load with
# this torch (the PyPI wheel on CPU torch) is replaced by a stand-in that raises on use.
ensure_loadable()
