"""StreamPoller (serve/_private/stream_poller.py) without sockets: a stand-in replica whose
stream_poll answers batches the test hands it, as concurrent futures, the way an actor call's
ObjectRef.future() does."""
from __future__ import annotations

import asyncio
import concurrent.futures

from ember.serve._private.stream_poller import FETCH_ERROR, StreamPoller


class _Method:
    def __init__(self, replica: _Replica) -> None:
        self.replica = replica

    def remote(self, group: str) -> _Ref:
        self.replica.groups.append(group)
        f: concurrent.futures.Future = concurrent.futures.Future()
        self.replica.pending.append(f)
        return _Ref(f)


class _Ref:
    def __init__(self, f: concurrent.futures.Future) -> None:
        self.f = f

    def future(self) -> concurrent.futures.Future:
        return self.f

    def __await__(self):  # as an ObjectRef awaited off the core loop
        return asyncio.wrap_future(self.f).__await__()


class _Replica:
    def __init__(self) -> None:
        self.pending: list[concurrent.futures.Future] = []
        self.groups: list[str] = []
        self.stream_poll = _Method(self)

    async def answer(self, batch=None, error=None) -> None:
        while not self.pending:
            await asyncio.sleep(0.001)
        f = self.pending.pop(0)
        if error is not None:
            f.set_exception(error)
        else:
            f.set_result(batch)
        await asyncio.sleep(0.01)


def test_one_poll_in_flight_feeds_every_stream_and_drops_unknown_ids():
    async def go():
        rep, registry = _Replica(), {}
        p = StreamPoller.of(registry, "r1", rep, "g1")
        assert StreamPoller.of(registry, "r1", rep, "g1") is p
        a, b = p.expect("a"), p.expect("b")
        p.start("a")
        p.start("b")
        await rep.answer([("a", [1, 2], False, None), ("b", b"x", False, None), ("gone", b"?", False, None)])
        assert len(rep.pending) == 1 and rep.groups == ["g1", "g1"]  # the next poll, one at a time
        await rep.answer([("a", [3], True, None), ("b", b"y", False, None)])
        assert a.take_items() == ([1, 2, 3], True, None)
        assert b.take() == (b"xy", False, None)
        p.close("a")
        await rep.answer([("b", b"", False, FETCH_ERROR)])  # b's user code failed
        assert b.take() == (b"", False, FETCH_ERROR)
        await asyncio.sleep(0.01)
        assert not rep.pending  # no stream open: no poll
        assert "r1" in registry  # b's inbox is still expected by its caller
        p.close("b")
        assert registry == {}
    asyncio.run(go())


def test_a_failed_poll_ends_every_stream():
    async def go():
        rep, registry = _Replica(), {}
        p = StreamPoller.of(registry, "r1", rep, "g")
        a, b = p.expect("a"), p.expect("b")
        p.start("a")
        await rep.answer(error=RuntimeError("replica died"))
        for box in (a, b):
            data, done, err = box.take()
            assert done and err == "RuntimeError: replica died"
        assert registry == {}
    asyncio.run(go())


def test_inbox_wait_is_done_when_items_are_already_there():
    async def go():
        p = StreamPoller(_Replica(), "k", "g", {})
        box = p.expect("s")
        box.put([1], False, None)
        await asyncio.wait_for(box.wait(), 1)
        assert box.take_items() == ([1], False, None)
    asyncio.run(go())
