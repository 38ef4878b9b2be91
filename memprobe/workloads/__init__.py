"""Workload builders, one module per family (they need torch), and the names that resolve to them (custom.py, no
torch). A family module that imports timm or transformers first calls torchvision_guard.ensure_loadable(): an
installed torchvision that cannot load with this torch (the PyPI wheel on CPU torch) is replaced by a stand-in that
raises on use. Importing this package itself imports no torch, so resolving a model name stays cheap."""
