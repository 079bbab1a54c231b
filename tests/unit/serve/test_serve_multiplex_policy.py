"""Serve's model multiplexing without a cluster: the per-replica LRU cache behind
@serve.multiplexed (ModelCache), the decorator's argument checks, the header parsing, and the
router's model-aware choice (RouterCore.choose(model_id))."""
from __future__ import annotations

import asyncio
import random

import pytest

from ember import serve
from ember.serve._private.multiplex import ModelCache, model_id_from_headers
from ember.serve._private.router_core import GUESS_TTL_S, RouterCore


class Model:
    released: list[str] = []

    def __init__(self, mid: str) -> None:
        self.mid = mid

    def __del__(self) -> None:
        Model.released.append(self.mid)


def run(coro):
    return asyncio.run(coro)


def test_lru_evicts_least_recently_used_past_max_and_calls_del():
    loads: list[str] = []
    Model.released = []

    async def load(mid: str) -> Model:
        loads.append(mid)
        return Model(mid)

    async def main() -> ModelCache:
        c = ModelCache(load, 2)
        a = await c.get("a")
        await c.get("b")
        assert await c.get("a") is a  # cached; "a" is now the most recently used
        await c.get("c")  # evicts "b", the least recently used
        assert list(c.models) == ["a", "c"]
        await c.get("b")  # evicts "a"
        assert list(c.models) == ["c", "b"]
        return c

    c = run(main())
    assert loads == ["a", "b", "c", "b"]
    assert (c.loads, c.evictions) == (4, 2)
    assert Model.released[:2] == ["b", "a"]  # called at eviction, in LRU order


def test_async_del_is_awaited_at_eviction():
    released: list[str] = []

    class AsyncModel:
        def __init__(self, mid: str) -> None:
            self.mid = mid

        async def __del__(self) -> None:  # type: ignore[misc]
            await asyncio.sleep(0)
            released.append(self.mid)

    async def main() -> None:
        async def load(mid: str) -> AsyncModel:
            return AsyncModel(mid)

        c = ModelCache(load, 1)
        m = await c.get("x")
        await c.get("y")
        assert released == ["x"]
        del AsyncModel.__del__  # (Python's own call at collection would leave a coroutine unawaited)
        del m

    run(main())


def test_concurrent_gets_of_one_id_load_once():
    loads: list[str] = []

    async def main() -> list[object]:
        gate = asyncio.Event()

        async def load(mid: str) -> object:
            loads.append(mid)
            await gate.wait()
            return object()

        c = ModelCache(load, 3)
        tasks = [asyncio.ensure_future(c.get("m")) for _ in range(5)]
        await asyncio.sleep(0.01)
        assert c.ids() == {"m"}  # loading counts as held (the replica reports it early)
        gate.set()
        return await asyncio.gather(*tasks)

    got = run(main())
    assert loads == ["m"] and all(g is got[0] for g in got)


def test_unbounded_cache_and_failed_load():
    async def main() -> ModelCache:
        async def load(mid: str) -> str:
            if mid == "bad":
                raise RuntimeError("no such model")
            return mid.upper()

        c = ModelCache(load, -1)
        for i in range(10):
            await c.get(str(i))
        with pytest.raises(RuntimeError, match="no such model"):
            await c.get("bad")
        assert c.ids() == {str(i) for i in range(10)}  # nothing left behind by the failure
        with pytest.raises(TypeError, match="str"):
            await c.get(3)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="empty"):
            await c.get("")
        return c

    assert run(main()).evictions == 0


def test_on_change_reports_loading_loaded_and_evicted():
    seen: list[set[str]] = []

    async def main() -> None:
        c: ModelCache

        async def load(mid: str) -> str:
            return mid

        c = ModelCache(load, 1, on_change=lambda: seen.append(c.ids()))
        await c.get("a")
        await c.get("b")

    run(main())
    assert seen[0] == {"a"} and seen[-1] == {"b"}
    assert {"a", "b"} in seen  # "b" reported as loading before "a" is gone


def test_decorator_on_a_method_and_a_sync_function():
    class Dep:
        def __init__(self) -> None:
            self.loaded: list[str] = []

        @serve.multiplexed(max_num_models_per_replica=1)
        async def get_model(self, model_id: str) -> str:
            self.loaded.append(model_id)
            return f"{model_id}@{id(self)}"

    @serve.multiplexed
    def sync_loader(model_id: str) -> str:  # Ember runs a plain loader in a thread
        return model_id * 2

    async def main() -> None:
        d1, d2 = Dep(), Dep()
        assert await d1.get_model("a") == f"a@{id(d1)}"
        assert await d1.get_model("a") == f"a@{id(d1)}"
        await d2.get_model("a")  # each instance (replica) has its own cache
        await d1.get_model("b")
        await d1.get_model("a")
        assert d1.loaded == ["a", "b", "a"] and d2.loaded == ["a"]
        assert await sync_loader("x") == "xx"
        with pytest.raises(TypeError, match="model id only"):
            await d1.get_model("a", "b")  # type: ignore[call-arg]

    run(main())


