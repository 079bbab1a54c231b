"""ArenaAllocator: first-fit, 64-byte aligned ranges of a fixed arena, with coalescing."""
from __future__ import annotations

import itertools
import random

import pytest

from ember_objmgr.allocator import ALIGN, ArenaAllocator, aligned

CAP = 16 * ALIGN


def free_ranges(a: ArenaAllocator) -> list[tuple[int, int]]:
    return [(s, a._sizes[s]) for s in a._starts]


def check_invariants(a: ArenaAllocator) -> None:
    """Free ranges sorted, disjoint, never adjacent (fully coalesced); free + used = capacity."""
    ranges = free_ranges(a)
    assert sorted(a._sizes) == a._starts
    for (s1, n1), (s2, _) in zip(ranges, ranges[1:], strict=False):
        assert s1 + n1 < s2, f"free ranges {ranges} overlap or were not coalesced"
    assert all(n > 0 and s % ALIGN == 0 and n % ALIGN == 0 for s, n in ranges)
    assert all(0 <= s and s + n <= a.capacity for s, n in ranges)
    assert sum(n for _, n in ranges) + a.used == a.capacity
    assert a.used == sum(a._allocated.values())


def test_aligned():
    assert [aligned(n) for n in (0, 1, 63, 64, 65, 128, 129)] == [0, 64, 64, 64, 128, 128, 192]


def test_capacity_is_rounded_down_to_the_alignment():
    assert ArenaAllocator(1000).capacity == 960
    assert ArenaAllocator(64).capacity == 64
    a = ArenaAllocator(63)
    assert a.capacity == 0
    assert a.alloc(1) is None
    assert a.largest_free() == 0
    assert ArenaAllocator(0).alloc(1) is None


def test_alloc_is_first_fit_and_aligned():
    a = ArenaAllocator(CAP)
    offsets = [a.alloc(n) for n in (1, 64, 65, 100, 0)]
    assert offsets == [0, 64, 128, 256, 384]
    assert all(o % ALIGN == 0 for o in offsets)
    assert [a.size_of(o) for o in offsets] == [64, 64, 128, 128, 64]  # a zero-byte object gets 64
    assert a.used == 448
    check_invariants(a)


def test_alloc_returns_none_when_full_and_leaves_state_unchanged():
    a = ArenaAllocator(CAP)
    assert a.alloc(CAP) == 0
    assert a.used == CAP and a.largest_free() == 0
    assert a.alloc(1) is None
    assert a.used == CAP
    a.free(0)
    assert a.used == 0 and a.largest_free() == CAP
    assert a.alloc(CAP + 1) is None
    assert a.used == 0
    check_invariants(a)


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))))
def test_free_in_any_order_coalesces_back_to_the_whole_arena(order):
    a = ArenaAllocator(CAP)
    offsets = [a.alloc(4 * ALIGN) for _ in range(4)]
    assert offsets == [0, 256, 512, 768]
    assert a.alloc(1) is None
    for i in order:
        a.free(offsets[i])
        check_invariants(a)
    assert a.used == 0
    assert free_ranges(a) == [(0, CAP)]
    assert a.largest_free() == CAP
    assert a.alloc(CAP) == 0


def test_free_merges_with_both_neighbours():
    a = ArenaAllocator(CAP)
    x, y, z, w = (a.alloc(ALIGN) for _ in range(4))
    a.free(x)
    a.free(z)
    assert free_ranges(a) == [(0, 64), (128, 64), (256, CAP - 256)]
    a.free(y)  # joins x .. z, but w still separates it from the tail
    assert free_ranges(a) == [(0, 192), (256, CAP - 256)]
    a.free(w)
    assert free_ranges(a) == [(0, CAP)]


def test_fragmentation_total_free_is_not_enough():
    a = ArenaAllocator(CAP)
    offsets = [a.alloc(ALIGN) for _ in range(16)]
    assert a.alloc(1) is None
    for o in offsets[::2]:  # every other slot: half the arena is free, in 64-byte pieces
        a.free(o)
    assert a.used == CAP // 2
    assert a.largest_free() == ALIGN
    assert a.alloc(2 * ALIGN) is None
    assert a.alloc(ALIGN) == 0  # first fit: the lowest hole
    a.free(0)
    a.free(offsets[1])  # 0..192 now one free range
    assert a.largest_free() == 3 * ALIGN
    assert a.alloc(3 * ALIGN) == 0
    check_invariants(a)


