"""ember.util.queue.Queue across tasks and actors (Ray's ray.util.queue contract)."""
from __future__ import annotations

import asyncio
import time

import pytest

import ember
from ember.util.queue import Empty, Full, Queue


def test_fifo_across_tasks_and_actors(ray_start):
    q = Queue()

    @ember.remote
    def produce(queue, start):
        for i in range(start, start + 5):
            queue.put(i)
        return True

    @ember.remote
    class Consumer:
        def take(self, queue, n):
            return [queue.get(timeout=30) for _ in range(n)]

    ember.get(produce.remote(q, 0))
    ember.get(produce.remote(q, 5))
    assert len(q) == q.qsize() == q.size() == 10
    c = Consumer.remote()
    assert ember.get(c.take.remote(q, 10)) == list(range(10))  # FIFO over both producers
    assert q.empty()
    q.shutdown()


def test_maxsize_block_and_timeout(ray_start):
    q = Queue(maxsize=2)
    q.put(1)
    q.put_nowait(2)
    assert q.full()
    with pytest.raises(Full):
        q.put_nowait(3)
    t0 = time.monotonic()
    with pytest.raises(Full):
        q.put(3, timeout=0.3)
    assert time.monotonic() - t0 >= 0.25
    assert q.get() == 1 and q.get_nowait() == 2
    with pytest.raises(Empty):
        q.get_nowait()
    with pytest.raises(Empty):
        q.get(timeout=0.2)
    with pytest.raises(Empty):
        q.get(block=False)
    with pytest.raises(ValueError, match="non-negative"):
        q.get(timeout=-1)
    q.shutdown()


def test_blocking_get_wakes_when_another_process_puts(ray_start):
    q = Queue()

    @ember.remote
    def late_put(queue):
        time.sleep(0.3)
        queue.put("hello")

    ref = late_put.remote(q)
    assert q.get(timeout=30) == "hello"
    ember.get(ref)
    q.shutdown()


def test_batches_are_all_or_nothing(ray_start):
    q = Queue(maxsize=3)
    with pytest.raises(Full):
        q.put_nowait_batch([1, 2, 3, 4])
    assert q.qsize() == 0
    q.put_nowait_batch([1, 2, 3])
    with pytest.raises(Empty):
        q.get_nowait_batch(4)
    assert q.get_nowait_batch(2) == [1, 2]
    assert q.get_nowait_batch(1) == [3]
    q.shutdown()


def test_async_variants(ray_start):
    q = Queue()

    async def main():
        await q.put_async("a")
        await q.put_async("b", block=False)
        first = await q.get_async()
        second = await q.get_async(block=False)
        with pytest.raises(Empty):
            await q.get_async(timeout=0.1)
        return first, second

    assert asyncio.run(main()) == ("a", "b")
    q.shutdown()


def test_shutdown_kills_the_actor(ray_start):
    q = Queue()
    actor = q.actor
    q.shutdown()
    with pytest.raises(ember.exceptions.RayActorError):
        ember.get(actor.qsize.remote(), timeout=30)
