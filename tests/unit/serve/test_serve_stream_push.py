"""The push protocol of Serve's StreamPump (serve/_private/streams.py): a source with
`_ember_attach(put, end)` fills the pump's buffer from callbacks (no task per item), a
StreamMux sees it like any stream, `close()` detaches it, and a StreamingResponse over one is
passed to the replica as it is (http_util.to_reply), without sockets."""
from __future__ import annotations

import asyncio
from typing import Any, Callable

from starlette.responses import StreamingResponse

from ember.serve._private import http_util
from ember.serve._private.streams import StreamMux, StreamPump


class FakeSource:
    """A push source: `feed()` plays the producer's per-step hand-off."""

    def __init__(self) -> None:
        self.put: Callable[[Any], None] | None = None
        self.end: Callable[[BaseException | None], None] | None = None
        self.detached = 0

    def __aiter__(self) -> FakeSource:
        return self

    async def __anext__(self) -> Any:
        raise AssertionError("a push source attached to a pump is never iterated")

    def _ember_attach(self, put: Callable[[Any], None], end: Callable[[BaseException | None], None]) -> None:
        self.put, self.end = put, end

    def _ember_detach(self) -> None:
        self.detached += 1


def test_pump_takes_pushed_items_without_a_task():
    async def go():
        src = FakeSource()
        tasks0 = len(asyncio.all_tasks())
        pump = StreamPump(src)  # type: ignore[arg-type]
        assert len(asyncio.all_tasks()) == tasks0  # no reader task
        assert src.put is not None and src.end is not None
        waiting = asyncio.ensure_future(pump.take(5))
        await asyncio.sleep(0)
        src.put(b"a")  # wakes the waiting take at once
        assert await waiting == ([b"a"], False)
        src.put(b"b")
        src.put(b"c")
        assert pump.take_ready() == ([b"b", b"c"], False)
        src.put(b"d")
        src.end(None)
        assert await pump.take() == ([b"d"], True)
        assert pump.done
        src.put(b"late")  # after the end: dropped
        assert pump.take_ready() == ([], True)
        assert src.detached == 0  # it ended by itself: nothing to detach

    asyncio.run(go())


def test_pump_close_detaches_the_source_once_and_an_error_reaches_the_taker():
    async def go():
        src = FakeSource()
        pump = StreamPump(src)  # type: ignore[arg-type]
        src.put(b"x")
        pump.close()
        pump.close()
        assert src.detached == 1 and pump.done
        src2 = FakeSource()
        pump2 = StreamPump(src2)  # type: ignore[arg-type]
        src2.put("one")
        src2.end(RuntimeError("engine failed"))
        assert pump2.take_ready() == (["one"], False)
        try:
            pump2.take_ready()
        except RuntimeError as e:
            assert "engine failed" in str(e)
        else:
            raise AssertionError("the source's error was not raised")

    asyncio.run(go())


def test_mux_polls_every_stream_a_step_filled_in_one_wake_up():
    async def go():
        mux = StreamMux()
        srcs = [FakeSource() for _ in range(16)]
        for i, s in enumerate(srcs):
            mux.add(f"s{i}", StreamPump(s))  # type: ignore[arg-type]
        poll = asyncio.ensure_future(mux.poll(5))
        await asyncio.sleep(0)

        def step(k: int, last: bool) -> None:  # one engine step's hand-off: every stream at once
            for i, s in enumerate(srcs):
                assert s.put is not None and s.end is not None
                s.put(f"data: {i}.{k}\n\n".encode())
                if last:
                    s.end(None)

        asyncio.get_running_loop().call_soon(step, 0, False)
        out = await poll
        assert sorted(sid for sid, *_ in out) == sorted(f"s{i}" for i in range(16))
        assert all(data == f"data: {sid[1:]}.0\n\n".encode() and not done for sid, data, done, _ in out)
        step(1, True)
        out = await mux.poll(5)
        assert len(out) == 16 and all(done for _, _, done, _ in out) and len(mux) == 0

    asyncio.run(go())


def test_to_reply_passes_a_push_source_through():
    src = FakeSource()
    head, rest = http_util.to_reply(StreamingResponse(src, media_type="text/event-stream"))
    assert head[0] == "stream" and head[1] == 200 and rest is src

    async def gen():
        yield "text"

    _, rest2 = http_util.to_reply(StreamingResponse(gen()))
    assert rest2 is not None and not hasattr(rest2, "_ember_attach")
