"""The stream channel's wire format (serve/_private/stream_channel.py) and ChannelPoller's
fallback to actor-call polling, without sockets."""
from __future__ import annotations

import asyncio
import concurrent.futures

import pytest

from ember.serve._private import stream_channel as sc
from ember.serve._private.stream_poller import ChannelPoller


def test_entries_survive_any_split_of_the_bytes():
    batch = [("a-1", b"tok 00001\n", False, None), ("b-22", b"", True, None),
             ("c", b"x" * 70_000, False, None), ("d", b"", True, "RuntimeError: it failed \u00e9")]
    data = sc.encode(batch)
    want = [("a-1", b"tok 00001\n", False, None), ("b-22", b"", True, None),
            ("c", b"x" * 70_000, False, None), ("d", b"", True, "RuntimeError: it failed \u00e9")]
    assert sc.Decoder().feed(data) == want
    for step in (1, 2, 7, 4096):  # whatever pieces the socket hands over
        dec, got = sc.Decoder(), []
        for i in range(0, len(data), step):
            got += dec.feed(data[i:i + step])
        assert got == want


def test_handle_stream_items_and_a_user_error_to_fetch():
    batch = [("h1", [{"i": 1}, "two", b"3"], False, None), ("h2", [], False, sc.FETCH_ERROR),
             ("h3", [None], True, None)]
    assert sc.Decoder().feed(sc.encode(batch)) == batch


def test_items_pickle_refuses_go_by_cloudpickle():
    def local(x):  # a function defined here: by reference pickle cannot find it
        return x + 1

    (sid, items, done, err), = sc.Decoder().feed(sc.encode([("h1", ["a", local, lambda: 2], True, None)]))
    assert (sid, items[0], done, err) == ("h1", "a", True, None)
    assert items[1](1) == 2 and items[2]() == 2


def test_hello_carries_secret_and_group_and_the_server_checks_both():
    server = sc.ChannelServer(None, None, None, "127.0.0.1")  # type: ignore[arg-type]
    secret = server._secret
    assert server._check_hello(sc.hello(secret, "proxy-1c0")) == "proxy-1c0"
    assert server._check_hello(sc.hello("0" * 32, "proxy-1c0")) is None  # wrong secret
    assert server._check_hello(b"GET / HTTP/1.1\r\n") is None  # not a hello
    assert server._check_hello(sc.MAGIC + secret.encode() + b"\n") is None  # no group
    with pytest.raises(ValueError, match="no spaces or newlines"):
        sc.hello(secret, "a b")


class _Call:
    def __init__(self, answer) -> None:
        self.answer, self.calls = answer, 0

    def remote(self, *args):
        self.calls += 1
        f: concurrent.futures.Future = concurrent.futures.Future()
        a = self.answer(*args)
        if isinstance(a, BaseException):
            f.set_exception(a)
        else:
            f.set_result(a)
        return _Ref(f)


class _Ref:
    def __init__(self, f) -> None:
        self.f = f

    def future(self):
        return self.f

    def __await__(self):  # as an ObjectRef awaited off the core loop
        return asyncio.wrap_future(self.f).__await__()


class _NoChannelReplica:
    """A replica that offers no channel (mutual TLS on): the poller polls with stream_poll."""

    def __init__(self) -> None:
        self.batches = [[("s1", b"ab", False, None)], [("s1", b"c", True, None)]]
        self.stream_channel = _Call(lambda: None)
        self.stream_poll = _Call(lambda group: self.batches.pop(0) if self.batches else [])


def test_channel_poller_falls_back_to_polling_and_leaves_the_registry():
    async def go():
        rep, registry = _NoChannelReplica(), {}
        p = ChannelPoller.of(registry, "r1", rep, "proxy-")
        assert p.group.startswith("proxy-c")  # a group of its own
        box = p.expect("s1")
        p.start("s1")
        for _ in range(100):
            if not p.streaming:
                break
            await asyncio.sleep(0.005)
        assert box.take() == (b"abc", True, None)
        assert not p.connected and rep.stream_poll.calls == 2
        p.close("s1")
        assert registry == {}  # no connection to keep: the next stream asks again
    asyncio.run(go())


def test_channel_poller_with_an_unreachable_replica_ends_its_streams():
    async def go():
        rep, registry = _NoChannelReplica(), {}
        rep.stream_channel = _Call(lambda: ("127.0.0.1", 1, "00"))  # nothing listens on port 1
        rep.stream_poll = _Call(lambda group: RuntimeError("the replica died"))
        p = ChannelPoller.of(registry, "r1", rep, "proxy-")
        box = p.expect("s1")
        p.start("s1")
        await asyncio.wait_for(box.wait(), 5)
        data, done, error = box.take()
        assert done and "the replica died" in error
    asyncio.run(go())
