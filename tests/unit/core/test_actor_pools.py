"""The worker side of actor concurrency (actor_pools.py), without processes: concurrency group
pools and limits, and which calls a cancel stops."""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading

from ember._private.execution.actor_pools import CallCancels, ThreadPool, async_limits, thread_pools
from ember_common.proto import common_pb2


def test_a_call_cancelled_before_it_starts_does_not_run():
    c = CallCancels()
    c.arrived(b"a")
    c.arrived(b"b")
    assert c.cancel(b"a") is True
    assert c.start(b"a") is False  # answered TaskCancelledError instead of running
    assert c.start(b"b") is True
    assert c.cancel(b"b") is True  # a sync call that started runs to its end...
    assert c.finished(b"b") is True  # ...and is then answered as cancelled
    c.arrived(b"c")
    assert c.start(b"c") and c.finished(b"c") is False


def test_a_cancel_that_overtakes_its_call_is_remembered_boundedly():
    c = CallCancels(max_early=2)
    assert c.cancel(b"x") is False
    c.arrived(b"x")
    assert c.start(b"x") is False
    for t in (b"1", b"2", b"3"):
        c.cancel(t)
    c.arrived(b"1")  # the oldest early cancel was dropped
    assert c.start(b"1") is True
    c.arrived(b"3")
    assert c.start(b"3") is False


def test_a_running_async_call_is_cancelled_through_its_future():
    c = CallCancels()
    fut: concurrent.futures.Future[int] = concurrent.futures.Future()
    c.arrived(b"a")
    assert c.start(b"a")
    c.running(b"a", fut)
    assert c.cancel(b"a") is True and fut.cancelled()
    assert c.finished(b"a") is False
    assert c.cancel(b"a") is False


def test_groups_get_their_own_thread_pools_and_async_limits():
    spec = common_pb2.ActorCreationSpec(max_concurrency=1, concurrency_groups={"io": 2, "cpu": 3})
    pools = thread_pools(spec, lambda item: None)
    assert {k: p.size for k, p in pools.items()} == {"io": 2, "cpu": 3}  # default: main thread
    spec.max_concurrency = 4
    assert thread_pools(spec, lambda item: None)[""].size == 4
    limits = async_limits(common_pb2.ActorCreationSpec(concurrency_groups={"io": 2}))
    assert set(limits) == {"io", ""}
    assert asyncio.run(_capacity(limits["io"])) == 2
    assert asyncio.run(_capacity(limits[""])) == 1000


async def _capacity(sem: asyncio.Semaphore) -> int:
    n = 0
    while not sem.locked():
        await sem.acquire()
        n += 1
    return n


def test_a_pool_runs_at_most_its_size_at_once_and_starts_threads_on_demand():
    gate = threading.Event()
    lock = threading.Lock()
    state = {"now": 0, "peak": 0, "done": 0}
    all_done = threading.Event()

    def run(item: int) -> None:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        gate.wait(10)
        with lock:
            state["now"] -= 1
            state["done"] += 1
            if state["done"] == 5:
                all_done.set()

    pool = ThreadPool("io", 2, run)
    for i in range(5):
        pool.put(i)
    for _ in range(200):  # two calls start at once, a third never does while they block
        if state["now"] == 2:
            break
        threading.Event().wait(0.01)
    threading.Event().wait(0.1)
    assert state["now"] == 2 and state["done"] == 0
    gate.set()
    assert all_done.wait(10)
    assert state["peak"] == 2 and pool._threads == 2
