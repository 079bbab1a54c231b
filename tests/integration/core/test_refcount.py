"""Borrower reference counting end to end (client/ember/_private/owner/references.py).

Refs travel nested in lists and dicts to tasks and actors, come back nested in results, live
inside put() objects and inside actors; each test checks that the store's used bytes return to
the baseline once every reference is gone (the owner frees every copy), and that an object stays
readable for as long as anybody - owner or borrower - holds a reference to it."""
from __future__ import annotations

import gc
import time

import numpy as np
import pytest

import ember
from ember import exceptions as ex
from ember._private import worker as ember_worker
from ember._private.owner.references import REMOVE_DELAY_S
from ember.testing import wait_for
from ember_common import rpc
from ember_common.proto import objmgr_pb2, objmgr_pb2_grpc

MiB = 2**20
N = MiB // 8  # int64 elements of a 1 MiB array: big enough for shared memory


def _stats(address: str) -> objmgr_pb2.GetStoreStatsReply:
    ch = rpc.sync_channel(address)
    try:
        return objmgr_pb2_grpc.ObjectManagerStub(ch).GetStoreStats(objmgr_pb2.GetStoreStatsRequest(), timeout=5)
    finally:
        ch.close()


@pytest.fixture(scope="module")
def objmgr():
    ember.init(num_cpus=2, object_store_memory=256 * MiB)
    try:
        yield ember_worker._gcs_nodes()[0].objmgr_address
    finally:
        ember.shutdown()


def _baseline(objmgr: str) -> int:
    """Used bytes once earlier tests' objects and pins are gone and the store stops changing."""
    gc.collect()
    last = [None]

    def quiet():
        s = _stats(objmgr)
        key = (s.used_bytes, s.num_objects, s.num_pinned)
        stable, last[0] = key == last[0], key
        return s.used_bytes + 1 if stable and s.num_pinned == 0 else None

    time.sleep(REMOVE_DELAY_S)
    return wait_for(quiet, timeout_s=30, interval_s=0.3, what="the object store to settle") - 1


def _back_to(objmgr: str, base: int, what: str) -> None:
    gc.collect()
    wait_for(lambda: _stats(objmgr).used_bytes == base, timeout_s=30, interval_s=0.1,
             what=f"the store's used bytes to return to the baseline ({what})")


def _still_held(objmgr: str, base: int, nbytes: int) -> None:
    """The object is still in the store after every removal would have been sent."""
    gc.collect()
    time.sleep(3 * REMOVE_DELAY_S)
    assert _stats(objmgr).used_bytes >= base + nbytes


@ember.remote
def total(container):
    """Sums every array whose ref is nested in a list or dict."""
    refs = container.values() if isinstance(container, dict) else container
    return sum(int(ember.get(r)[-1]) for r in refs)


@ember.remote
def make_nested(i):
    return [ember.put(np.full(N, i, dtype=np.int64))]  # owned by this worker, returned nested


@ember.remote
def echo(container):
    return container  # refs borrowed from the caller (or a third process), returned nested


@ember.remote
class Holder:
    def __init__(self):
        self.held = None

    def hold(self, lst):
        self.held = lst[0]
        return True

    def read(self):
        return int(ember.get(self.held)[-1])

    def drop(self):
        self.held = None
        return True

    def make(self, i):
        self.own = ember.put(np.full(N, i, dtype=np.int64))
        return [self.own]


def test_refs_nested_in_task_arguments(objmgr):
    base = _baseline(objmgr)
    refs = [ember.put(np.full(N, i, dtype=np.int64)) for i in range(6)]
    out = [total.remote(refs[:3]), total.remote({"a": refs[3], "b": refs[4]})]
    # The caller may drop its refs right away: the pending task keeps its nested refs alive.
    only = ember.put(np.full(N, 7, dtype=np.int64))
    out.append(total.remote([only]))
    del only
    assert ember.get(out, timeout=60) == [0 + 1 + 2, 3 + 4, 7]
    assert _stats(objmgr).used_bytes >= base + 5 * MiB
    del refs, out
    _back_to(objmgr, base, "refs nested in task arguments")


def test_refs_nested_in_returns(objmgr):
    base = _baseline(objmgr)
    outer = make_nested.remote(5)
    (inner,) = ember.get(outer, timeout=60)
    assert int(ember.get(inner)[0]) == 5
    del inner
    _still_held(objmgr, base, MiB)  # the outer result still holds the worker's object
    assert int(ember.get(ember.get(outer)[0])[-1]) == 5
    del outer
    _back_to(objmgr, base, "a ref returned nested in a result")

    # A ref owned by the caller, handed back nested: the caller's own ref can go.
    mine = ember.put(np.full(N, 8, dtype=np.int64))
    back = echo.remote([mine])
    del mine
    _still_held(objmgr, base, MiB)
    assert int(ember.get(ember.get(back)[0])[-1]) == 8
    # A ref owned by a worker, passed nested through another task and back (a third owner).
    via = echo.remote({"x": make_nested.remote(9)})
    got = ember.get(via, timeout=60)["x"]
    assert int(ember.get(ember.get(got)[0])[-1]) == 9
    del back, via, got
    _back_to(objmgr, base, "refs returned through a second task")


def test_refs_inside_put_objects(objmgr):
    base = _baseline(objmgr)
    outer = ember.put({"inner": ember.put(np.full(N, 3, dtype=np.int64)), "n": 1})
    big_outer = ember.put([ember.put(np.full(N, 4, dtype=np.int64)), np.zeros(N)])  # outer in shm too
    _still_held(objmgr, base, 3 * MiB)
    assert int(ember.get(ember.get(outer)["inner"])[0]) == 3
    assert int(ember.get(ember.get(big_outer)[0])[0]) == 4
    assert ember.get(total.remote([ember.get(outer)["inner"], ember.get(big_outer)[0]])) == 7
    del outer, big_outer
    _back_to(objmgr, base, "refs stored inside put objects")


