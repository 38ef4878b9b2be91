"""The CUDA caching allocator's arithmetic, without a GPU: rounding rules and a replay simulator.

No torch here. `memprobe predict` records every storage allocation and free of a training step on
fake tensors; this module replays that trace the way PyTorch's native caching allocator
(c10/cuda/CUDACachingAllocator.cpp, default settings: no expandable segments, no max_split_size,
no roundup_power2_divisions, one stream) would serve it, and reports what
torch.cuda.max_memory_allocated / max_memory_reserved would have said, or the out-of-memory error a
card of a given capacity would have raised.

Rules taken from CUDACachingAllocator.cpp (pytorch/pytorch main, 2025; unchanged in torch 2.x):
- round_size: every request is rounded up to a multiple of kMinBlockSize = 512 bytes.
- get_pool: requests <= kSmallSize (1 MiB) go to the small pool, larger ones to the large pool.
- get_allocation_size: a new segment (cudaMalloc) is kSmallBuffer = 2 MiB for a small request,
  kLargeBuffer = 20 MiB for a request < kMinLargeAlloc (10 MiB), else the request rounded up to
  kRoundLarge = 2 MiB.
- get_free_block: best fit, the smallest cached free block of the pool that is large enough
  (ties: lowest address; BlockComparatorSize orders by stream, size, address).
- Addresses come from the CUDA driver, not from PyTorch, and decide those ties. On the H100
  (driver 580, CUDA 13) each new segment lands below the earlier ones (131 of the 178 segments of a
  transformer-big trial; the others were small segments filling gaps between big ones), so a tie
  goes to the newest segment. The model numbers its segments downward for that reason: numbered
  upward, transformer-big fp16 at 679 pairs placed the same trace differently from the first tie on,
  ran out of memory at 78.57 GiB, and predicted 636 for a real 679 (benchmarks/allocator_trace.py).
- should_split: a small-pool block is split when the remainder is >= 512 bytes, a large-pool block
  only when the remainder is > kSmallSize (1 MiB); otherwise the whole block is handed out and
  counts as allocated (stats.allocated_bytes grows by block->size, not by the request).
- free_block: a freed block merges with free neighbours of the same segment.
- malloc: when no cached block fits and cudaMalloc fails, release_cached_blocks() frees every cached
  segment that is entirely free (both pools) and retries once; then OutOfMemoryError.
  (release_available_cached_blocks does nothing while max_split_size is unset.)
- empty_cache / release_cached_blocks: segments that are entirely free are returned to the driver.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterable

# tests/test_torch_facts.py compares these with the installed torch's c10/core/AllocatorConfig.h, except
# kLargeBuffer, which only CUDACachingAllocator.cpp defines (not shipped in the wheel).
K_MIN_BLOCK_SIZE = 512  # kMinBlockSize: all sizes are rounded to at least 512 bytes
K_SMALL_SIZE = 1 << 20  # kSmallSize: largest "small" allocation is 1 MiB
K_SMALL_BUFFER = 2 << 20  # kSmallBuffer: "small" allocations are packed in 2 MiB segments
K_LARGE_BUFFER = 20 << 20  # kLargeBuffer: "large" allocations may be packed in 20 MiB segments
K_MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: allocations between 1 and 10 MiB may use kLargeBuffer
K_ROUND_LARGE = 2 << 20  # kRoundLarge: round up large segments to 2 MiB


def round_size(nbytes: int) -> int:
    """The block size the allocator reserves for a request of `nbytes` (round_size).

    Raises ValueError for a negative size.
    """
    if nbytes < 0:
        raise ValueError(f"negative allocation size {nbytes}")
    if nbytes < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    return K_MIN_BLOCK_SIZE * ((nbytes + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE)


def is_small(size: int) -> bool:
    """Whether a rounded request is served from the small pool (get_pool)."""
    return size <= K_SMALL_SIZE


def segment_size(size: int) -> int:
    """The cudaMalloc size of a new segment for a rounded request that no cached block fits (get_allocation_size)."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


def should_split(block_size: int, size: int, small: bool) -> bool:
    """Whether a free block of `block_size` serving a rounded request of `size` is split (should_split)."""
    remaining = block_size - size
    if small:
        return remaining >= K_MIN_BLOCK_SIZE
    return remaining > K_SMALL_SIZE


class SimulatedOutOfMemory(Exception):
    """The simulated card ran out of memory: the request and the allocator state when it failed."""

    def __init__(self, requested: int, segment: int, allocated: int, reserved: int, capacity: int) -> None:
        self.requested = requested
        self.segment = segment
        self.allocated = allocated
        self.reserved = reserved
        self.capacity = capacity
        super().__init__(
            f"simulated CUDA out of memory: tried to allocate {requested} bytes (a {segment}-byte segment) with "
            f"{allocated} allocated and {reserved} reserved of {capacity}"
        )


