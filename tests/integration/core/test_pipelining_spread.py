"""Pipelining (up to 16 tasks in flight per worker by default, for functions known to be short)
still spreads work: a function with no finished run yet, or a long one, is not pipelined, so a
burst of long tasks gets a worker per task on every node; tasks pushed behind a running one
count as backlog, more workers are leased, and they steal it."""
from __future__ import annotations

import os
import time

import pytest

import ember


@pytest.fixture(scope="module")
def two_cpus():
    ember.init(num_cpus=2)
    try:
        yield
    finally:
        ember.shutdown()


def test_sleeping_tasks_run_on_both_workers_at_once(two_cpus):
    @ember.remote
    def nap(t):
        start = time.time()
        time.sleep(t)
        return os.getpid(), start, time.time()

    runs = ember.get([nap.remote(0.5) for _ in range(6)], timeout=60)
    assert len({pid for pid, _, _ in runs}) == 2, runs
    overlapping = [(a, b) for i, a in enumerate(runs) for b in runs[i + 1:]
                   if a[0] != b[0] and a[1] < b[2] and b[1] < a[2]]
    assert overlapping, "no two tasks ran at the same time: the backlog was not stolen"


def test_a_quick_task_does_not_wait_behind_a_slow_one(two_cpus):
    @ember.remote
    def sleepy(t):
        time.sleep(t)
        return t

    slow = sleepy.remote(5)
    fast = sleepy.remote(0)
    ready, _ = ember.wait([fast, slow], num_returns=1, timeout=4)
    assert ready == [fast]
    assert ember.get(slow, timeout=30) == 5


def test_a_burst_of_long_tasks_runs_in_waves_of_the_cpu_count(two_cpus):
    """Six 1-second tasks on two CPUs, right after the function is defined (unknown: not
    pipelined), then again (known long: still not pipelined): three waves each time. Queued
    behind one worker they would take 6 s."""
    @ember.remote
    def hold(t):
        start = time.monotonic()
        time.sleep(t)
        return os.getpid(), start

    for _ in range(2):
        t0 = time.monotonic()
        runs = ember.get([hold.remote(1.0) for _ in range(6)], timeout=60)
        wall = time.monotonic() - t0
        assert len({pid for pid, _ in runs}) == 2, runs
        assert wall < 5.0, f"six 1 s tasks on 2 CPUs took {wall:.1f} s"
        starts = sorted(s for _, s in runs)
        assert starts[1] - starts[0] < 0.9, starts  # the first two ran side by side


def test_short_tasks_after_long_ones_complete_and_stay_in_order(two_cpus):
    @ember.remote
    def inc(i):
        return i + 1

    assert ember.get([inc.remote(i) for i in range(2000)], timeout=120) == list(range(1, 2001))

