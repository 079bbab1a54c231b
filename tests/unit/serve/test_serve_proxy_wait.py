"""The proxy's wait for a call's reply (ember_serve_proxy.app._unless_left): the reply, or
_LEFT when the client disconnected first, with no task made per request; a cancellation from
elsewhere (the server stopping) still cancels the request."""
from __future__ import annotations

import asyncio

import pytest

from ember_serve_proxy.app import _LEFT, _unless_left


def test_the_reply_comes_back_and_a_later_disconnect_cancels_nothing():
    async def go():
        loop = asyncio.get_running_loop()
        reply, disconnect = loop.create_future(), loop.create_future()
        loop.call_later(0.01, reply.set_result, ("full", 200, [], b"ok"))
        got = await _unless_left(reply, disconnect)
        disconnect.set_result({"type": "http.disconnect"})  # the client leaves afterwards
        await asyncio.sleep(0.01)  # ... while the request is still relaying: not cancelled
        return got

    assert asyncio.run(go()) == ("full", 200, [], b"ok")


def test_a_disconnect_first_ends_the_wait_and_cancels_the_call_s_awaitable():
    async def go():
        loop = asyncio.get_running_loop()
        reply, disconnect = loop.create_future(), loop.create_future()
        loop.call_later(0.01, disconnect.set_result, {"type": "http.disconnect"})
        got = await _unless_left(reply, disconnect)
        await asyncio.sleep(0)  # the request's task goes on uncancelled
        return got, reply.cancelled(), asyncio.current_task().cancelling()

    assert asyncio.run(go()) == (_LEFT, True, 0)


def test_a_client_that_left_before_the_call_is_answered_at_once():
    async def go():
        loop = asyncio.get_running_loop()
        reply, disconnect = loop.create_future(), loop.create_future()
        disconnect.set_result({"type": "http.disconnect"})
        return await asyncio.wait_for(_unless_left(reply, disconnect), 5)

    assert asyncio.run(go()) is _LEFT


def test_a_cancellation_from_elsewhere_is_not_taken_for_a_disconnect():
    async def go():
        loop = asyncio.get_running_loop()
        reply, disconnect = loop.create_future(), loop.create_future()
        task = asyncio.ensure_future(_unless_left(reply, disconnect))
        await asyncio.sleep(0.01)
        task.cancel()  # e.g. the server stops
        disconnect.set_result({"type": "http.disconnect"})  # and the client goes too
        with pytest.raises(asyncio.CancelledError):
            await task
        return reply.cancelled()

    assert asyncio.run(go()) is True