def test_first_fit_skips_holes_that_are_too_small():
    a = ArenaAllocator(CAP)
    small = a.alloc(ALIGN)
    a.alloc(ALIGN)
    big = a.alloc(4 * ALIGN)
    a.alloc(ALIGN)
    a.free(small)
    a.free(big)
    assert big == 2 * ALIGN
    assert a.alloc(2 * ALIGN) == big  # the 64-byte hole at 0 is too small
    assert a.alloc(ALIGN) == 0
    assert a.alloc(2 * ALIGN) == big + 2 * ALIGN  # the rest of big's old range
    check_invariants(a)


def test_used_and_largest_free_accounting():
    a = ArenaAllocator(CAP)
    assert a.used == 0 and a.largest_free() == CAP
    o1 = a.alloc(100)  # 128
    o2 = a.alloc(200)  # 256
    assert a.used == 384
    assert a.largest_free() == CAP - 384
    a.free(o1)
    assert a.used == 256
    assert a.largest_free() == CAP - 384  # the 128-byte hole is smaller than the tail
    a.free(o2)
    assert a.used == 0 and a.largest_free() == CAP


def test_free_of_an_unknown_offset_or_double_free_raises():
    a = ArenaAllocator(CAP)
    o = a.alloc(10)
    a.free(o)
    with pytest.raises(KeyError):
        a.free(o)
    with pytest.raises(KeyError):
        a.free(123)
    assert a.used == 0
    check_invariants(a)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_randomized_against_a_reference_model(seed):
    """Random allocs and frees; a byte map of the arena is the reference: an alloc succeeds exactly
    when some aligned run of free slots is long enough, and returns the lowest such run."""
    rng = random.Random(seed)
    capacity = 64 * ALIGN + rng.randrange(ALIGN)  # not a multiple: rounded down
    a = ArenaAllocator(capacity)
    slots = a.capacity // ALIGN
    owner: list[int | None] = [None] * slots  # per 64-byte slot: the live allocation's offset
    live: dict[int, int] = {}  # offset -> requested size

    def first_fit(n_slots: int) -> int | None:
        run = 0
        for i, o in enumerate(owner):
            run = run + 1 if o is None else 0
            if run == n_slots:
                return (i - n_slots + 1) * ALIGN
        return None

    for _ in range(3000):
        if live and rng.random() < 0.45:
            off = rng.choice(sorted(live))
            a.free(off)
            n = aligned(max(live.pop(off), 1)) // ALIGN
            for s in range(off // ALIGN, off // ALIGN + n):
                assert owner[s] == off
                owner[s] = None
        else:
            size = rng.choice([0, 1, 63, 64, 65, rng.randrange(1, 8 * ALIGN), rng.randrange(1, a.capacity + 100)])
            need = aligned(max(size, 1)) // ALIGN
            expected = first_fit(need)
            got = a.alloc(size)
            assert got == expected, f"alloc({size}) -> {got}, reference first fit {expected}"
            if got is not None:
                assert got % ALIGN == 0 and got + size <= a.capacity
                assert a.size_of(got) >= size
                for s in range(got // ALIGN, got // ALIGN + need):
                    assert owner[s] is None, "overlaps a live allocation"
                    owner[s] = got
                live[got] = size
        # No overlap between live allocations, all inside the arena.
        spans = sorted((o, o + a.size_of(o)) for o in live)
        assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:], strict=False))
        assert all(0 <= s and e <= a.capacity for s, e in spans)
        assert a.used == sum(aligned(max(n, 1)) for n in live.values())
        free_run = max((len(list(g)) for k, g in itertools.groupby(owner) if k is None), default=0)
        assert a.largest_free() == free_run * ALIGN
        check_invariants(a)

    for off in list(live):
        a.free(off)
    assert a.used == 0
    assert free_ranges(a) == [(0, a.capacity)]
    assert a.alloc(a.capacity) == 0
