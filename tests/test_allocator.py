"""The caching-allocator model (memprobe.predict.allocator) against hand-computed expectations.

Every expected number below follows from the rules quoted in allocator.py (CUDACachingAllocator.cpp):
512-byte rounding, 2 MiB small segments, 20 MiB segments for 1-10 MiB requests, 2 MiB rounding above,
best fit, splitting thresholds, merging on free, and release-and-retry before an out-of-memory error.
"""

from __future__ import annotations

import pytest

from memprobe.predict.allocator import (
    ALLOC,
    FREE,
    K_LARGE_BUFFER,
    K_SMALL_BUFFER,
    MARK,
    CachingAllocator,
    SimulatedOutOfMemory,
    is_small,
    replay,
    round_size,
    segment_size,
    should_split,
)

KiB, MiB = 1 << 10, 1 << 20


# --- rounding rules -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_bytes, rounded",
    [
        (0, 512),
        (1, 512),
        (511, 512),
        (512, 512),
        (513, 1024),
        (1000, 1024),
        (4 * MiB + 1, 4 * MiB + 512),
    ],
)
def test_requests_round_up_to_512_bytes(request_bytes, rounded):
    assert round_size(request_bytes) == rounded


def test_negative_request_is_an_error():
    with pytest.raises(ValueError):
        round_size(-1)


@pytest.mark.parametrize("size, small", [(512, True), (MiB, True), (MiB + 512, False)])
def test_pools_split_at_one_mib(size, small):
    assert is_small(size) is small


@pytest.mark.parametrize(
    "size, segment",
    [
        (512, 2 * MiB),  # small requests are packed into 2 MiB segments
        (MiB, 2 * MiB),  # 1 MiB is still small
        (MiB + 512, 20 * MiB),  # 1-10 MiB: a 20 MiB segment, split among several requests
        (10 * MiB - 512, 20 * MiB),
        (10 * MiB, 10 * MiB),  # from 10 MiB on: the request rounded up to 2 MiB
        (10 * MiB + 512, 12 * MiB),
        (4096 * MiB + 512, 4098 * MiB),
    ],
)
def test_segment_sizes(size, segment):
    assert segment_size(size) == segment


@pytest.mark.parametrize(
    "block, size, small, split",
    [
        (2 * MiB, 2 * MiB - 512, True, True),  # small pool: a 512-byte remainder is worth keeping
        (2 * MiB, 2 * MiB - 256, True, False),
        (20 * MiB, 19 * MiB, False, False),  # large pool: only remainders above 1 MiB are split off
        (20 * MiB, 19 * MiB - 512, False, True),
    ],
)
def test_split_thresholds(block, size, small, split):
    assert should_split(block, size, small) is split


# --- the simulator --------------------------------------------------------------------------------


def test_small_request_reserves_a_2_mib_segment_and_shares_it():
    a = CachingAllocator()
    a.malloc(600 * KiB)
    assert (a.stats.allocated, a.stats.reserved) == (600 * KiB, K_SMALL_BUFFER)
    a.malloc(600 * KiB)  # 2048 - 600 = 1448 KiB left in the segment: fits
    assert (a.stats.allocated, a.stats.reserved, a.stats.segments) == (1200 * KiB, K_SMALL_BUFFER, 1)
    a.malloc(900 * KiB)  # 848 KiB left: a second segment
    assert (a.stats.reserved, a.stats.segments) == (2 * K_SMALL_BUFFER, 2)


def test_mid_sized_requests_share_a_20_mib_segment():
    a = CachingAllocator()
    a.malloc(5 * MiB)
    a.malloc(5 * MiB)
    a.malloc(5 * MiB)
    assert (a.stats.allocated, a.stats.reserved, a.stats.segments) == (15 * MiB, K_LARGE_BUFFER, 1)


def test_an_unsplit_remainder_counts_as_allocated():
    a = CachingAllocator()
    a.malloc(19 * MiB + 512 * KiB)  # segment rounds to 20 MiB; the 0.5 MiB remainder is not split off
    assert (a.stats.allocated, a.stats.reserved) == (20 * MiB, 20 * MiB)


