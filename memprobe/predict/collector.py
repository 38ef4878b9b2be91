"""Python's cyclic garbage collector around work that makes many objects and no garbage to collect early.

A full collection walks every object the process holds. A prediction holds many: torch and the workload's
libraries, the model built on fake tensors, and the traces (tens of thousands of event tuples each). Work that
makes objects in bulk triggers such collections again and again while finding almost nothing to free: importing
the libraries (a quarter of the imports' time), the allocator replays (about a third of theirs: the replay
itself makes only a few cycles, its segments' linked blocks, freed once the replay is over). Tracing is left to
the collector's usual rhythm: when a tensor in a cycle dies can decide when its storage is freed in the trace.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def paused(keep: bool = False) -> Iterator[None]:
    """No automatic collection inside (gc.collect() still runs); the collector is switched back on after, if it
    was on. `keep`: then move everything the process holds to the permanent generation (gc.freeze), so later
    collections do not walk what was made inside (imported modules); gc.unfreeze() gives them back."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if keep:
            gc.freeze()
        if was_on:
            gc.enable()
