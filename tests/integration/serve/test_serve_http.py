"""Serve HTTP features through the proxy: streaming (chunked, SSE, handles), client disconnect,
@serve.batch, FastAPI ingress, back-pressure (503)."""
from __future__ import annotations

import asyncio
import concurrent.futures

import httpx
import pytest
from fastapi import FastAPI
from starlette.responses import StreamingResponse

from ember import serve
from ember.testing import wait_for as _wait_for


def wait_for(cond, timeout=30.0, what="condition"):
    return _wait_for(cond, timeout_s=timeout, interval_s=0.05, what=what)


@pytest.fixture(scope="module")
def url(serve_url):
    return serve_url


@serve.deployment
class Streamer:
    def __init__(self):
        self.go = asyncio.Event()
        self.cancelled = False

    def release(self):
        self.go.set()

    def was_cancelled(self):
        return self.cancelled

    async def forever(self):
        try:
            while True:
                yield "tick "
                await asyncio.sleep(0.05)
        finally:
            self.cancelled = True

    async def tokens(self):
        yield "first "
        await self.go.wait()  # the rest is only produced once the client has the first chunk
        self.go.clear()  # (the next call waits again: chunks produced at once may be coalesced)
        for w in ("second ", "third"):
            yield w

    async def __call__(self, request):
        kind = request.query_params.get("kind")
        if kind == "sse":
            async def events():
                for i in range(3):
                    yield f"data: token{i}\n\n"
            return StreamingResponse(events(), media_type="text/event-stream")
        if kind == "slow":
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.cancelled = True
                raise
            return "done"
        if kind == "gen":
            return self.tokens()
        if kind == "forever":
            return self.forever()
        return StreamingResponse(self.tokens(), media_type="text/plain")


def test_streaming_first_chunk_before_last_is_produced(url):
    h = serve.run(Streamer.bind(), name="stream", route_prefix="/stream")
    with httpx.Client(timeout=30) as c:
        for kind in ("resp", "gen"):
            with c.stream("GET", url + "/stream", params={"kind": kind}) as r:
                assert r.status_code == 200
                it = r.iter_raw()
                assert next(it) == b"first "  # arrives while the generator is still blocked
                h.release.remote().result()
                assert b"".join(it) == b"second third"
        r = c.get(url + "/stream", params={"kind": "sse"})
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.text == "data: token0\n\ndata: token1\n\ndata: token2\n\n"
    gen = h.options(stream=True).tokens.remote()
    assert next(gen) == "first "  # while the generator is still blocked
    h.release.remote().result()
    assert list(gen) == ["second ", "third"]


def test_client_disconnect_cancels_the_request(url):
    h = serve.run(Streamer.bind(), name="stream", route_prefix="/stream")
    with httpx.Client(timeout=0.5) as c:
        with pytest.raises(httpx.ReadTimeout):
            c.get(url + "/stream", params={"kind": "slow"})
    wait_for(lambda: h.was_cancelled.remote().result(), 10, "the replica to see the cancellation")
    serve.delete("stream")


def test_client_disconnect_stops_an_endless_stream(url):
    h = serve.run(Streamer.bind(), name="stream2", route_prefix="/stream2")
    with httpx.Client(timeout=30) as c:
        with c.stream("GET", url + "/stream2", params={"kind": "forever"}) as r:
            assert next(r.iter_raw()).startswith(b"tick")
    # the connection is closed: the replica's generator is closed too (its finally ran)
    wait_for(lambda: h.was_cancelled.remote().result(), 10, "the generator to be closed")
    serve.delete("stream2")


@serve.deployment(max_ongoing_requests=16)
class Batched:
    def __init__(self):
        self.sizes = []

    @serve.batch(max_batch_size=4, batch_wait_timeout_s=0.2)
    async def double(self, xs: list[int]) -> list[int]:
        self.sizes.append(len(xs))
        return [2 * x for x in xs]

    async def __call__(self, request):
        return await self.double(int(request.query_params["x"]))

    def batch_sizes(self):
        return self.sizes


def test_batch(url):
    h = serve.run(Batched.bind(), name="batch", route_prefix="/batch")
    with concurrent.futures.ThreadPoolExecutor(8) as pool, httpx.Client(timeout=30) as c:
        got = list(pool.map(lambda i: c.get(url + "/batch", params={"x": i}).json(), range(8)))
    assert got == [2 * i for i in range(8)]
    sizes = h.batch_sizes.remote().result()
    assert sum(sizes) == 8 and max(sizes) > 1 and max(sizes) <= 4
    serve.delete("batch")


api = FastAPI()


@serve.deployment
@serve.ingress(api)
class Api:
    def __init__(self, greeting: str):
        self.greeting = greeting

    @api.get("/hello/{name}")
    def hello(self, name: str, punct: str = "!"):
        return {"msg": f"{self.greeting}, {name}{punct}"}

    @api.post("/items")
    async def create(self, item: dict):
        return {"created": item}


def test_fastapi_ingress(url):
    serve.run(Api.bind("Hi"), name="fa", route_prefix="/api")
    with httpx.Client(timeout=30) as c:
        assert c.get(url + "/api/hello/bob", params={"punct": "?"}).json() == {"msg": "Hi, bob?"}
        assert c.post(url + "/api/items", json={"a": 1}).json() == {"created": {"a": 1}}
        assert c.get(url + "/api/nope").status_code == 404
        assert c.post(url + "/api/items", content=b"{bad").status_code == 422
        assert c.get(url + "/other").status_code == 404
    serve.delete("fa")


@serve.deployment(max_ongoing_requests=1, max_queued_requests=1)
class Slow:
    async def __call__(self, request):
        await asyncio.sleep(1.0)
        return "ok"


def test_backpressure_503(url):
    serve.run(Slow.bind(), name="slow", route_prefix="/slow")

    async def burst():
        async with httpx.AsyncClient(timeout=30) as c:
            return await asyncio.gather(*[c.get(url + "/slow") for _ in range(5)])

    codes = sorted(r.status_code for r in asyncio.run(burst()))
    assert codes.count(200) >= 2 and codes.count(503) >= 1, codes
    assert set(codes) <= {200, 503}
    serve.delete("slow")


@serve.deployment
class Sizer:
    async def __call__(self, request):
        import hashlib

        body = await request.body()
        return {"n": len(body), "sha": hashlib.sha256(body).hexdigest(), "hdr": len(request.headers.get("x-pad", ""))}


def test_bodies_and_headers_of_every_size(url):
    """The proxy runs its HTTP requests on the core worker's loop, where a call's arguments
    must fit inline; bigger bodies (or headers) are submitted from a thread and put into the
    object store: every size arrives whole, streams and small calls keep working meanwhile."""
    import hashlib
    import os

    serve.run(Sizer.bind(), name="sizer", route_prefix="/sizer")
    with httpx.Client(timeout=60) as c:
        for n in (0, 10, 40 * 1024, 60 * 1024, 100 * 1024, 101 * 1024, 3 * 2**20):
            body = os.urandom(n)
            r = c.post(url + "/sizer", content=body)
            assert r.status_code == 200, (n, r.text)
            assert r.json() == {"n": n, "sha": hashlib.sha256(body).hexdigest(), "hdr": 0}
        pad = "p" * (60 * 1024)  # big headers with a small body also leave the loop
        r = c.post(url + "/sizer", content=b"x", headers={"x-pad": pad})
        assert r.status_code == 200 and r.json()["hdr"] == len(pad)
        assert c.get(url + "/sizer").json()["n"] == 0
    serve.delete("sizer")