def test_freed_block_is_reused_and_split():
    a = CachingAllocator()
    h = a.malloc(12 * MiB)
    a.free(h)
    assert (a.stats.allocated, a.stats.reserved) == (0, 12 * MiB)
    a.malloc(8 * MiB)  # the cached 12 MiB block serves it; 4 MiB is split off
    assert (a.stats.allocated, a.stats.reserved) == (8 * MiB, 12 * MiB)
    a.malloc(4 * MiB)  # the remainder serves the next one exactly
    assert (a.stats.allocated, a.stats.reserved, a.stats.segments) == (12 * MiB, 12 * MiB, 1)


def test_best_fit_takes_the_smallest_free_block_that_fits():
    a = CachingAllocator()
    h12, h16 = a.malloc(12 * MiB), a.malloc(16 * MiB)
    a.free(h16)
    a.free(h12)
    a.malloc(11 * MiB)  # both fit; best fit is the 12 MiB block, whose 1 MiB remainder is not split
    assert a.stats.allocated == 12 * MiB
    a.malloc(15 * MiB)  # the 16 MiB block is still free
    assert (a.stats.allocated, a.stats.reserved) == (28 * MiB, 28 * MiB)


def test_a_tie_goes_to_the_newest_segment():
    # The CUDA driver places each new segment below the earlier ones, and best fit breaks ties by
    # the lowest address: of two equal free blocks, the newer segment's is taken.
    a = CachingAllocator()
    h_old = a.malloc(20 * MiB)  # segment 1: exactly 20 MiB
    a.free(a.malloc(40 * MiB))  # segment 2, cached whole
    a.malloc(20 * MiB)  # splits segment 2: [20 used][20 free]
    a.free(h_old)  # two free 20 MiB blocks: all of segment 1, the tail of segment 2
    a.malloc(20 * MiB)  # the tie: segment 2's tail, so segment 1 stays whole...
    assert a.empty_cache() == 20 * MiB  # ...and can be released (upward numbering kept neither)


def test_free_neighbours_merge_back_into_one_block():
    a = CachingAllocator()
    h1, h2 = a.malloc(5 * MiB), a.malloc(5 * MiB)  # one 20 MiB segment: [5][5][10 free]
    a.free(h1)
    a.free(h2)
    a.malloc(18 * MiB)  # fits only if all three pieces merged back
    assert (a.stats.reserved, a.stats.segments) == (20 * MiB, 1)


def test_empty_cache_releases_only_entirely_free_segments():
    a = CachingAllocator()
    a.malloc(5 * MiB)  # keeps its 20 MiB segment, 15 MiB of it free
    a.free(a.malloc(12 * MiB))  # served from those 15 MiB, merged back when freed
    h = a.malloc(16 * MiB)  # too big for them: a segment of its own
    a.free(h)
    assert a.stats.reserved == 36 * MiB
    assert a.empty_cache() == 16 * MiB
    assert a.stats.reserved == 20 * MiB


def test_out_of_memory_releases_cached_segments_and_retries():
    a = CachingAllocator(capacity=40 * MiB)
    a.free(a.malloc(30 * MiB))  # 30 MiB cached, too small for the next request
    a.malloc(32 * MiB)  # 30 + 32 > 40: the cached segment is released and cudaMalloc retried
    assert (a.stats.reserved, a.stats.peak_reserved, a.stats.retries) == (32 * MiB, 32 * MiB, 1)


def test_out_of_memory_when_nothing_can_be_released():
    a = CachingAllocator(capacity=40 * MiB)
    a.malloc(30 * MiB)
    with pytest.raises(SimulatedOutOfMemory) as err:
        a.malloc(12 * MiB)
    assert err.value.requested == 12 * MiB and err.value.reserved == 30 * MiB


def test_zero_bytes_hold_nothing():
    a = CachingAllocator()
    a.free(a.malloc(0))
    assert (a.stats.allocated, a.stats.reserved) == (0, 0)


def test_replay_measures_from_the_mark_after_emptying_the_cache():
    events = [(ALLOC, 1, 30 * MiB), (FREE, 1), (MARK, "trial"), (ALLOC, 2, MiB), (ALLOC, 3, 3 * MiB), (FREE, 2)]
    r = replay(events, measure_from="trial")
    assert r.fits
    # after the mark: 1 MiB in a 2 MiB small segment, 3 MiB in a 20 MiB segment; the 30 MiB was released
    assert (r.peak_allocated, r.peak_reserved) == (4 * MiB, 22 * MiB)
    # no mark: the cached 30 MiB block stays and serves the 3 MiB request (split); 1 MiB is small
    assert replay(events).peak_reserved == 30 * MiB + 2 * MiB