class _Block:
    """A block of a segment: free or handed out, linked to its neighbours in the segment. Slots: a replay makes
    and reads hundreds of thousands of them."""

    __slots__ = ("addr", "size", "small", "allocated", "prev", "next")

    def __init__(
        self, addr: int, size: int, small: bool, prev: "_Block | None" = None, next: "_Block | None" = None
    ) -> None:
        self.addr = addr
        self.size = size
        self.small = small
        self.allocated = False
        self.prev = prev
        self.next = next

    def key(self) -> tuple[int, int]:
        return (self.size, self.addr)

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None


@dataclass
class AllocatorStats:
    """What torch.cuda.memory_stats would report: current and peak allocated and reserved bytes."""

    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    segments: int = 0
    retries: int = 0  # mallocs that freed cached segments and retried (num_alloc_retries)


class CachingAllocator:
    """A replay model of one device's caching allocator (default configuration, one stream).

    `capacity` is what cudaMalloc may hand out in total (the card's memory minus what the CUDA
    context, the driver and other processes hold); None means unlimited. `malloc` returns a handle
    for `free`; zero-byte requests get handle 0 and hold nothing, as in PyTorch.
    """

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        self.stats = AllocatorStats()
        self._free: dict[bool, list[tuple[int, int]]] = {True: [], False: []}  # small -> sorted (size, addr)
        self._by_addr: dict[int, _Block] = {}  # free blocks by address
        self._live: dict[int, _Block] = {}  # handle -> allocated block
        self._next_handle = 1
        self._next_addr = 1 << 60  # the next segment ends below this address (see the module docstring)

    # -- public -------------------------------------------------------------------------------
    # malloc and free are a replay's inner loop: round_size, is_small and should_split (above), the best fit and
    # the free lists are written out inline rather than called, with the same arithmetic (tests/test_allocator.py
    # checks both).
    def malloc(self, nbytes: int) -> int:
        """Allocate `nbytes`; return a handle. Raises SimulatedOutOfMemory when the capacity is exhausted."""
        if nbytes == 0:
            return 0
        if nbytes < K_MIN_BLOCK_SIZE:
            size = round_size(nbytes)  # raises for a negative size
        else:
            size = K_MIN_BLOCK_SIZE * ((nbytes + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE)
        small = size <= K_SMALL_SIZE  # get_pool
        pool = self._free[small]
        stats = self.stats
        i = bisect.bisect_left(pool, (size, -1))
        if i < len(pool):  # best fit: the smallest free block that is large enough (ties: lowest address)
            block = self._by_addr.pop(pool.pop(i)[1])
        else:
            seg = segment_size(size)
            if self.capacity is not None and stats.reserved + seg > self.capacity:
                # cudaMalloc failed: free all cached whole segments and retry once.
                stats.retries += 1
                self.empty_cache()
                if stats.reserved + seg > self.capacity:
                    raise SimulatedOutOfMemory(nbytes, seg, stats.allocated, stats.reserved, self.capacity)
            self._next_addr -= seg + K_ROUND_LARGE
            block = _Block(self._next_addr, seg, small)
            stats.reserved += seg
            stats.segments += 1
            if stats.reserved > stats.peak_reserved:
                stats.peak_reserved = stats.reserved
        remaining = block.size - size
        # should_split: a small block when the rest is >= 512 bytes, a large one when the rest is over 1 MiB
        if remaining >= K_MIN_BLOCK_SIZE if small else remaining > K_SMALL_SIZE:
            after = block.next
            rest = _Block(block.addr + size, remaining, small, block, after)
            if after is not None:
                after.prev = rest
            block.next = rest
            block.size = size
            bisect.insort(pool, (remaining, rest.addr))
            self._by_addr[rest.addr] = rest
        block.allocated = True
        handle = self._next_handle
        self._next_handle = handle + 1
        self._live[handle] = block
        stats.allocated += block.size
        if stats.allocated > stats.peak_allocated:
            stats.peak_allocated = stats.allocated
        return handle

    def free(self, handle: int) -> None:
        """Return a block to the cache, merging it with free neighbours. Raises KeyError for an unknown handle."""
        if handle == 0:
            return
        block = self._live.pop(handle)
        block.allocated = False
        self.stats.allocated -= block.size
        before = block.prev
        if before is not None and not before.allocated:
            self._remove(before)
            block.addr = before.addr
            block.size += before.size
            block.prev = before.prev
            if before.prev is not None:
                before.prev.next = block
        after = block.next
        if after is not None and not after.allocated:
            self._remove(after)
            block.next = after.next
            if after.next is not None:
                after.next.prev = block
            block.size += after.size
        bisect.insort(self._free[block.small], (block.size, block.addr))
        self._by_addr[block.addr] = block

    def empty_cache(self) -> int:
        """Release every cached segment that is entirely free (release_cached_blocks); return the bytes released."""
        released = 0
        for small in (False, True):
            for size, addr in list(self._free[small]):
                block = self._by_addr[addr]
                if not block.is_split():
                    self._remove(block)
                    released += size
                    self.stats.reserved -= size
                    self.stats.segments -= 1
        return released

    def reset_peak(self) -> None:
        """Peaks restart from the current values (torch.cuda.reset_peak_memory_stats)."""
        self.stats.peak_allocated = self.stats.allocated
        self.stats.peak_reserved = self.stats.reserved

    def state(self) -> tuple:
        """What decides how the next requests are served: the segments reserved and every free block (size and
        address, both pools). Two equal states serve an equal sequence of requests the same way."""
        return (self.stats.segments, self.stats.reserved, tuple(self._free[True]), tuple(self._free[False]))

    # -- free-block index ---------------------------------------------------------------------
    def _remove(self, block: _Block) -> None:
        pool = self._free[block.small]
        i = bisect.bisect_left(pool, block.key())
        if i == len(pool) or pool[i] != block.key():
            raise AssertionError("free block missing from its pool")
        pool.pop(i)
        del self._by_addr[block.addr]


# --- traces -----------------------------------------------------------------------------------

ALLOC = "alloc"
FREE = "free"
MARK = "mark"  # a named point in the trace (e.g. "trial start"): resets peaks when replayed


@dataclass
class ReplayResult:
    """Peaks of a replayed trace, per phase between marks, and where the overall peak was reached."""

    peak_allocated: int
    peak_reserved: int
    oom: SimulatedOutOfMemory | None = None
    oom_at: int | None = None  # index of the event that failed
    stats: AllocatorStats = field(default_factory=AllocatorStats)
    limit: str = ""  # a kernel limit the run meets whatever the memory (batch_model.kernel_limit), not replayed

    @property
    def fits(self) -> bool:
        return self.oom is None and not self.limit


def replay(
    events: Iterable[tuple],
    capacity: int | None = None,
    measure_from: str | None = None,
    repeat: tuple[int, int, int] | list[tuple[int, int, int]] | None = None,
) -> ReplayResult:
    """Replay (ALLOC, id, nbytes) / (FREE, id) / (MARK, name) events through a CachingAllocator.

    Peaks count from the MARK named `measure_from` (where the real trial called
    reset_peak_memory_stats, after empty_cache), or from the start. Stops at the first simulated
    out-of-memory and reports it instead of raising. Raises KeyError for a FREE of an unknown id.

    `repeat` = (start, end, times): once events[end - 1] has been replayed, replay events[start:end] (one step
    that frees everything it allocates) up to `times` more times before going on with events[end:], as a run
    that trains on. A step leaves the allocator as it found it once the cache has settled; the repetitions stop
    at the first one that ends with the same segments and free blocks as the one before it (every later one
    would run the same way), so a long run costs a few replayed steps. A list of such spans (in order, none inside
    another) repeats each where it ends: a generation's last decode forward, within each generation.
    """
    if not isinstance(events, list):
        events = list(events)
    alloc = CachingAllocator(capacity)
    malloc, free = alloc.malloc, alloc.free
    handles: dict[object, int] = {}

    def run(lo: int, hi: int) -> ReplayResult | None:
        for index in range(lo, hi):
            event = events[index]
            kind = event[0]
            if kind == ALLOC:
                try:
                    handles[event[1]] = malloc(event[2])
                except SimulatedOutOfMemory as exc:
                    return ReplayResult(alloc.stats.peak_allocated, alloc.stats.peak_reserved, exc, index, alloc.stats)
            elif kind == FREE:
                free(handles.pop(event[1]))
            elif kind == MARK and event[1] == measure_from:
                alloc.empty_cache()
                alloc.reset_peak()
        return None

    spans = [] if repeat is None else [repeat] if isinstance(repeat, tuple) else list(repeat)
    done, failed = 0, None
    for start, end, times in spans:
        failed = run(done, end)
        if failed is not None:
            break
        done, state = end, alloc.state()
        for _ in range(times):
            failed = run(start, end)
            if failed is not None:
                break
            now = alloc.state()
            if now == state:
                break
            state = now
        if failed is not None:
            break
    if failed is None:
        failed = run(done, len(events))
    if failed is not None:
        return failed
    return ReplayResult(alloc.stats.peak_allocated, alloc.stats.peak_reserved, None, None, alloc.stats)
