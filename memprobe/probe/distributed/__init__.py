"""Several GPUs: per-GPU max batch under DDP and FSDP2, 1-to-N scaling, all on torch.distributed."""