def test_replay_reports_the_failing_request():
    events = [(ALLOC, 1, 30 * MiB), (ALLOC, 2, 12 * MiB), (FREE, 1)]
    r = replay(events, capacity=40 * MiB)
    assert not r.fits and r.oom_at == 1 and r.oom.requested == 12 * MiB


# --- malloc and free, inlined, against the rules called one at a time ----------------------------


class _RulesAllocator:
    """The allocator written plainly with the rule functions above (as allocator.py was before its inner loop was
    written out inline): what CachingAllocator must match, call for call."""

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity
        self.free_blocks: dict[bool, list[tuple[int, int]]] = {True: [], False: []}  # sorted (size, addr)
        self.blocks: dict[int, list] = {}  # addr -> [size, small, allocated, segment]
        self.live: dict[int, int] = {}  # handle -> addr
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = self.retries = 0
        self.next_addr, self.next_handle = 1 << 60, 1

    def _segment_blocks(self, segment: int) -> list[int]:
        return sorted(a for a, b in self.blocks.items() if b[3] == segment)

    def empty_cache(self) -> None:
        for segment in {b[3] for b in self.blocks.values()}:
            addrs = self._segment_blocks(segment)
            if len(addrs) == 1 and not self.blocks[addrs[0]][2]:
                size, small = self.blocks[addrs[0]][:2]
                self.free_blocks[small].remove((size, addrs[0]))
                del self.blocks[addrs[0]]
                self.reserved -= size

    def malloc(self, nbytes: int) -> int:
        if nbytes == 0:
            return 0
        size = round_size(nbytes)
        small = is_small(size)
        fitting = [k for k in self.free_blocks[small] if k[0] >= size]
        if fitting:
            addr = min(fitting)[1]
            self.free_blocks[small].remove(min(fitting))
        else:
            seg = segment_size(size)
            if self.capacity is not None and self.reserved + seg > self.capacity:
                self.retries += 1
                self.empty_cache()
                if self.reserved + seg > self.capacity:
                    raise SimulatedOutOfMemory(nbytes, seg, self.allocated, self.reserved, self.capacity)
            self.next_addr -= seg + 2 * MiB
            addr = self.next_addr
            self.blocks[addr] = [seg, small, False, addr]
            self.reserved += seg
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        block = self.blocks[addr]
        if should_split(block[0], size, small):
            self.blocks[addr + size] = [block[0] - size, small, False, block[3]]
            self.free_blocks[small].append((block[0] - size, addr + size))
            self.free_blocks[small].sort()
            block[0] = size
        block[2] = True
        self.live[self.next_handle] = addr
        self.next_handle += 1
        self.allocated += block[0]
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return self.next_handle - 1

    def free(self, handle: int) -> None:
        if handle == 0:
            return
        addr = self.live.pop(handle)
        block = self.blocks[addr]
        block[2] = False
        self.allocated -= block[0]
        addrs = self._segment_blocks(block[3])
        i = addrs.index(addr)
        for other in [a for a in (addrs[i - 1] if i else None, addrs[i + 1] if i + 1 < len(addrs) else None) if a]:
            if not self.blocks[other][2]:
                size = self.blocks.pop(other)[0]
                self.free_blocks[block[1]].remove((size, other))
                addr = min(addr, other)
                block[0] += size
                self.blocks[addr] = block
        self.blocks = {a: b for a, b in self.blocks.items() if b is not block or a == addr}
        self.free_blocks[block[1]].append((block[0], addr))
        self.free_blocks[block[1]].sort()


