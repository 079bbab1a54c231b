"""Streamed replies in batches (serve/_private/streams.py, stream_channel.py): the pump alone,
then through the proxy and through handles — chunks coalesce only when they would otherwise
queue, order and content are kept, errors, disconnects and a dead replica end the stream."""
from __future__ import annotations

import asyncio
import time

import httpx
import pytest

import ember
from ember import serve
from ember.serve._private.streams import StreamMux, StreamPump


# ---------------------------------------------------------------- the pump alone (no sockets)
def test_pump_batches_what_queued_and_never_holds_the_first():
    async def go():
        gate = asyncio.Event()

        async def gen():
            yield 0
            await gate.wait()
            for i in range(1, 50):
                yield i

        p = StreamPump(gen())
        assert await p.take() == ([0], False)  # alone: nothing else was produced
        gate.set()
        await asyncio.sleep(0.05)  # 49 items produced while nobody pulled
        items, done = await p.take()
        assert items == list(range(1, 50)) and done
        assert p.done
    asyncio.run(go())


def test_pump_error_after_items_and_close():
    async def go():
        closed = []

        async def bad():
            try:
                yield "a"
                yield "b"
                raise KeyError("boom")
            finally:
                closed.append(True)

        p = StreamPump(bad())
        await asyncio.sleep(0.01)
        assert await p.take() == (["a", "b"], False)  # the items before the error first
        with pytest.raises(KeyError):
            await p.take()
        assert closed

        async def endless():
            try:
                while True:
                    yield 1
                    await asyncio.sleep(0.001)
            finally:
                closed.append("endless")

        q = StreamPump(endless())
        await q.take()
        q.close()
        await asyncio.sleep(0.01)
        assert "endless" in closed and (await q.take()) == ([], True)
    asyncio.run(go())


def test_pump_backpressure_and_timeout():
    async def go():
        produced = []

        async def fast():
            for i in range(100):
                produced.append(i)
                yield i

        p = StreamPump(fast(), max_buffered=10, idle_timeout_s=0.2)
        await asyncio.sleep(0.05)
        assert len(produced) == 10  # stopped reading at max_buffered
        items, _ = await p.take()
        assert items == list(range(10))
        await asyncio.sleep(0.5)  # nobody pulls: the pump gives up
        await p.take()
        with pytest.raises(TimeoutError, match="nobody pulled"):
            await p.take()
    asyncio.run(go())


def test_mux_one_poll_brings_every_ready_stream_and_never_holds_the_first():
    async def go():
        gates = {"a": asyncio.Event(), "b": asyncio.Event()}

        def gen(name, fail=False):
            async def g():
                yield f"{name}0".encode()
                await gates[name].wait()
                yield f"{name}1".encode()
                yield f"{name}2".encode()
                if fail:
                    raise ValueError("boom")
            return g()

        mux = StreamMux()
        mux.add("a", StreamPump(gen("a")))
        mux.add("b", StreamPump(gen("b", fail=True)))
        await asyncio.sleep(0.02)  # both first items ready before the poll: one poll has both
        assert sorted(await mux.poll(1)) == [("a", b"a0", False, None), ("b", b"b0", False, None)]
        t0 = time.monotonic()
        poll = asyncio.ensure_future(mux.poll(5))
        await asyncio.sleep(0.05)
        assert not poll.done()  # nothing ready: the poll waits
        gates["a"].set()
        assert await poll == [("a", b"a1a2", True, None)]  # a's burst, joined; a is over
        assert time.monotonic() - t0 < 1 and len(mux) == 1
        gates["b"].set()
        assert await mux.poll(1) == [("b", b"b1b2", False, None), ("b", b"", True, "ValueError: boom")]
        assert len(mux) == 0 and await mux.poll(0.05) == []  # empty: answers after the timeout
    asyncio.run(go())


# ---------------------------------------------------------------- through the proxy
@serve.deployment(max_ongoing_requests=32)
class Chunks:
    async def __call__(self, request):
        from starlette.responses import StreamingResponse

        kind = request.query_params.get("kind")
        n = int(request.query_params.get("n", "5"))

        async def burst():
            for i in range(n):
                yield f"{i:04d}\n"  # no await: all produced at once

        async def paced():
            for i in range(n):
                yield f"{i:04d}\n"
                await asyncio.sleep(0.1)

        async def failing():
            yield "0000\n"
            yield "0001\n"
            raise RuntimeError("generator failed")

        gen = {"burst": burst, "paced": paced, "failing": failing}[kind]()
        return StreamingResponse(gen, media_type="text/plain")

    async def items(self, n):
        for i in range(n):
            yield {"i": i}

    def actor_name(self):
        ctx = serve.get_replica_context()
        return f"SERVE_REPLICA::{ctx.app_name}#{ctx.deployment}#{ctx.replica_id}"


@pytest.fixture(scope="module")
def url(serve_url):
    serve.run(Chunks.bind(), name="chunks", route_prefix="/chunks")
    yield serve_url
    serve.delete("chunks")


def test_a_burst_is_coalesced_and_complete(url):
    with httpx.Client(timeout=30) as c:
        with c.stream("GET", url + "/chunks", params={"kind": "burst", "n": 2000}) as r:
            parts = list(r.iter_raw())
    body = b"".join(parts).decode()
    assert body == "".join(f"{i:04d}\n" for i in range(2000))
    assert len(parts) < 200  # 2,000 chunks produced at once travel in a few batches


