"""The core: records and rules shared by every layer (attempts, outcomes, the memory model, overhead, result
records, units, the registry and the GPU catalog). Imports no torch and nothing above it."""
