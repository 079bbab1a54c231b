"""Streaming generators (num_returns="streaming") through the worker's one result pipeline:
plain tasks (sync and async generators), threaded and async actors, errors mid-stream, values
in shared memory and refs nested in items."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import exceptions as ex


def test_task_streams_items_in_order_including_large_ones(ray_start):
    @ember.remote(num_returns="streaming")
    def gen(n):
        for i in range(n):
            yield np.full(200_000, i) if i == 2 else i  # item 2 goes through shared memory

    out = [ember.get(r) for r in gen.remote(4)]
    assert out[:2] == [0, 1] and out[3] == 3
    assert out[2].shape == (200_000,) and int(out[2][0]) == 2


def test_async_generator_task_and_error_as_last_item(ray_start):
    @ember.remote(num_returns="streaming")
    def agen():
        async def inner():
            for i in range(3):
                yield i
            raise ValueError("stream broke after 3")
        return inner()

    refs = list(agen.remote())
    assert [ember.get(r) for r in refs[:3]] == [0, 1, 2] and len(refs) == 4
    with pytest.raises(ValueError, match="stream broke after 3"):
        ember.get(refs[3])


def test_a_non_generator_gives_a_clear_error(ray_start):
    @ember.remote(num_returns="streaming")
    def not_gen():
        return 5

    refs = list(not_gen.remote())
    with pytest.raises(ex.RayTaskError, match="not a generator"):
        ember.get(refs[0])
    assert ember.get(ember.put(1)) == 1  # the cluster keeps working


def test_async_actor_streams_and_nested_refs_survive(ray_start):
    @ember.remote
    class Tokens:
        async def stream(self, n):
            for i in range(n):
                yield f"tok{i}"

        async def with_refs(self):
            for i in range(2):
                yield [ember.put(i * 10)]

        async def plain(self, x):
            return [ember.put(x)]

    a = Tokens.remote()
    assert [ember.get(r) for r in a.stream.options(num_returns="streaming").remote(5)] == [
        f"tok{i}" for i in range(5)]
    items = [ember.get(r) for r in a.with_refs.options(num_returns="streaming").remote()]
    assert [ember.get(x[0]) for x in items] == [0, 10]  # refs owned by the actor, kept for us
    assert ember.get(ember.get(a.plain.remote(7))[0]) == 7


def test_threaded_actor_streams(ray_start):
    @ember.remote(max_concurrency=2)
    class Counter:
        def count(self, n):
            yield from range(n)

    c = Counter.remote()
    assert [ember.get(r) for r in c.count.options(num_returns="streaming").remote(4)] == [0, 1, 2, 3]


def test_unpicklable_item_becomes_an_error_item_and_the_stream_goes_on(ray_start):
    import threading

    @ember.remote(num_returns="streaming")
    def gen():
        yield 1
        yield threading.Lock()
        yield 3

    refs = list(gen.remote())
    assert ember.get(refs[0]) == 1 and ember.get(refs[2]) == 3
    with pytest.raises(ex.RayTaskError):
        ember.get(refs[1])
