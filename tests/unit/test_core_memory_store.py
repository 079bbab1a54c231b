"""The memory store (memory_store.py): entries, future waiters and blocked user threads."""
from __future__ import annotations

import concurrent.futures
import threading
import time

from ember._private.memory_store import MemoryStore
from ember_common.proto import common_pb2


def entry(oid: bytes, plasma: bool = False) -> common_pb2.ReturnObject:
    return common_pb2.ReturnObject(object_id=oid, in_plasma=plasma, size=1)


def test_put_wakes_every_waiter_once_and_forgets_them():
    s = MemoryStore()
    a, b = concurrent.futures.Future(), concurrent.futures.Future()
    s.add_waiter(b"x", a)
    s.add_waiter(b"x", b)
    assert s.get(b"x") is None and s.num_waiters(b"x") == 2
    e = entry(b"x")
    s.put(e)
    assert a.result(0) is e and b.result(0) is e and s.num_waiters(b"x") == 0
    assert s.get(b"x") is e and s.contains(b"x") and len(s) == 1


def test_a_withdrawn_or_done_waiter_is_not_woken():
    s = MemoryStore()
    gone, cancelled = concurrent.futures.Future(), concurrent.futures.Future()
    s.add_waiter(b"x", gone)
    s.remove_waiter(b"x", gone)
    s.add_waiter(b"x", cancelled)
    cancelled.cancel()
    s.put(entry(b"x"))  # a cancelled future is done: not set (no InvalidStateError)
    assert not gone.done() and s.num_waiters(b"x") == 0
    s.remove_waiter(b"never", gone)  # unknown ids are fine


def test_pop_forgets_the_entry_and_its_copies():
    s = MemoryStore()
    s.put_quiet(entry(b"x", plasma=True))
    s.put_quiet(entry(b"y"))
    s.add_copies(b"x", ["n2"])
    s.add_copies(b"x", ["n3"])
    assert s.copies(b"x") == {"n2", "n3"} and s.in_plasma([b"x", b"y", b"z"]) == [b"x"]
    assert s.pop(b"x").object_id == b"x"
    assert s.get(b"x") is None and s.copies(b"x") == set() and s.pop(b"x") is None


def test_wait_sync_returns_when_all_arrive_from_another_thread():
    s = MemoryStore()
    t = threading.Timer(0.05, lambda: (s.put(entry(b"a")), s.put(entry(b"b"))))
    t.start()
    try:
        assert s.wait_sync([b"a", b"b"], timeout=10) == []
    finally:
        t.join()
    assert s.num_waiters(b"a") == 0


def test_wait_sync_times_out_naming_what_is_missing():
    s = MemoryStore()
    s.put(entry(b"a"))
    start = time.monotonic()
    assert s.wait_sync([b"a", b"b"], timeout=0.05) == [b"b"]
    assert time.monotonic() - start < 5
    assert s.num_waiters(b"b") == 0  # the blocked thread's event is withdrawn
