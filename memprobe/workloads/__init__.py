"""Workload builders, one module per family. Imported only inside the trial process (they need torch)."""
