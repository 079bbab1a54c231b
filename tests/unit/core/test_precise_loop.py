"""The async actors' event loop (ember/_private/execution/precise_loop.py): a timer wakes when it is due
instead of being rounded up to epoll's whole milliseconds, and I/O still wakes the loop at once.

Timing on a loaded machine only ever makes a wake-up later, so the check uses the earliest of
many wake-ups: the stock loop wakes a 1.4 ms timer 2 ms after it was set (epoll rounds the
wait up), the precise one sooner whenever the machine lets it."""
from __future__ import annotations

import asyncio
import selectors
import socket
import threading
import time

import pytest

from ember._private.execution import precise_loop

pytestmark = pytest.mark.skipif(not hasattr(selectors, "EpollSelector"), reason="epoll is Linux's")

_WAIT_S = 0.0014  # a wait with a sub-millisecond part: epoll rounds it up to 2 ms


async def _wakes_s(n: int) -> list[float]:
    """The times, over n sleeps of _WAIT_S, between asking and waking, shortest first."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await asyncio.sleep(_WAIT_S)
        out.append(time.perf_counter() - t0)
    return sorted(out)


def test_a_timer_wakes_before_the_next_whole_millisecond():
    loop = precise_loop.new_event_loop()
    try:
        assert isinstance(loop._selector, precise_loop.PreciseEpollSelector)  # type: ignore[attr-defined]
        precise = loop.run_until_complete(_wakes_s(40))[0]  # the earliest
    finally:
        loop.close()
    stock = asyncio.new_event_loop()
    try:
        rounded = stock.run_until_complete(_wakes_s(5))[2]  # the median (a wait that started late is shorter)
    finally:
        stock.close()
    assert rounded >= 0.0019, f"the stock loop woke a {_WAIT_S * 1e3} ms timer after {rounded * 1e3:.2f} ms"
    assert _WAIT_S <= precise < 0.0019, f"earliest wake-up {precise * 1e3:.2f} ms for a {_WAIT_S * 1e3} ms timer"


def test_io_wakes_the_loop_before_a_pending_timer():
    loop = precise_loop.new_event_loop()
    a, b = socket.socketpair()
    try:
        a.setblocking(False)

        async def go() -> float:
            got: asyncio.Future[bytes] = loop.create_future()
            loop.add_reader(a, lambda: got.done() or got.set_result(a.recv(10)))
            far = loop.call_later(5.0, lambda: None)  # a timer pending: the precise path waits
            t0 = time.monotonic()
            threading.Timer(0.05, b.send, (b"x",)).start()
            assert await asyncio.wait_for(got, 3.0) == b"x"
            far.cancel()
            loop.remove_reader(a)
            return time.monotonic() - t0

        took = loop.run_until_complete(go())
        assert took < 2.0, f"a readable socket woke the loop only after {took:.2f} s"
    finally:
        a.close()
        b.close()
        loop.close()