def test_decorator_refuses_bad_arguments():
    with pytest.raises(ValueError, match="max_num_models_per_replica must be positive"):
        serve.multiplexed(max_num_models_per_replica=0)
    with pytest.raises(ValueError, match="max_num_models_per_replica"):
        serve.multiplexed(max_num_models_per_replica=-2)
    with pytest.raises(TypeError, match="max_num_models_per_replica must be an integer"):
        serve.multiplexed(max_num_models_per_replica="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="function or method"):
        serve.multiplexed(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="function or method"):
        @serve.multiplexed
        class NotAFunction:
            pass
    with pytest.raises(TypeError, match="takes 0 parameters"):
        @serve.multiplexed
        async def no_model_id() -> None:
            pass
    serve.multiplexed(max_num_models_per_replica=-1)  # -1: no bound, as Ray's


def test_model_id_from_headers():
    assert model_id_from_headers([(b"host", b"x"), (b"serve_multiplexed_model_id", b" m1 ")]) == "m1"
    assert model_id_from_headers([(b"Serve_Multiplexed_Model_Id", b"m2")]) == "m2"
    assert model_id_from_headers([(b"host", b"x")]) == ""


def test_router_prefers_replicas_holding_the_model():
    now = [0.0]
    core: RouterCore[str] = RouterCore(max_ongoing=2, rng=random.Random(0), clock=lambda: now[0])
    core.set_replicas(["r1", "r2", "r3"])
    core.set_models({"r2": ["m"]})
    for _ in range(2):
        assert core.choose("m") == "r2"  # even though r2 is the most loaded
    # r2 is full: a request for "m" waits for it (as Ray's, up to its matching deadline) ...
    deadline = core.matching_deadline()
    assert 1.0 <= deadline - now[0] <= 2.0
    assert core.choose("m") is None and core.choose("m", deadline) is None
    assert core.choose("other") in ("r1", "r3")  # ... while a model nobody holds goes elsewhere
    core.release("r2")
    assert core.choose("m", deadline) == "r2"  # room again where "m" is
    # past its deadline, a request for "m" goes to the replica with room holding the fewest models
    core.set_models({"r2": ["m"], "r1": ["x", "y"]})
    now[0] = deadline
    k = core.choose("m", deadline)
    assert k == "r3"
    core.release("r2")
    core.release("r2")
    core.release(k)
    # no report yet, but this router sent "m" to k: it counts as held there for a while
    assert core.holds(k, "m")
    now[0] += GUESS_TTL_S + 1
    assert not core.holds(k, "m")


def test_router_spreads_new_models_and_keeps_them_sticky():
    core: RouterCore[str] = RouterCore(max_ongoing=5, rng=random.Random(1))
    core.set_replicas(["r1", "r2"])
    first = {}
    for m in ("a", "b"):
        first[m] = core.choose(m)
        core.release(first[m])
    assert first["a"] != first["b"]  # idle replicas: a new model goes to the one holding fewer
    for _ in range(20):
        for m, k in first.items():
            assert core.choose(m) == k
            core.release(k)
    # a model with no holder and no id: plain power of two choices still works
    assert core.choose() in ("r1", "r2")


def test_router_queue_waits_for_the_holder_then_falls_back_without_blocking_others():
    from ember.serve._private.router import Router

    class NoController:  # the demand report's I/O: no controller in a unit test
        async def controller(self):
            raise RuntimeError("no controller here")

    async def main() -> None:
        r = Router("dep", NoController())  # type: ignore[arg-type]
        r.update({"max_ongoing": 1, "max_queued": -1, "replicas": {"r1": "h1", "r2": "h2"},
                  "models": {"r1": ["a"], "r2": ["b"]}})
        assert (await r.acquire(model_id="a"))[0] == "r1"
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        waiting_a = asyncio.ensure_future(r.acquire(model_id="a"))
        await asyncio.sleep(0.05)
        assert not waiting_a.done()  # r1 holds "a" and is full: wait for it, r2 has room
        # a request behind it, for a model r2 holds, is not held up by it
        assert (await asyncio.wait_for(r.acquire(model_id="b"), 1.0))[0] == "r2"
        r.release("r2")
        # past its matching deadline (1-2 s), "a" goes to the replica with room
        assert (await asyncio.wait_for(waiting_a, 3.0))[0] == "r2"
        assert 1.0 <= loop.time() - t0 <= 2.5

    run(main())
