"""Streamed handle calls from one deployment to another (the OpenAI app's ingress → LLMServer
path) ride the per-replica channel: the callee pushes every stream's items to the calling
process on one connection per process and replica (no stream_poll or stream_next call per
stream); order and content are kept; a user error reaches the caller after the items before it; a consumer that stops (or an HTTP client
that goes away) frees the stream and closes the callee's generator."""
from __future__ import annotations

import asyncio
import time

import httpx
import pytest

import ember
from ember import serve


def wait_for(cond, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@ember.remote
class Signal:
    """A gate: wait() returns once send() was called."""

    def __init__(self):
        self.ev = asyncio.Event()

    async def wait(self):
        await self.ev.wait()

    def send(self):
        self.ev.set()


@serve.deployment(max_ongoing_requests=64)
class Inner:
    def __init__(self):
        self.closed = 0

    async def items(self, n, gap_s):
        for i in range(n):
            yield {"i": i}
            await asyncio.sleep(gap_s)

    async def failing(self):
        yield "a"
        yield "b"
        raise KeyError("inner failed")

    async def forever(self):
        try:
            i = 0
            while True:
                yield i
                i += 1
                await asyncio.sleep(0.01)
        finally:
            self.closed += 1

    async def lines(self, n):
        for i in range(abs(n)):
            yield f"{i}\n"
            if i % 3 == 0:
                await asyncio.sleep(0.002)
        if n < 0:
            raise ValueError("no more lines")

    async def gated(self, signal):
        """Yields its first item, then produces the second only once signal is sent."""
        yield "first"
        await signal.wait.remote()
        yield "second"

    def closed_count(self):
        return self.closed

    def actor_name(self):
        ctx = serve.get_replica_context()
        return f"SERVE_REPLICA::{ctx.app_name}#{ctx.deployment}#{ctx.replica_id}"


@serve.deployment(max_ongoing_requests=64)
class Outer:
    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, request):
        from starlette.responses import StreamingResponse

        n = int(request.query_params.get("n", "10"))
        kind = request.query_params.get("kind", "items")
        if kind == "attached":  # the handle stream itself as the body: the pump attaches to it
            return StreamingResponse(self.inner.options(stream=True).lines.remote(n), media_type="text/plain")

        async def body():
            if kind == "forever":
                gen = self.inner.options(stream=True).forever.remote()
            else:
                gen = self.inner.options(stream=True).items.remote(n, 0.01)
            async for x in gen:
                yield f"{x}\n"
        return StreamingResponse(body(), media_type="text/plain")

    async def relay(self, n):
        async for x in self.inner.options(stream=True).items.remote(n, 0.0):
            yield x["i"]

    async def relay_failing(self):
        got = []
        try:
            async for x in self.inner.options(stream=True).failing.remote():
                got.append(x)
        except KeyError as e:  # the user's type (a RayTaskError that is also a KeyError, as Ray)
            got.append(("KeyError", "inner failed" in str(e)))
        return got

    async def gated_relay(self, signal):
        """The ingress case: the first item must come while the callee waits for signal."""
        gen = self.inner.options(stream=True).gated.remote(signal)
        first = await asyncio.wait_for(gen.__anext__(), 20)
        signal.send.remote()
        return [first] + [x async for x in gen]

    async def take(self, k):
        gen = self.inner.options(stream=True).forever.remote()
        out = []
        async for x in gen:
            out.append(x)
            if len(out) == k:
                break
        gen.cancel()
        return out


@pytest.fixture(scope="module")
def app(serve_url):
    h = serve.run(Outer.bind(Inner.bind()), name="relay", route_prefix="/relay")
    inner = serve.get_deployment_handle("Inner", "relay")
    replica = ember.get_actor(inner.actor_name.remote().result(), namespace="serve")
    yield serve_url, h, inner, replica
    serve.delete("relay")


