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
