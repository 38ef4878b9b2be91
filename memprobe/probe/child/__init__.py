"""The child side of probe: what runs inside a trial process or a torchrun rank, and the only part of probe with torch."""