def test_concurrent_relayed_streams_share_the_callee_channel(app):
    url, _, _, replica = app
    before = ember.get(replica.stream_stats.remote())

    async def one(c, i):
        n = 5 + i % 7
        r = await c.get(url + "/relay", params={"n": n})
        return r.status_code, r.text, "".join(f"{{'i': {k}}}\n" for k in range(n))

    async def go():
        async with httpx.AsyncClient(timeout=60) as c:
            return await asyncio.gather(*[one(c, i) for i in range(16)])
    results = asyncio.run(go())
    for status, text, want in results:
        assert status == 200 and text == want
    after = ember.get(replica.stream_stats.remote())
    items = sum(5 + i % 7 for i in range(16))
    assert after["stream_next"] == before["stream_next"]  # no per-stream pull
    assert after["stream_poll"] == before["stream_poll"]  # pushed on the channel, not polled
    pushes = after["channel_pushes"] - before["channel_pushes"]
    assert 0 < pushes < items  # items of several streams shared the sends
    assert after["channels"] >= 1
    wait_for(lambda: ember.get(replica.stream_stats.remote())["open"] == 0, what="every stream to end")


def test_handle_to_handle_burst_in_order(app):
    _, h, _, _ = app
    assert list(h.options(stream=True).relay.remote(2000)) == list(range(2000))


def test_user_error_reaches_the_caller_after_its_items(app):
    _, h, _, replica = app
    assert h.relay_failing.remote().result(timeout_s=30) == ["a", "b", ("KeyError", True)]
    wait_for(lambda: ember.get(replica.stream_stats.remote())["open"] == 0, what="the failed stream to end")


def test_consumer_that_stops_frees_the_callee_stream(app):
    _, h, inner, replica = app
    closed = inner.closed_count.remote().result()
    assert h.take.remote(3).result(timeout_s=30) == [0, 1, 2]
    wait_for(lambda: inner.closed_count.remote().result() == closed + 1, what="the callee's generator to close")
    wait_for(lambda: ember.get(replica.stream_stats.remote())["open"] == 0, what="the stream to be freed")


def test_http_disconnect_frees_the_relayed_stream(app):
    url, _, inner, replica = app
    closed = inner.closed_count.remote().result()
    with httpx.Client(timeout=30) as c:
        with c.stream("GET", url + "/relay", params={"kind": "forever"}) as r:
            it = r.iter_lines()
            assert [next(it) for _ in range(3)] == ["0", "1", "2"]
    wait_for(lambda: inner.closed_count.remote().result() == closed + 1, what="the callee's generator to close")
    wait_for(lambda: ember.get(replica.stream_stats.remote())["open"] == 0, what="the stream to be freed")


def test_first_item_arrives_before_the_second_is_produced(app):
    """A streamed handle call's first item is not held back until more come (or the stream
    ends): here the second is produced only after the caller got the first and sent the signal
    the callee's generator waits for, so a held-back first item would time out."""
    import concurrent.futures

    _, h, inner, _ = app
    signal = Signal.remote()
    gen = inner.options(stream=True).gated.remote(signal)
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        first = pool.submit(next, gen)  # from a driver thread
        try:
            assert first.result(timeout=20) == "first"
        finally:
            signal.send.remote()  # (a held-back first item comes now: the thread ends)
        assert list(gen) == ["second"]
    finally:
        pool.shutdown(wait=False)
    # the same from inside a replica (the OpenAI app's ingress -> LLMServer hop), async for
    assert h.gated_relay.remote(Signal.remote()).result(timeout_s=30) == ["first", "second"]


def test_a_handle_stream_as_the_http_body_is_attached_and_complete(app):
    """A deployment that returns another's handle stream as its StreamingResponse body: the
    replica's pump takes its batches as they arrive (push protocol), as bytes, in order; a
    failing stream cuts the body and the replicas keep serving."""
    url, _, _, replica = app
    with httpx.Client(timeout=30) as c:
        r = c.get(url + "/relay", params={"kind": "attached", "n": 300})
        assert r.status_code == 200 and r.text == "".join(f"{i}\n" for i in range(300))
        got = b""
        with pytest.raises(httpx.RemoteProtocolError):  # the lines produced, then a cut body
            with c.stream("GET", url + "/relay", params={"kind": "attached", "n": -3}) as r:
                for part in r.iter_raw():
                    got += part
        assert got == b"0\n1\n2\n"
        r = c.get(url + "/relay", params={"kind": "attached", "n": 5})
        assert r.text == "0\n1\n2\n3\n4\n"
    wait_for(lambda: ember.get(replica.stream_stats.remote())["open"] == 0, what="every stream to end")
