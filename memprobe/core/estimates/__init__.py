"""Arithmetic on measured figures: the linear memory model of trials, the knee of a throughput curve, the plan's micro-batch and accumulation, the concurrent sequences a card serves."""