@pytest.mark.parametrize("seed", range(8))
def test_malloc_and_free_follow_the_rules_call_for_call(seed):
    import random

    rng = random.Random(seed)
    capacity = rng.choice([None, 64 * MiB, 200 * MiB])
    fast, rules = CachingAllocator(capacity), _RulesAllocator(capacity)
    handles: list[tuple[int, int]] = []
    for _ in range(600):
        if handles and rng.random() < 0.45:
            h_fast, h_rules = handles.pop(rng.randrange(len(handles)))
            fast.free(h_fast)
            rules.free(h_rules)
        else:
            nbytes = rng.choice([0, rng.randrange(1, 2048), rng.randrange(1, 2 * MiB), rng.randrange(MiB, 40 * MiB)])
            outcomes = []
            for allocator in (fast, rules):
                try:
                    outcomes.append(allocator.malloc(nbytes))
                except SimulatedOutOfMemory as exc:
                    outcomes.append(("oom", exc.requested, exc.segment, exc.allocated, exc.reserved))
            assert isinstance(outcomes[0], int) == isinstance(outcomes[1], int), outcomes
            if isinstance(outcomes[0], int):
                handles.append((outcomes[0], outcomes[1]))
            else:
                assert outcomes[0] == outcomes[1]
        s = fast.stats
        assert (s.allocated, s.reserved, s.peak_allocated, s.peak_reserved, s.retries) == (
            rules.allocated,
            rules.reserved,
            rules.peak_allocated,
            rules.peak_reserved,
            rules.retries,
        )
        assert fast._free == rules.free_blocks


# --- a run that goes on after the trial: the last step repeated ------------------------------------


def _random_run(seed: int) -> tuple[list[tuple], tuple[int, int]]:
    """A build (persistent allocations, some freed again), the trial mark, then one step that frees all it
    allocates, in mixed sizes across both pools; returns the events and the step's (start, end)."""
    import random

    rng = random.Random(seed)
    sizes = [
        rng.choice([300, 4 * KiB, 700 * KiB, 3 * MiB, 9 * MiB, 12 * MiB, 25 * MiB]) + rng.randrange(512)
        for _ in range(40)
    ]
    events: list[tuple] = []
    next_id = 1
    for _ in range(rng.randrange(3, 12)):
        events.append((ALLOC, next_id, rng.choice(sizes)))
        if rng.random() < 0.3:
            events.append((FREE, next_id))
        next_id += 1
    events.append((MARK, "trial"))
    start = len(events)
    live: list[int] = []
    for _ in range(rng.randrange(10, 60)):
        if live and rng.random() < 0.45:
            events.append((FREE, live.pop(rng.randrange(len(live)))))
        else:
            events.append((ALLOC, next_id, rng.choice(sizes)))
            live.append(next_id)
            next_id += 1
    rng.shuffle(live)
    events += [(FREE, i) for i in live]
    return events, (start, len(events))


def _unrolled(events: list[tuple], span: tuple[int, int], times: int) -> list[tuple]:
    """The same run written out: the step `times` more times, each with its own ids."""
    start, end = span
    out = list(events[:end])
    for k in range(1, times + 1):
        out += [(e[0], e[1] + k * 100_000, *e[2:]) if e[0] in (ALLOC, FREE) else e for e in events[start:end]]
    return out + events[end:]


@pytest.mark.parametrize("seed", range(60))
def test_a_repeated_step_replays_as_the_run_written_out(seed):
    events, span = _random_run(seed)
    for times in (1, 4, 30):
        for capacity in (None, 120 * MiB):
            repeated = replay(events, capacity, "trial", (*span, times))
            written = replay(_unrolled(events, span, times), capacity, "trial")
            assert (repeated.fits, repeated.peak_allocated, repeated.peak_reserved) == (
                written.fits,
                written.peak_allocated,
                written.peak_reserved,
            )


def test_a_step_can_need_more_memory_the_second_time_it_runs():
    """What the repetition is for: the cache the first step leaves serves the next one worse (a block it split
    cannot hold what the next step asks first), so the run's peak is above the trial step's."""
    grew = 0
    for seed in range(120):
        events, span = _random_run(seed)
        once = replay(events, None, "trial")
        again = replay(events, None, "trial", (*span, 30))
        assert again.peak_reserved >= once.peak_reserved
        grew += again.peak_reserved > once.peak_reserved
    assert grew >= 3  # 4 of these 120 (seeds 51, 52, 74, 112)


def test_repetition_stops_once_the_cache_has_settled():
    calls = []
    events, span = _random_run(7)

    class Counting(list):
        def __getitem__(self, i):
            calls.append(i)
            return list.__getitem__(self, i)

    replay(Counting(events), None, "trial", (*span, 10_000))
    steps_replayed = sum(1 for i in calls if i == span[0])
    assert 2 <= steps_replayed <= 20  # the first run of the step, and repetitions until one changes nothing
