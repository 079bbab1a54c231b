"""num_cpus bounds concurrency even for tasks that wait in get() (compatibility issue item 7): a
worker blocked in get() lends its CPUs to other tasks only while it really waits, and takes them
back before it continues, so a 4-CPU node never runs two num_cpus=3 tasks at once; nested gets
deeper than the CPU count still finish. Each task reports the intervals it ran (outside get)."""
from __future__ import annotations

import time

import pytest

import ember as ray


@pytest.fixture(scope="module")
def four_cpus():
    ray.init(num_cpus=4)
    yield
    ray.shutdown()


def _busy(seconds: float) -> None:
    end = time.time() + seconds
    while time.time() < end:
        pass


@ray.remote(num_cpus=1)
def nap(seconds):
    time.sleep(seconds)
    return seconds


@ray.remote(num_cpus=3)
def waits_in_get(wait_s):
    """Runs, waits in get() for a short task, runs again: returns the two running intervals."""
    t0 = time.time()
    _busy(0.4)
    ref = nap.remote(wait_s)
    t1 = time.time()
    ray.get(ref)
    t2 = time.time()
    _busy(0.4)
    return [(t0, t1), (t2, time.time())]


@ray.remote(num_cpus=3)
def gets_ready(refs):
    """Runs, gets an object that is ready already (borrowed: asked of its owner), runs again."""
    t0 = time.time()
    _busy(0.3)
    assert ray.get(refs[0]) == "ready"
    _busy(0.3)
    return [(t0, time.time())]


def _overlap(a, b):
    return [(x, y) for x in a for y in b if x[0] < y[1] and y[0] < x[1]]


def test_two_three_cpu_tasks_that_wait_in_get_never_run_at_once(four_cpus):
    for _ in range(2):
        a, b = ray.get([waits_in_get.remote(0.3), waits_in_get.remote(0.3)], timeout=120)
        assert not _overlap(a, b), (a, b)


def test_a_get_of_a_ready_object_lends_nothing(four_cpus):
    ready = ray.put("ready")
    for _ in range(3):
        a, b = ray.get([gets_ready.remote([ready]), gets_ready.remote([ready])], timeout=120)
        assert not _overlap(a, b), (a, b)  # the second one never started during the first


@ray.remote(num_cpus=1)
def nested(depth):
    if depth == 0:
        return 0
    return 1 + ray.get(nested.remote(depth - 1))


@ray.remote(num_cpus=2)
def fan_out(n):
    return sum(ray.get([nested.remote(3) for _ in range(n)]))


def test_nested_gets_deeper_than_the_cpus_finish(four_cpus):
    assert ray.get(nested.remote(6), timeout=180) == 6  # 7 tasks deep on 4 CPUs
    assert ray.get([fan_out.remote(2) for _ in range(2)], timeout=180) == [6, 6]
    assert ray.available_resources().get("CPU") == 4.0 or _settles()


def _settles() -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if ray.available_resources().get("CPU") == 4.0:
            return True
        time.sleep(0.1)
    return False
