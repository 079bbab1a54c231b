"""The memory store (memory_store.py): entries, future waiters and blocked user threads."""
from __future__ import annotations

import concurrent.futures
import threading
import time

from ember._private.owner.memory_store import MemoryStore
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


def _waiting(s: MemoryStore, oids: list[bytes], timeout: float = 30):
    """Runs wait_sync on a thread; returns (thread, result list)."""
    out: list[list[bytes]] = []
    t = threading.Thread(target=lambda: out.append(s.wait_sync(oids, timeout)), daemon=True)
    t.start()
    return t, out


def _until(cond, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.001)


def test_wait_sync_holds_one_registration_and_wakes_once_at_the_end():
    s = MemoryStore()
    oids = [b"%05d" % i for i in range(1000)]
    t, out = _waiting(s, oids)
    _until(lambda: s.num_waiters(oids[0]) == 1)
    for oid in oids[1:]:  # everything but the first: the blocked thread stays asleep
        s.put(entry(oid))
    assert sum(s.num_waiters(o) for o in oids) == 1 and s.num_waiters(oids[0]) == 1
    time.sleep(0.05)
    assert t.is_alive() and out == []
    s.put(entry(oids[0]))  # the cursor runs over the 999 that are there, to the end
    t.join(10)
    assert out == [[]] and not s._sync_waiters


def test_wait_sync_cursor_follows_arrivals_in_any_order_with_duplicates():
    s = MemoryStore()
    oids = [b"c", b"a", b"c", b"b", b"a"]
    t, out = _waiting(s, oids)
    _until(lambda: s.num_waiters(b"c") == 1)
    s.put(entry(b"a"))
    assert s.num_waiters(b"c") == 1 and t.is_alive()
    s.put(entry(b"c"))  # cursor over c, a, c to b
    _until(lambda: s.num_waiters(b"b") == 1)
    assert s.num_waiters(b"c") == 0 and t.is_alive()
    s.put(entry(b"b"))
    t.join(10)
    assert out == [[]] and not s._sync_waiters


def test_wait_sync_timeout_withdraws_the_cursor_and_names_only_what_is_missing():
    s = MemoryStore()
    s.put(entry(b"b"))
    assert s.wait_sync([b"a", b"b", b"c"], timeout=0.05) == [b"a", b"c"]
    assert not s._sync_waiters
    s.put(entry(b"a"))  # nobody is registered any more: a plain store
    assert s.wait_sync([b"a", b"b"], timeout=0) == []


def test_wait_sync_two_threads_on_overlapping_ids():
    s = MemoryStore()
    t1, out1 = _waiting(s, [b"x", b"y"])
    t2, out2 = _waiting(s, [b"y", b"z"])
    _until(lambda: s.num_waiters(b"x") == 1 and s.num_waiters(b"y") == 1)
    s.put(entry(b"y"))
    _until(lambda: s.num_waiters(b"z") == 1)
    s.put(entry(b"x"))
    t1.join(10)
    assert out1 == [[]] and t2.is_alive()
    s.put(entry(b"z"))
    t2.join(10)
    assert out2 == [[]] and not s._sync_waiters


def _put_all(s: MemoryStore, oids: list[bytes]) -> None:
    for oid in oids:
        s.put(entry(oid))


def test_wait_sync_under_concurrent_puts_never_misses_an_arrival():
    """Puts from three threads in shuffled order race the blocked threads' registrations
    (bounded: 20 rounds of 3,000 ids, 30 s each)."""
    import random

    rng = random.Random(7)
    for _ in range(20):
        s = MemoryStore()
        oids = [rng.randbytes(8) for _ in range(3000)]
        waiters = [_waiting(s, oids[k::2] + oids[:50]) for k in range(2)]
        shuffled = oids[:]
        rng.shuffle(shuffled)
        putters = [threading.Thread(target=_put_all, args=(s, shuffled[k::3])) for k in range(3)]
        for p in putters:
            p.start()
        for p in putters:
            p.join(30)
        for t, out in waiters:
            t.join(30)
            assert out == [[]]
        assert not s._sync_waiters
