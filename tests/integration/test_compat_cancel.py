"""Cancelling a task fails the tasks that depend on its result (compatibility issue item 13):
their `get` raises TaskCancelledError at once, even when every CPU is busy (they never need a
worker to find out), through chains of dependents and refs nested in arguments, and the
cancelled task's message survives the trip unchanged."""
from __future__ import annotations

import time

import pytest

import ember as ray
from ember import exceptions as ex


@ray.remote
def spin(seconds):
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(0.02)
    return "done"


@ray.remote
def dep(x):
    return x


@ray.remote
def get_nested(refs):
    return ray.get(refs[0])


def _fails_fast(ref, task_id_hex):
    t = time.monotonic()
    with pytest.raises(ex.TaskCancelledError) as info:
        ray.get(ref, timeout=15)
    assert time.monotonic() - t < 10
    assert str(info.value).count("was cancelled") == 1 and task_id_hex in str(info.value)


def test_dependents_of_a_queued_task_fail_while_every_cpu_is_busy(ray_start):
    busy = [spin.remote(60) for _ in range(2)]  # the 2-CPU node is full
    time.sleep(1.0)
    up = spin.remote(60)  # queued behind them
    d1 = dep.remote(up)
    d2 = dep.remote(d1)
    n = dep.remote([up])  # a nested ref is not a dependency: this one runs when a CPU frees
    ray.cancel(up)
    for r in (up, d1, d2):
        _fails_fast(r, up.task_id().hex())
    for b in busy:
        ray.cancel(b, force=True)
    assert ray.get(n, timeout=60)[0] == up  # it ran, holding the cancelled ref
    assert ray.get(spin.remote(0), timeout=60) == "done"  # the node works on


def test_dependents_of_a_running_task_fail(ray_start):
    up = spin.remote(60)
    time.sleep(1.0)  # running
    d1, d2 = dep.remote(up), get_nested.remote([up])
    d3 = dep.remote(d1)
    ray.cancel(up)
    for r in (up, d1, d3):
        _fails_fast(r, up.task_id().hex())
    with pytest.raises(ex.TaskCancelledError):  # raised by get() inside the task
        ray.get(d2, timeout=15)


def test_a_dependent_submitted_after_the_cancel_fails_too(ray_start):
    up = spin.remote(60)
    ray.cancel(up)
    with pytest.raises(ex.TaskCancelledError):
        ray.get(up, timeout=15)
    _fails_fast(dep.remote(up), up.task_id().hex())


def test_a_cancel_that_reaches_the_worker_before_its_task_starts_is_not_lost(ray_start):
    # Cancels at several moments after submission: queued, pushed but not started, running.
    for i in range(12):
        up = spin.remote(30)
        time.sleep(0.005 * (i % 6))
        ray.cancel(up)
        with pytest.raises(ex.TaskCancelledError):
            ray.get(up, timeout=20)
