"""The training layer shared by probe and predict: the step and its mixed precision, the DDP/FSDP wrapper,
FLOP counting. Imports torch, the workloads and the core; nothing above it."""
