"""The stream channel (serve/_private/stream_channel.py) on a real loopback socket, between a real
ServeReplica built in this process (no cluster) and the caller's ChannelClient: the first chunk
is never held back, chunks coalesce only when they queue, a caller that does not read stops the
pushes (back-pressure) and gets everything once it reads, a caller that goes away frees its
streams (the user's generator is closed), a connection without the secret gets nothing, and
without a channel (mutual TLS) the same group is served by stream_poll calls."""
from __future__ import annotations

import asyncio
import threading
import time

import cloudpickle

from ember.serve._private import stream_channel as sc
from ember.serve._private.replica import ServeReplica

_SCOPE = {"type": "http", "method": "GET", "path": "/", "raw_path": b"/", "root_path": "",
          "query_string": b"", "headers": [], "http_version": "1.1", "scheme": "http"}
CLOSED: list[str] = []  # what the generators' finally blocks saw (same process)


class Gen:
    async def __call__(self, request):
        from starlette.responses import StreamingResponse

        kind = request.query_params["kind"]

        async def late_then_slow():  # the first chunk misses the reply head, the next is 0.6 s later
            await asyncio.sleep(0.2)
            yield "A"
            await asyncio.sleep(0.6)
            yield "B"

        async def burst():
            await asyncio.sleep(0.2)
            for i in range(500):
                yield f"{i:04d}\n"

        async def endless():
            try:
                while True:
                    yield "x"
                    await asyncio.sleep(0.01)
            finally:
                CLOSED.append("endless")

        async def big():  # 300 x 64 KiB, one a loop iteration: far past the channel's high-water mark
            await asyncio.sleep(0.1)
            for i in range(300):
                yield bytes([i % 251]) * 65536
                await asyncio.sleep(0)

        async def paced():  # a token generator's pace
            for i in range(20):
                yield f"{i:02d}"
                await asyncio.sleep(0.005)

        async def mixed():  # str, bytes and JSON items, then one that is none of them
            try:
                await asyncio.sleep(0.2)
                yield "a"
                yield b"b"
                yield {"c": 1}
                await asyncio.sleep(0.05)
                yield object()
                yield "never"
            finally:
                CLOSED.append("mixed")

        return StreamingResponse({"late": late_then_slow, "burst": burst, "endless": endless,
                                  "big": big, "paced": paced, "mixed": mixed}[kind]())


class Items:
    """A deployment with handle-stream methods."""

    async def unpicklable(self):
        yield "fine"
        await asyncio.sleep(0.3)
        yield threading.Lock()  # nothing pickles a lock

    async def forever(self):
        try:
            while True:
                yield 1
                await asyncio.sleep(0.01)
        finally:
            CLOSED.append("forever")


def _replica() -> ServeReplica:
    return ServeReplica("app", "Gen", "r1", cloudpickle.dumps(Gen), (), {}, None)


class _Caller:
    """What arrived on the channel, with arrival times."""

    def __init__(self) -> None:
        self.got: list[tuple[float, str, bytes, bool, str | None]] = []
        self.deliveries = 0
        self.lost = asyncio.get_running_loop().create_future()
        self.t0 = time.monotonic()

    def deliver(self, entries: list[sc.Entry]) -> None:
        self.deliveries += 1
        now = time.monotonic() - self.t0
        self.got += [(now, sid, data, done, err) for sid, data, done, err in entries]

    def on_lost(self, exc: BaseException | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)

    def body(self, sid: str) -> bytes:
        return b"".join(d for _, s, d, _, _ in self.got if s == sid)

    def done(self, sid: str) -> bool:
        return any(s == sid and done for _, s, _, done, _ in self.got)


async def _open(rep: ServeReplica, group: str = "proxy-c0") -> tuple[_Caller, sc.ChannelClient]:
    host, port, secret = await rep.stream_channel()
    caller = _Caller()
    conn = await sc.connect(host, port, secret, group, caller.deliver, caller.on_lost)
    await asyncio.sleep(0.05)  # the hello is read
    return caller, conn


async def _start(rep: ServeReplica, rid: str, kind: str, group: str = "proxy-c0") -> tuple:
    scope = dict(_SCOPE, query_string=f"kind={kind}".encode())
    return await rep.handle_http(rid, scope, b"", group)


