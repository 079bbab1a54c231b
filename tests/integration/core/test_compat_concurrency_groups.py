"""Concurrency groups as in Ray 2.60 (compatibility issue item 9): `concurrency_groups={...}` on
an actor class, `@ember.method(concurrency_group=)` and `.options(concurrency_group=)` on calls.
Each group has its own pool (threads for a threaded actor, a limit for an async one) of the
declared size; a saturated group blocks neither another group nor the default one, which keeps
`max_concurrency`. Bad declarations fail at the call site."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

import ember as ray


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2)
    yield
    ray.shutdown()


@ray.remote(num_cpus=0, concurrency_groups={"io": 2, "compute": 2})
class Threaded:
    def __init__(self):
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.started = []
        self.running = 0
        self.peak = 0

    @ray.method(concurrency_group="io")
    def block(self, tag):
        with self.lock:
            self.started.append(tag)
            self.running += 1
            self.peak = max(self.peak, self.running)
        self.gate.wait(30)
        with self.lock:
            self.running -= 1
        return tag

    @ray.method(concurrency_group="compute")
    def release(self):
        self.gate.set()

    def seen(self):  # the default group
        with self.lock:
            return list(self.started), self.peak


@ray.remote(num_cpus=0, concurrency_groups={"io": 2, "compute": 2})
class Async:
    def __init__(self):
        self.gate = asyncio.Event()
        self.started = []
        self.running = 0
        self.peak = 0

    @ray.method(concurrency_group="io")
    async def block(self, tag):
        self.started.append(tag)
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await asyncio.wait_for(self.gate.wait(), 30)
        finally:
            self.running -= 1
        return tag

    @ray.method(concurrency_group="compute")
    async def release(self):
        self.gate.set()

    async def seen(self):
        return list(self.started), self.peak


def _wait_started(actor, tags, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        started, _ = ray.get(actor.seen.remote(), timeout=30)
        if set(tags) <= set(started):
            return started
        time.sleep(0.05)
    raise AssertionError(f"{tags} did not all start: {started}")


@pytest.mark.parametrize("cls", [Threaded, Async], ids=["threaded", "async"])
def test_a_saturated_group_blocks_neither_other_groups_nor_the_default_one(cluster, cls):
    a = cls.remote()
    io = [a.block.remote(f"io{i}") for i in range(3)]  # the group holds 2: io2 waits
    # The same method put in another group by the call's options runs beside them.
    other = a.block.options(concurrency_group="compute").remote("c0")
    started = _wait_started(a, {"io0", "io1", "c0"})  # the default group answers meanwhile
    time.sleep(0.5)
    started, peak = ray.get(a.seen.remote(), timeout=30)
    assert "io2" not in started and peak == 3  # 2 in io + 1 in compute
    ready, _ = ray.wait(io, num_returns=1, timeout=0.2)
    assert ready == []
    ray.get(a.release.remote(), timeout=30)  # compute still has a free slot
    assert ray.get(io + [other], timeout=60) == ["io0", "io1", "io2", "c0"]


def test_the_default_group_keeps_max_concurrency(cluster):
    @ray.remote(num_cpus=0, max_concurrency=3, concurrency_groups={"io": 1})
    class Pool:
        def __init__(self):
            self.barrier = threading.Barrier(3, timeout=30)

        def meet(self):
            self.barrier.wait()  # needs three calls at once in the default group
            return True

    p = Pool.remote()
    assert ray.get([p.meet.remote() for _ in range(3)], timeout=60) == [True] * 3


def test_bad_groups_fail_at_the_call_site(cluster):
    with pytest.raises(ValueError, match="does not declare"):
        @ray.remote(concurrency_groups={"io": 1})
        class Undeclared:
            @ray.method(concurrency_group="nope")
            def f(self):
                return 1

    with pytest.raises(ValueError, match="int >= 1"):
        @ray.remote(concurrency_groups={"io": 0})
        class Zero:
            def f(self):
                return 1

    with pytest.raises(TypeError, match="dict"):
        @ray.remote(concurrency_groups=[("io", 1)])
        class NotADict:
            def f(self):
                return 1

    a = Threaded.remote()
    with pytest.raises(ValueError, match="no such group"):
        a.seen.options(concurrency_group="nope")
    ray.get(a.release.remote(), timeout=30)