def test_paced_chunks_arrive_one_by_one_as_produced(url):
    with httpx.Client(timeout=30) as c:
        with c.stream("GET", url + "/chunks", params={"kind": "paced", "n": 5}) as r:
            t0 = time.monotonic()
            seen = [(time.monotonic() - t0, part) for part in r.iter_raw()]
    assert [p for _, p in seen] == [f"{i:04d}\n".encode() for i in range(5)]  # nothing waited to coalesce
    gaps = [later - earlier for (earlier, _), (later, _) in zip(seen, seen[1:], strict=False)]
    assert min(gaps) > 0.05 and seen[-1][0] > 0.3  # each sent as produced, none held for the next


def test_concurrent_streams_share_the_polls_and_each_gets_its_own_body(url):
    async def one(c, i):
        n = 3 + i % 4
        kind = "paced" if i % 2 else "burst"
        r = await c.get(url + "/chunks", params={"kind": kind, "n": n})
        return r.status_code, r.text, "".join(f"{k:04d}\n" for k in range(n))

    async def go():
        async with httpx.AsyncClient(timeout=30) as c:
            return await asyncio.gather(*[one(c, i) for i in range(24)])
    for status, text, want in asyncio.run(go()):
        assert status == 200 and text == want


def test_a_failing_generator_cuts_the_body_and_the_replica_keeps_serving(url):
    with httpx.Client(timeout=30) as c:
        got = b""
        with pytest.raises(httpx.RemoteProtocolError):
            with c.stream("GET", url + "/chunks", params={"kind": "failing"}) as r:
                for part in r.iter_raw():
                    got += part
        assert got == b"0000\n0001\n"  # what was produced, then an incomplete body (not a clean end)
        assert c.get(url + "/chunks", params={"kind": "burst", "n": 3}).text == "0000\n0001\n0002\n"


def test_http_bodies_are_pushed_on_the_proxy_channel_not_polled(url):
    h = serve.get_app_handle("chunks")
    replica = ember.get_actor(h.actor_name.remote().result(), namespace="serve")
    before = ember.get(replica.stream_stats.remote())

    async def go():
        async with httpx.AsyncClient(timeout=30) as c:
            return await asyncio.gather(*[c.get(url + "/chunks", params={"kind": "paced", "n": 4})
                                          for _ in range(8)])
    assert all(r.text == "0000\n0001\n0002\n0003\n" for r in asyncio.run(go()))
    after = ember.get(replica.stream_stats.remote())
    assert after["stream_poll"] == before["stream_poll"] and after["stream_next"] == before["stream_next"]
    assert after["channels"] == 1  # one connection from the proxy, kept between requests
    # sends carry the chunks after each first and each end, batched across streams when they
    # coincide; a slow machine may split them, never send more than one per chunk or end
    assert 0 < after["channel_pushes"] - before["channel_pushes"] <= 8 * 5


def test_a_user_deployment_runs_on_its_actor_loop(url):
    """A user's deployment may block in its async code: its replica stays on the actor's own
    loop, never the worker's core loop (serve/_private/core_loop.py)."""
    h = serve.get_app_handle("chunks")
    replica = ember.get_actor(h.actor_name.remote().result(), namespace="serve")
    assert ember.get(replica.stream_stats.remote())["thread"] == "ember-actor-loop"


def test_handle_stream_items_in_order(url):
    h = serve.get_app_handle("chunks")
    assert list(h.options(stream=True).items.remote(3000)) == [{"i": i} for i in range(3000)]

    async def agen():
        return [x async for x in h.options(stream=True).items.remote(10)]
    assert asyncio.run(agen()) == [{"i": i} for i in range(10)]


@serve.deployment
class Endless:
    async def __call__(self, request):
        from starlette.responses import StreamingResponse

        n = int(request.query_params.get("n", "0"))

        async def gen():
            i = 0
            while not n or i < n:
                yield f"{i:04d}\n"
                i += 1
                await asyncio.sleep(0.02)
        return StreamingResponse(gen(), media_type="text/plain")

    def actor_name(self):
        ctx = serve.get_replica_context()
        return f"SERVE_REPLICA::{ctx.app_name}#{ctx.deployment}#{ctx.replica_id}"


def test_a_replica_that_dies_mid_stream_cuts_it_and_the_next_stream_uses_its_successor(url):
    h = serve.run(Endless.bind(), name="endless", route_prefix="/endless")
    try:
        first = h.actor_name.remote().result()
        with httpx.Client(timeout=30) as c:
            got = b""
            t0 = time.monotonic()
            with pytest.raises(httpx.RemoteProtocolError):  # the body is cut, not ended cleanly
                with c.stream("GET", url + "/endless") as r:
                    for part in r.iter_raw():
                        got += part
                        if len(got) >= 50 and first is not None:
                            ember.kill(ember.get_actor(first, namespace="serve"))
                            first = None
                        assert time.monotonic() - t0 < 20, "the stream was not cut"
            assert got.startswith(b"0000\n0001\n")
            deadline = time.monotonic() + 30
            while True:  # the controller replaces the replica; the proxy opens a new channel
                try:
                    r = c.get(url + "/endless", params={"n": 5})
                    if r.status_code == 200 and r.text == "".join(f"{i:04d}\n" for i in range(5)):
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "no successor replica served the stream"
                time.sleep(0.2)
    finally:
        serve.delete("endless")