async def _until(cond, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_the_first_chunk_is_pushed_at_once_and_never_waits_for_the_next():
    async def go():
        rep = _replica()
        caller, conn = await _open(rep)
        t0 = time.monotonic()
        reply = await _start(rep, "s1", "late")
        assert reply[0] == "stream" and reply[3] == b"" and not reply[4]  # not ready within 100 ms
        await _until(lambda: caller.done("s1"))
        arrivals = {data: t - (t0 - caller.t0) for t, sid, data, _, _ in caller.got if data}
        assert arrivals[b"A"] < 0.45  # produced at ~0.2 s: sent at once, not held for B
        assert arrivals[b"B"] > 0.7
        assert caller.body("s1") == b"AB"
        assert rep.stream_stats()["open"] == 0 and rep.stream_stats()["stream_poll"] == 0
        conn.close()
        await asyncio.wait_for(caller.lost, 5)
        await rep._channel.aclose()
    asyncio.run(go())


def test_chunks_produced_together_go_in_few_sends_in_order():
    async def go():
        rep = _replica()
        caller, conn = await _open(rep)
        await asyncio.gather(*[_start(rep, f"b{i}", "burst") for i in range(4)])
        await _until(lambda: all(caller.done(f"b{i}") for i in range(4)))
        want = "".join(f"{i:04d}\n" for i in range(500)).encode()
        assert all(caller.body(f"b{i}") == want for i in range(4))
        assert rep.stream_stats()["channel_pushes"] < 40  # 2,000 chunks, queued while a send was made
        conn.close()
        await asyncio.wait_for(caller.lost, 5)
        await rep._channel.aclose()
    asyncio.run(go())


def test_a_caller_that_goes_away_frees_its_streams_and_the_generators_close():
    async def go():
        rep = _replica()
        caller, conn = await _open(rep)
        other, other_conn = await _open(rep, "proxy-c1")
        CLOSED.clear()
        await _start(rep, "e1", "endless")
        await _start(rep, "e2", "endless", group="proxy-c1")
        await _until(lambda: len(caller.body("e1")) > 5 and len(other.body("e2")) > 5)
        assert rep.stream_stats()["open"] == 2 and rep.stream_stats()["channels"] == 2
        conn.close()  # the first caller goes away (as a proxy that exits)
        await _until(lambda: rep.stream_stats()["open"] == 1)
        assert CLOSED == ["endless"] and rep.stream_stats()["channels"] == 1
        n = len(other.body("e2"))
        await _until(lambda: len(other.body("e2")) > n + 3)  # the other caller's stream goes on
        assert rep.cancel("e2")  # as the proxy does when its HTTP client leaves
        await _until(lambda: rep.stream_stats()["open"] == 0 and len(CLOSED) == 2)
        other_conn.close()
        await asyncio.wait_for(other.lost, 5)
        await rep._channel.aclose()
    asyncio.run(go())


def test_a_connection_without_the_secret_or_for_a_connected_group_is_closed_and_gets_nothing():
    async def go():
        rep = _replica()
        host, port, secret = await rep.stream_channel()
        await _start(rep, "s1", "endless", group="g")
        caller, conn = await _open(rep, "g")  # the group's caller
        for bad in (sc.hello("0" * len(secret), "g"), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                    sc.hello(secret, "g")):  # the last: a second connection for a connected group
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(bad)
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing sent
            writer.close()
        assert rep.stream_stats()["open"] == 1 and rep.stream_stats()["channels"] == 1  # untouched
        n = len(caller.body("s1"))
        await _until(lambda: len(caller.body("s1")) > n + 3)  # its caller still gets it
        rep.cancel("s1")
        await _until(lambda: rep.stream_stats()["open"] == 0)
        conn.close()
        await asyncio.wait_for(caller.lost, 5)
        await rep._channel.aclose()
    asyncio.run(go())


def test_a_caller_that_does_not_read_stops_the_pushes_and_gets_everything_once_it_reads():
    async def go():
        rep = _replica()
        caller, conn = await _open(rep)
        assert conn.transport is not None
        conn.transport.pause_reading()  # the caller's socket fills up
        await _start(rep, "big", "big")
        await asyncio.sleep(0.5)
        pushes = rep.stream_stats()["channel_pushes"]
        await asyncio.sleep(0.3)
        assert rep.stream_stats()["channel_pushes"] == pushes  # stopped: past the high-water mark
        assert not caller.done("big") and rep.stream_stats()["open"] == 1
        conn.transport.resume_reading()
        await _until(lambda: caller.done("big"))
        assert caller.body("big") == b"".join(bytes([i % 251]) * 65536 for i in range(300))
        assert rep.stream_stats()["open"] == 0
        conn.close()
        await asyncio.wait_for(caller.lost, 5)
        await rep._channel.aclose()
    asyncio.run(go())


def test_each_paced_chunk_is_pushed_on_its_own_without_a_poll():
    """Chunks 5 ms apart each leave in their own send as soon as produced (nothing waits for a
    batch to fill), and the replica serves no stream_poll call for them."""
    async def go():
        rep = _replica()
        caller, conn = await _open(rep)
        reply = await _start(rep, "p", "paced")
        assert reply[3] == b"00"  # the first chunk rides with the head
        await _until(lambda: caller.done("p"))
        assert reply[3] + caller.body("p") == "".join(f"{i:02d}" for i in range(20)).encode()
        stats = rep.stream_stats()
        assert stats["stream_poll"] == 0 and stats["stream_next"] == 0
        assert stats["channel_pushes"] >= 15  # 19 chunks (and the end) 5 ms apart: about one send each
        conn.close()
        await asyncio.wait_for(caller.lost, 5)
        await rep._channel.aclose()
    asyncio.run(go())


def test_items_become_bytes_in_the_pump_and_one_that_cannot_ends_the_stream():
    """The pump reads the user's generator itself (no wrapper) and converts each item: str as
    UTF-8, bytes as they are, anything else as JSON; an item JSON cannot encode ends the stream
    with that error after the items before it, and the generator is closed."""
    async def go():
        rep = _replica()
        caller, conn = await _open(rep)
        CLOSED.clear()
        await _start(rep, "m", "mixed")
        await _until(lambda: caller.done("m"))
        assert caller.body("m") == b'ab{"c": 1}'
        err = [e for _, sid, _, _, e in caller.got if sid == "m" and e]
        assert err and err[0].startswith("TypeError:") and "JSON serializable" in err[0]
        await _until(lambda: CLOSED == ["mixed"])
        assert rep.stream_stats()["open"] == 0
        conn.close()
        await asyncio.wait_for(caller.lost, 5)
        await rep._channel.aclose()
    asyncio.run(go())


def test_without_a_channel_the_group_is_polled_with_stream_poll():
    """The fallback under mutual TLS (no channel offered): the caller's stream_poll(group) calls
    bring every stream's chunks, a poll waits while nothing is ready and answers as soon as one
    chunk is, and the streams end there."""
    async def go():
        rep = _replica()
        r1 = await _start(rep, "p1", "paced", group="tls")
        r2 = await _start(rep, "l1", "late", group="tls")
        bodies = {"p1": r1[3], "l1": r2[3]}
        done: set[str] = set()
        polls = 0
        while len(done) < 2:
            assert polls < 200, "the streams never ended"
            for sid, data, fin, err in await rep.stream_poll("tls", 5.0):
                assert err is None
                bodies[sid] += data
                if fin:
                    done.add(sid)
            polls += 1
        assert bodies == {"p1": "".join(f"{i:02d}" for i in range(20)).encode(), "l1": b"AB"}
        t0 = time.monotonic()
        assert await rep.stream_poll("tls", 0.2) == []  # nothing open: waits its timeout, empty
        assert time.monotonic() - t0 >= 0.15
        stats = rep.stream_stats()
        assert stats["open"] == 0 and stats["stream_poll"] == polls + 1 and stats["channel_pushes"] == 0
    asyncio.run(go())


def test_an_item_that_cannot_be_pickled_closes_the_channel_and_its_streams():
    """As when the caller goes away: the batch cannot be sent, so the connection closes (the
    caller's streams end with its loss) and the replica closes the group's generators."""
    async def go():
        rep = ServeReplica("app", "Items", "r1", cloudpickle.dumps(Items), (), {}, None)
        caller, conn = await _open(rep)
        CLOSED.clear()
        first = await rep.handle_request_streaming("u", "unpicklable", (), {}, "proxy-c0")
        assert first == (["fine"], False)
        await rep.handle_request_streaming("f", "forever", (), {}, "proxy-c0")
        await asyncio.wait_for(caller.lost, 5)  # the replica closed the connection
        await _until(lambda: rep.stream_stats()["open"] == 0 and CLOSED == ["forever"])
        assert rep.stream_stats()["channels"] == 0
        conn.close()
        await rep._channel.aclose()
    asyncio.run(go())
