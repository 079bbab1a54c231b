"""Pure tests of Ember Data's policies: the memory budget, actor-pool autoscaling,
streaming_split's coordinator, block sizing and re-batching."""
from __future__ import annotations

import pyarrow as pa
import pytest

from ember.data._internal.autoscaling import AutoscalingPolicy, PoolView
from ember.data._internal.backpressure import BudgetPolicy, OpView, RecentlyFreed, budget_from, max_in_flight
from ember.data._internal.sizing import group_pieces, slices_at, split_even
from ember.data._internal.split_coordinator import DONE, WAIT, Give, SplitCoordinatorCore
from ember.data._internal.stats import OpStats
from ember.data._internal.transforms import rebatch
from ember.data.block import BlockExecStats, BlockMetadata

MiB = 2**20


def _ops(**over) -> list[OpView]:
    read = OpView("Read", in_flight=0, max_in_flight=8, has_input=True, est_output_bytes=10 * MiB,
                  est_heap_bytes=5 * MiB)
    mapop = OpView("Map", in_flight=0, max_in_flight=8, has_input=False, est_output_bytes=10 * MiB,
                   est_heap_bytes=20 * MiB)
    for k, v in over.items():
        name, attr = k.split("__")
        setattr(read if name == "read" else mapop, attr, v)
    return [read, mapop]


def test_budget_prefers_downstream_and_counts_heap():
    p = BudgetPolicy(100 * MiB)
    ops = _ops(map__has_input=True)
    assert p.select(ops, store_bytes=0) == 1  # downstream first
    # a read in flight (15 MiB expected) + 60 MiB stored = 75: a map task (10 out + 20 heap)
    # no longer fits, another read (15 MiB) does
    ops = _ops(map__has_input=True, read__in_flight=1)
    assert p.select(ops, store_bytes=60 * MiB) == 0
    assert p.select(ops, store_bytes=80 * MiB) is None
    # heap of tasks in flight counts even though it is not in the store
    ops = _ops(map__has_input=True, map__in_flight=3)  # 3 × 30 MiB pending
    assert p.usage(ops, 0).pending_bytes == 90 * MiB
    assert p.select(ops, store_bytes=0) is None


def test_budget_always_lets_one_task_run():
    p = BudgetPolicy(1 * MiB)
    ops = _ops()
    assert p.select(ops, store_bytes=50 * MiB) == 0  # nothing in flight: progress anyway
    ops = _ops(read__in_flight=1)
    assert p.select(ops, store_bytes=50 * MiB) is None


def test_budget_caps_in_flight_and_ignores_barriers():
    p = BudgetPolicy(100 * MiB)
    assert p.select(_ops(read__in_flight=8, map__in_flight=1), 0) is None
    ops = _ops(read__has_input=False, map__has_input=True, map__barrier=True)
    assert p.select(ops, store_bytes=500 * MiB) == 1
    assert p.peak_usage >= 500 * MiB
    with pytest.raises(ValueError):
        BudgetPolicy(0)


def test_budget_derivation_and_slots():
    assert budget_from(256 * MiB, 0.5, None, 10**12) == 128 * MiB
    assert budget_from(256 * MiB, 0.5, 64 * MiB, 10**12) == 64 * MiB
    assert budget_from(None, 0.5, None, 8 * MiB) == 4 * MiB
    assert max_in_flight(4, 1, 1, 0, None, 16) == 8
    assert max_in_flight(4, 1, 1, 0.25, None, 16) == 8
    assert max_in_flight(4, 1, 0, 0.25, None, 16) == 8
    assert max_in_flight(4, 1, 1, 0, 3, 16) == 3
    assert max_in_flight(64, 0, 1, 0, None, 16) == 16


def test_op_stats_learn_output_ratio_and_heap():
    s = OpStats("Map", initial_input_bytes=7)
    assert s.est_output_bytes(0) == 7 and s.est_heap_bytes(100) == 100
    s.on_task_done(100, BlockMetadata(10, 50, exec_stats=BlockExecStats(1, 1, 300)))
    assert s.est_output_bytes(200) == 100  # output is half the input
    assert s.est_heap_bytes(1) == 300


def _view(**kw) -> PoolView:
    base = dict(running=0, pending=0, busy_slots=0, queued_inputs=0, inputs_done=False,
                can_afford_actor=True)
    base.update(kw)
    return PoolView(**base)


def test_autoscaling_starts_min_then_grows_one_at_a_time():
    p = AutoscalingPolicy(1, 3, max_tasks_per_actor=2)
    assert p.decide(_view()).delta == 1
    assert p.decide(_view(running=1, busy_slots=2, queued_inputs=5)).delta == 1
    assert p.decide(_view(running=1, pending=1, busy_slots=2, queued_inputs=5)).delta == 0
    assert p.decide(_view(running=1, busy_slots=1, queued_inputs=1)).delta == 0  # a free slot
    assert p.decide(_view(running=3, busy_slots=6, queued_inputs=9)).delta == 0  # at max
    assert p.decide(_view(running=2, busy_slots=4, queued_inputs=9,
                          can_afford_actor=False)).delta == 0


