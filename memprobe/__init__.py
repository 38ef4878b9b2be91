"""memprobe: find the exact largest batch that trains on a GPU, and how fast it trains there."""

__version__ = "0.1.0"

# The Python API, imported on first use: `import memprobe` stays cheap and never imports torch.
_API = (
    "find_max_batch",
    "predict_max_batch",
    "plan",
    "breakdown",
    "UserCodeError",
    "NoGPUError",
    "CustomModelError",
    "RegistryError",
    "RequestError",
)
__all__ = list(_API)


def __getattr__(name: str):
    if name in _API:
        from memprobe import api

        return getattr(api, name)
    raise AttributeError(f"module 'memprobe' has no attribute '{name}'")