def test_actor_keeps_a_borrowed_ref_until_it_drops_it_or_dies(objmgr):
    base = _baseline(objmgr)
    a, b = Holder.remote(), Holder.remote()
    ref = ember.put(np.full(N, 11, dtype=np.int64))
    ref2 = ember.put(np.full(N, 12, dtype=np.int64))
    assert ember.get([a.hold.remote([ref]), b.hold.remote([ref2])], timeout=60) == [True, True]
    del ref, ref2
    _still_held(objmgr, base, 2 * MiB)
    assert ember.get([a.read.remote(), b.read.remote()], timeout=60) == [11, 12]

    assert ember.get(a.drop.remote(), timeout=60)
    wait_for(lambda: base + MiB <= _stats(objmgr).used_bytes < base + 2 * MiB, timeout_s=30,
             what="the object dropped by the actor to be freed")
    ember.kill(b)  # the borrower dies: its owner learns it from the GCS and frees the object
    _back_to(objmgr, base, "the borrowing actor was killed")
    ember.kill(a)


@ember.remote
def hand_to(holder, box):
    """A borrower passes the ref it borrowed on, nested, to an actor, then lets go of it."""
    return ember.get(holder.hold.remote([box["ref"]]))


def test_nested_borrowing_through_a_task_into_an_actor(objmgr):
    base = _baseline(objmgr)
    h = Holder.remote()
    ref = ember.put(np.full(N, 31, dtype=np.int64))
    assert ember.get(hand_to.remote(h, {"ref": ref}), timeout=60)
    del ref  # owner's ref gone, the task that borrowed it finished: only the actor holds it
    _still_held(objmgr, base, MiB)
    assert ember.get(h.read.remote(), timeout=60) == 31
    assert ember.get(h.drop.remote(), timeout=60)
    _back_to(objmgr, base, "the actor dropped a ref it got from another borrower")
    ember.kill(h)


def test_objects_owned_by_a_dead_process_are_freed(objmgr):
    base = _baseline(objmgr)
    h = Holder.remote()
    (ref,) = ember.get(h.make.remote(21), timeout=60)  # owned by the actor, borrowed here
    assert int(ember.get(ref)[0]) == 21
    assert _stats(objmgr).used_bytes >= base + MiB
    ember.kill(h)
    _back_to(objmgr, base, "the owner died")
    with pytest.raises((ex.ObjectLostError, ex.OwnerDiedError)):
        ember.get(ref, timeout=30)


def test_mixed_workload_returns_to_baseline(objmgr):
    base = _baseline(objmgr)
    h = Holder.remote()
    for _round in range(3):
        arrays = [ember.put(np.full(N, i, dtype=np.int64)) for i in range(4)]
        made = [make_nested.remote(10 + i) for i in range(3)]
        boxed = ember.put({"refs": arrays[:2], "made": made})
        assert ember.get(h.hold.remote([arrays[3]]), timeout=60)
        assert ember.get(total.remote(arrays), timeout=60) == 6
        inner = ember.get(boxed)
        assert [int(ember.get(ember.get(m)[0])[0]) for m in inner["made"]] == [10, 11, 12]
        assert ember.get(h.read.remote(), timeout=60) == 3
        del arrays, made, boxed, inner
    assert ember.get(h.drop.remote(), timeout=60)
    _back_to(objmgr, base, "a mixed workload")
    ember.kill(h)


def test_seed_200mb_array_put_once_read_by_ten_tasks_without_copies(objmgr):
    """Seed article 3.3/6.2: a 200 MB array put once, read by 10 tasks as read-only views of the
    shared memory (the data lies inside each worker's mapping of the arena), and refs nested in
    a container passed along as refs; everything is freed afterwards."""
    base = _baseline(objmgr)

    @ember.remote
    def view_of(a):
        import numpy as np  # noqa: F811

        plasma = ember_worker.global_worker().core.plasma
        arena = np.frombuffer(plasma._ro, dtype=np.uint8)
        lo, hi = arena.ctypes.data, arena.ctypes.data + arena.nbytes
        inside = lo <= a.ctypes.data and a.ctypes.data + a.nbytes <= hi
        return bool(a.flags.writeable), inside, int(a[-1]), a.nbytes

    n = 200 * 10**6 // 8
    arr = np.arange(n, dtype=np.int64)
    ref = ember.put(arr)
    del arr
    assert ember.get([view_of.remote(ref) for _ in range(10)], timeout=300) == [(False, True, n - 1, n * 8)] * 10
    assert ember.get(total.remote({"big": ref})) == n - 1  # nested in a dict: passed as a ref
    assert _stats(objmgr).used_bytes >= base + n * 8
    del ref
    _back_to(objmgr, base, "the 200 MB array")


@ember.remote
def gen_nested(k):
    for i in range(k):
        yield {"i": i, "ref": ember.put(np.full(N, i, dtype=np.int64))}


def test_refs_nested_in_streamed_generator_items(objmgr):
    base = _baseline(objmgr)
    gen = gen_nested.remote(3)
    items = [ember.get(r, timeout=60) for r in gen]
    assert [int(ember.get(it["ref"])[0]) for it in items] == [0, 1, 2]
    _still_held(objmgr, base, 3 * MiB)  # the items hold the worker's objects
    del gen, items
    _back_to(objmgr, base, "refs nested in generator items")