def test_autoscaling_shrinks():
    p = AutoscalingPolicy(2, None, max_tasks_per_actor=1, idle_timeout_s=5)
    assert p.decide(_view(running=3, idle_actors=1, longest_idle_s=6)).delta == -1
    assert p.decide(_view(running=2, idle_actors=1, longest_idle_s=60)).delta == 0  # at min
    assert p.decide(_view(running=2, idle_actors=2, inputs_done=True)).delta == -2
    assert AutoscalingPolicy(2, 4, 1, initial_size=3).decide(_view()).delta == 3


def _drain(c: SplitCoordinatorCore, i: int) -> list:
    out = []
    while True:
        d = c.next_for(i)
        if not isinstance(d, Give):
            return out + [d]
        out.append(d)


def test_split_unequal_hands_blocks_to_whoever_asks():
    c = SplitCoordinatorCore(2, equal=False)
    assert c.next_for(0) == WAIT
    c.add("a", 10)
    c.add("b", 5)
    assert c.next_for(1) == Give("a", 0, 10, True)
    assert c.next_for(1) == Give("b", 0, 5, True)
    c.finish()
    assert c.next_for(0) == DONE


@pytest.mark.parametrize("sizes", [[10, 10, 10, 10, 7], [3, 100, 1, 50, 50, 2, 9], [5]])
def test_split_equal_gives_every_consumer_the_same_rows(sizes):
    n = 3
    c = SplitCoordinatorCore(n, equal=True)
    got = [0] * n
    for k, s in enumerate(sizes):
        c.add(k, s)
        for i in range(n):  # consumers take turns, as concurrent readers do
            d = c.next_for(i)
            while isinstance(d, Give):
                got[i] += d.rows
                d = c.next_for(i)
    c.finish()
    for i in range(n):
        for d in _drain(c, i)[:-1]:
            got[i] += d.rows
    assert got == [sum(sizes) // n] * n


def test_split_equal_waits_for_a_lagging_consumer():
    c = SplitCoordinatorCore(2, equal=True)
    for k in range(10):
        c.add(k, 10)
    assert isinstance(c.next_for(0), Give)
    assert c.next_for(0) == WAIT  # one block ahead of consumer 1
    assert isinstance(c.next_for(1), Give)
    assert isinstance(c.next_for(0), Give)


def test_sizing():
    assert group_pieces([10, 10, 10, 10], target_bytes=25, min_groups=1) == [[0, 1], [2, 3]]
    assert group_pieces([10, 10, 10, 10], target_bytes=100, min_groups=4) == [[0], [1], [2], [3]]
    assert group_pieces([], 10, 2) == []
    assert split_even(10, 3) == [4, 3, 3]
    assert slices_at([5, 5], [3, 7]) == [[(0, 0, 3)], [(0, 3, 2), (1, 0, 2)], [(1, 2, 3)]]
    assert slices_at([4], [0]) == [[], [(0, 0, 4)]]
    with pytest.raises(ValueError):
        slices_at([4], [3, 1])


def test_rebatch_crosses_block_boundaries():
    blocks = [pa.table({"x": list(range(i * 5, i * 5 + 5))}) for i in range(3)]
    out = list(rebatch(iter(blocks), 4))
    assert [b.num_rows for b in out] == [4, 4, 4, 3]
    assert sum((b.column("x").to_pylist() for b in out), []) == list(range(15))
    assert [b.num_rows for b in rebatch(iter(blocks), None)] == [5, 5, 5]


def test_recently_freed_bytes_count_for_the_grace_period():
    now = [0.0]
    f = RecentlyFreed(lambda: now[0], grace_s=0.1)
    f.add(10)
    now[0] = 0.05
    f.add(5)
    f.add(0)
    assert f.total() == 15
    now[0] = 0.11  # the first drop is older than the grace period
    assert f.total() == 5
    now[0] = 1.0
    assert f.total() == 0


def test_budget_counts_streaming_tasks_by_the_output_still_to_come():
    p = BudgetPolicy(100 * MiB)
    # 4 reads in flight have 20 MiB of their expected output (and heap) still to come
    ops = _ops(map__has_input=True, read__in_flight=4, read__pending_bytes=20 * MiB)
    assert p.usage(ops, 50 * MiB).total == 70 * MiB
    assert p.select(ops, 50 * MiB) == 1  # a map task (30 MiB) fits exactly
    assert p.select(ops, 51 * MiB) == 0  # it no longer does; a read (15 MiB) does
