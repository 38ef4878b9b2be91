"""memprobe: find the exact largest batch that trains on a GPU, and how fast it trains there."""

__version__ = "0.1.0"
