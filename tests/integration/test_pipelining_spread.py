"""Pipelining (16 tasks in flight per worker by default) still spreads work: tasks pushed
behind a running one count as backlog, more workers are leased, and they steal it."""
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
