"""Objects end to end: zero-copy reads, Arrow, many small objects, freeing, spilling, a full store,
lost spill files, cross-node transfers, remote (non-mapping) clients and `ember memory`.

Most tests share one embedded cluster with a deliberately small store (128 MiB) so that spilling is
cheap; the transfer and remote-client tests use a 2-node LocalCluster, driven by subprocess drivers
(this process is already the embedded cluster's driver)."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

import ember
from ember import exceptions as ex
from ember._private import node as node_mod
from ember._private import worker as ember_worker
from ember.testing import LocalCluster, wait_for
from ember_common import rpc
from ember_common.proto import objmgr_pb2, objmgr_pb2_grpc

MiB = 2**20
STORE = 128 * MiB


# --------------------------------------------------------------------------- helpers
def _store_stats(address: str) -> objmgr_pb2.GetStoreStatsReply:
    ch = rpc.sync_channel(address)
    try:
        return objmgr_pb2_grpc.ObjectManagerStub(ch).GetStoreStats(objmgr_pb2.GetStoreStatsRequest(), timeout=5)
    finally:
        ch.close()


def _list_objects(address: str) -> dict[str, objmgr_pb2.ObjectStat]:
    ch = rpc.sync_channel(address)
    try:
        reply = objmgr_pb2_grpc.ObjectManagerStub(ch).ListObjects(objmgr_pb2.ListObjectsRequest(), timeout=5)
    finally:
        ch.close()
    return {o.object_id.hex(): o for o in reply.objects}


def _settle(store) -> objmgr_pb2.GetStoreStatsReply:
    """Collects garbage and waits until no object is pinned and the store stops changing (pins of
    earlier tests' views are released asynchronously, in batches)."""
    gc.collect()
    last = [None]

    def quiet():
        s = _store_stats(store.objmgr)
        key = (s.used_bytes, s.num_objects, s.num_spilled, s.num_pinned)
        stable, last[0] = key == last[0], key
        return s if stable and s.num_pinned == 0 else None

    return wait_for(quiet, timeout_s=20, interval_s=0.2, what="the object store to settle")


@pytest.fixture(scope="module")
def store():
    ember.init(num_cpus=2, object_store_memory=STORE)
    try:
        head = ember_worker._gcs_nodes()[0]
        session = os.path.basename(os.path.dirname(head.store_dir))
        yield SimpleNamespace(
            objmgr=head.objmgr_address,
            node_id=head.node_id,
            gcs=ember.get_runtime_context().gcs_address,
            spill_dir=os.path.join(node_mod.EMBER_TMP, session, "spill", head.node_id),
        )
    finally:
        ember.shutdown()


@ember.remote
def _read_only(a):
    return bool(a.flags.writeable), int(a[12345]), int(a[-1]), a.nbytes


# --------------------------------------------------------------------------- 1. seed 3.3 / 6.2
def test_large_array_put_once_read_by_ten_tasks_zero_copy(store):
    n = 48 * MiB // 8
    arr = np.arange(n, dtype=np.int64)
    ref = ember.put(arr)
    assert arr.flags.writeable  # the caller's own array is untouched
    results = ember.get([_read_only.remote(ref) for _ in range(10)], timeout=120)
    assert results == [(False, 12345, n - 1, 48 * MiB)] * 10

    a1 = ember.get(ref)
    a2 = ember.get(ref)
    assert np.shares_memory(a1, a2)
    assert not a1.flags.writeable and not a2.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        a1[0] = 1
    assert a1[n // 2] == n // 2 and a2[-1] == n - 1

    @ember.remote
    def nested(lst):
        return type(lst[0]).__name__, isinstance(lst[0], ember.ObjectRef), int(ember.get(lst[0]).sum())

    # A small (inline) value nested in a list: the task borrows it (test_refcount.py checks the
    # freeing of nested refs).
    small = ember.put(np.arange(10))
    assert ember.get(nested.remote([small])) == ("ObjectRef", True, 45)


# --------------------------------------------------------------------------- 2. Arrow
def test_arrow_table_round_trip_through_shared_memory(store):
    n = 50_000
    table = pa.table({"a": np.arange(n, dtype=np.int64), "s": [f"row-{i}" for i in range(n)]})
    assert table.nbytes > 100 * 1024
    before = _settle(store)
    ref = ember.put(table)
    after = _store_stats(store.objmgr)
    assert after.used_bytes >= before.used_bytes + table.nbytes
    assert ref.hex() in _list_objects(store.objmgr)

    got = ember.get(ref)
    assert got.equals(table)
    # Zero copy: the returned column's data buffer lies inside this process's arena mapping.
    plasma = ember_worker.global_worker().core.plasma
    arena = np.frombuffer(plasma._ro, dtype=np.uint8)
    lo, hi = arena.ctypes.data, arena.ctypes.data + arena.nbytes
    del arena
    addr = got.column("a").chunk(0).buffers()[1].address
    assert lo <= addr < hi, "the Arrow buffer was copied out of shared memory"

    @ember.remote
    def col_sum(t):
        return pa.compute.sum(t.column("a")).as_py(), t.num_rows

    import pyarrow.compute  # noqa: F401  (pa.compute inside the task)

    assert ember.get(col_sum.remote(ref)) == (n * (n - 1) // 2, n)


# --------------------------------------------------------------------------- 3. many small objects
def test_ten_thousand_small_objects_in_one_get(store):
    refs = [ember.put(i) for i in range(10_000)]
    assert ember.get(refs, timeout=60) == list(range(10_000))
    mixed = [ember.put({"k": i, "s": str(i)}) for i in range(0, 10_000, 7)]
    assert ember.get(mixed) == [{"k": i, "s": str(i)} for i in range(0, 10_000, 7)]


# --------------------------------------------------------------------------- 4. freeing
def test_dropping_refs_frees_store_memory(store):
    base = _settle(store)

    @ember.remote
    def double(a):
        assert not a.flags.writeable
        return a * 2  # a new 4 MiB array, returned through the store

    n = 4 * MiB // 8
    refs = [ember.put(np.full(n, i, dtype=np.int64)) for i in range(10)]
    outs = [double.remote(r) for r in refs]
    values = ember.get(outs, timeout=120)
    assert [int(v[0]) for v in values] == [2 * i for i in range(10)]
    assert all(int(v[-1]) == 2 * i for i, v in enumerate(values))
    live = _store_stats(store.objmgr)
    assert live.used_bytes >= base.used_bytes + 20 * 4 * MiB
    assert live.num_spilled == base.num_spilled  # 80 MiB fit: nothing was spilled

    del refs, outs, values
    gc.collect()
    wait_for(lambda: (s := _store_stats(store.objmgr)).used_bytes == base.used_bytes
             and s.num_objects == base.num_objects and s.num_pinned == 0,
             timeout_s=20, what="the store's used bytes to return to the baseline")


# --------------------------------------------------------------------------- 5. spilling
def test_spilling_three_times_the_store(store):
    base = _settle(store)
    assert base.num_spilled == 0

    @ember.remote
    def make(i):
        return np.full(16 * MiB // 8, i, dtype=np.int64)

    @ember.remote
    def check(a, i):
        return bool(a[0] == i and a[len(a) // 2] == i and a[-1] == i)

    n = 16 * MiB // 8
    refs = [ember.put(np.full(n, i, dtype=np.int64)) for i in range(12)]
    refs += [make.remote(i) for i in range(12, 24)]
    ember.wait(refs, num_returns=len(refs), timeout=120)
    live = _store_stats(store.objmgr)
    assert live.num_spilled >= 24 - STORE // (16 * MiB), live
    assert live.spilled_bytes >= live.num_spilled * 16 * MiB
    assert live.used_bytes <= live.capacity_bytes
    assert len(os.listdir(store.spill_dir)) >= live.num_spilled

    for i in range(24):  # one at a time: each read restores its object (spilling others)
        a = ember.get(refs[i])
        assert (int(a[0]), int(a[n // 2]), int(a[-1])) == (i, i, i), i
        del a
    assert ember.get([check.remote(refs[i], i) for i in range(0, 24, 3)], timeout=120) == [True] * 8

    del refs
    gc.collect()
    wait_for(lambda: _store_stats(store.objmgr).num_spilled == 0 and not os.listdir(store.spill_dir),
             timeout_s=20, what="spilled objects to be deleted with their refs")
    after = _store_stats(store.objmgr)
    assert after.spilled_bytes == 0
    wait_for(lambda: _store_stats(store.objmgr).used_bytes == base.used_bytes, timeout_s=20,
             what="the store's used bytes to return to the baseline")


# --------------------------------------------------------------------------- 6. full, nothing spillable
def _fallback_gone(store) -> bool:
    s = _store_stats(store.objmgr)
    return s.fallback_bytes == 0 and s.num_fallback == 0


def test_store_full_of_pinned_objects_falls_back_then_recovers(store, caplog):
    """As Ray's fallback allocation: with every object pinned, a put still succeeds, in a file
    outside the arena (with a warning), readable zero-copy by the driver and by tasks; the file
    goes with the object, and the arena is used again once pins are released."""
    _settle(store)
    n = 40 * MiB
    refs = [ember.put(np.full(n, i, dtype=np.uint8)) for i in range(3)]
    views = [ember.get(r) for r in refs]  # pinned while these views live
    assert _store_stats(store.objmgr).num_pinned >= 3
    with caplog.at_level("WARNING", logger="ember._private.objects.plasma"):
        extra = ember.put(np.full(n, 7, dtype=np.uint8))
    s = _store_stats(store.objmgr)
    assert s.num_fallback == 1 and s.fallback_bytes >= n and s.used_bytes <= STORE, s
    assert "object store is full" in caplog.text.lower(), caplog.text
    got = ember.get(extra)
    assert not got.flags.writeable and int(got[0]) == 7 and int(got[-1]) == 7
    assert ember.get(_read_only.remote(extra), timeout=60) == (False, 7, 7, n)
    del got, extra
    gc.collect()
    wait_for(lambda: _fallback_gone(store), timeout_s=20, what="the fallback file to go with its object")

    del views
    gc.collect()
    wait_for(lambda: _store_stats(store.objmgr).num_pinned == 0, what="the views' pins to be released")
    ref4 = ember.put(np.full(n, 9, dtype=np.uint8))  # the other three are spilled now
    got = ember.get(ref4)
    assert int(got[0]) == 9 and int(got[-1]) == 9
    assert _store_stats(store.objmgr).num_fallback == 0
    assert [int(ember.get(r)[n - 1]) for r in refs] == [0, 1, 2]
    assert ember.get(_read_only.remote(ember.put(np.arange(20_000, dtype=np.int64))))[1] == 12345


# --------------------------------------------------------------------------- 7. too big for the store
def test_object_larger_than_the_store_falls_back(store):
    """Ray allocates an object larger than the whole store outside it: so does Ember."""
    big = np.arange((STORE + MiB) // 8, dtype=np.int64)
    ref = ember.put(big)
    s = _store_stats(store.objmgr)
    assert s.num_fallback == 1 and s.fallback_bytes >= big.nbytes, s
    out = ember.get(ref)
    assert out.nbytes == big.nbytes and int(out[-1]) == big.size - 1 and not out.flags.writeable
    assert ember.get(_read_only.remote(ref), timeout=120) == (False, 12345, big.size - 1, big.nbytes)
    del out, ref
    gc.collect()
    wait_for(lambda: _fallback_gone(store), timeout_s=20, what="the fallback file to go with its object")
    assert ember.get(ember.put(np.ones(MiB, dtype=np.uint8))).sum() == MiB


def test_task_returning_an_object_larger_than_the_store(store):
    """Its worker stores the return value outside the store (it used to die): the caller gets it."""
    @ember.remote
    def big():
        return np.ones(STORE + MiB, dtype=np.uint8)

    @ember.remote
    def pid():
        return os.getpid()

    ref = big.remote()
    assert int(ember.get(ref, timeout=120).sum()) == STORE + MiB
    assert ember.get(pid.remote(), timeout=60) > 0  # the node's workers carry on
    del ref
    gc.collect()
    wait_for(lambda: _fallback_gone(store), timeout_s=20, what="the fallback file to go with its object")


def test_task_results_read_together_beyond_the_store_are_kept(store):
    """Issue 46's case: task results that must all be mapped at once (one task's arguments, then
    one get) add up to more than the store; Ray keeps every one, and so does Ember."""
    n = 60 * MiB  # three of them: 180 MiB in a 128 MiB store

    @ember.remote
    def make(i):
        return np.full(n, i, dtype=np.uint8)

    @ember.remote
    def lasts(*arrays):
        return [int(a[-1]) for a in arrays]

    refs = [make.remote(i) for i in range(3)]
    assert ember.get(lasts.remote(*refs), timeout=120) == [0, 1, 2]
    values = ember.get(refs, timeout=120)
    assert [int(v[0]) for v in values] == [0, 1, 2]
    del values, refs
    gc.collect()
    wait_for(lambda: _fallback_gone(store), timeout_s=30, what="fallback files to go with their objects")


# --------------------------------------------------------------------------- 8. lost spill file
def test_unreadable_spill_file_is_object_lost(store):
    _settle(store)
    n = 16 * MiB // 8
    victim = ember.put(np.full(n, 77, dtype=np.int64))
    filler = [ember.put(np.full(n, i, dtype=np.int64)) for i in range(8)]  # 144 MiB > 128 MiB
    path = os.path.join(store.spill_dir, victim.hex())
    wait_for(lambda: os.path.exists(path), timeout_s=10, what=f"{path} to be spilled")
    os.remove(path)

    with pytest.raises(ex.ObjectLostError) as info:
        ember.get(victim, timeout=30)
    assert victim.hex() in str(info.value) and "spill file" in str(info.value), info.value
    del info  # its traceback holds the ref
    # The cluster keeps working: other (spilled) objects restore, new puts and tasks run.
    assert int(ember.get(filler[0])[-1]) == 0
    assert ember.get([_read_only.remote(filler[1]), _read_only.remote(filler[7])], timeout=60) == [
        (False, 1, 1, 16 * MiB), (False, 7, 7, 16 * MiB)]
    assert ember.get(ember.put("still fine")) == "still fine"
    del victim, filler
    gc.collect()
    wait_for(lambda: _store_stats(store.objmgr).num_spilled == 0 and not os.listdir(store.spill_dir),
             timeout_s=20, what="spill files to go with their objects")


# --------------------------------------------------------------------------- 11. ember memory
def test_ember_memory_lists_a_live_object(store):
    arr = np.arange(300_000, dtype=np.int64)  # 2.4 MB: in shared memory
    ref = ember.put(arr)
    out = subprocess.run([sys.executable, "-m", "ember.scripts", "memory", "--address", store.gcs],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(ref.hex())]
    assert len(lines) == 1, out.stdout
    size = int(lines[0].split()[1])
    assert arr.nbytes <= size < arr.nbytes + 2 * 4096, lines[0]  # header + a large buffer's page of slack
    assert store.node_id[:12] in lines[0]
    assert "total" in out.stdout.splitlines()[-1]
    del ref


# --------------------------------------------------------------------------- 9/10. two nodes
@pytest.fixture(scope="module")
def cluster2():
    c = LocalCluster(object_store_memory=int(1.5 * 2**30))
    try:
        c.add_node({"CPU": 1}, is_head=True)
        c.add_node({"CPU": 1, "node2": 1})
        yield c
    finally:
        c.shutdown()


def _driver(cluster, script: str, timeout: float = 180) -> dict:
    """Runs a driver script (connected to the cluster) in a subprocess; returns its RESULT json."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script), cluster.gcs_address],
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"driver failed:\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}"
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, out.stdout[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_one_gib_transfer_between_nodes(cluster2):
    r = _driver(cluster2, """
        import json, sys, time
        import numpy as np
        import ember

        ember.init(address=sys.argv[1])

        @ember.remote(resources={"node2": 1})
        def produce():
            return np.ones(2**30, np.uint8)

        @ember.remote(resources={"node2": 1})
        def reread(a):
            return ember.get_runtime_context().get_node_id(), int(a.sum(dtype=np.uint64)), bool(a.flags.writeable)

        ref = produce.remote()
        ready, _ = ember.wait([ref], timeout=120)
        assert ready, "produce() did not finish"
        t0 = time.perf_counter()
        arr = ember.get(ref)
        dt = time.perf_counter() - t0
        res = {
            "seconds": dt, "nbytes": arr.nbytes, "writeable": bool(arr.flags.writeable),
            "sum": int(arr.sum(dtype=np.uint64)),
            "samples": [int(arr[i]) for i in (0, 1, 2**29, 2**30 - 1)],
            "driver_node": ember.get_runtime_context().get_node_id(),
            "remote": ember.get(reread.remote(ref), timeout=120),
        }
        del arr, ref
        ember.shutdown()
        print("RESULT " + json.dumps(res))
    """)
    head, node2 = cluster2.nodes[0].node_id, cluster2.nodes[1].node_id
    assert r["driver_node"] == head
    assert r["nbytes"] == 2**30 and not r["writeable"]
    assert r["sum"] == 2**30 and r["samples"] == [1, 1, 1, 1]
    assert r["remote"] == [node2, 2**30, False]
    print(f"\n1 GiB transfer node2 -> head: {r['seconds']:.2f} s = {1 / r['seconds']:.2f} GiB/s")


def test_pulled_copy_is_freed_with_the_last_ref(cluster2):
    """docs/architecture.md: when no ref remains (and it never left the process) "the value is freed
    everywhere" - the copy pulled to the reader's node included, while the owner still runs."""
    r = _driver(cluster2, """
        import gc, json, sys, time
        import numpy as np
        import ember
        from ember_common import rpc
        from ember._private import worker
        from ember_common.proto import objmgr_pb2, objmgr_pb2_grpc

        def stats(addr):
            ch = rpc.sync_channel(addr)
            try:
                s = objmgr_pb2_grpc.ObjectManagerStub(ch).GetStoreStats(objmgr_pb2.GetStoreStatsRequest(), timeout=5)
                return [s.num_objects, s.used_bytes]
            finally:
                ch.close()

        ember.init(address=sys.argv[1])
        me = ember.get_runtime_context().get_node_id()
        addrs = {n.node_id: n.objmgr_address for n in worker._gcs_nodes()}
        head = addrs[me]
        node2 = [a for nid, a in addrs.items() if nid != me][0]

        @ember.remote(resources={"node2": 1})
        def produce():
            return np.ones(32 * 2**20, np.uint8)

        before = {"head": stats(head), "node2": stats(node2)}
        ref = produce.remote()
        arr = ember.get(ref)  # pulled: a secondary copy on the head
        assert int(arr[-1]) == 1
        live = {"head": stats(head), "node2": stats(node2)}
        del arr, ref
        gc.collect()
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            after = {"head": stats(head), "node2": stats(node2)}
            if after == before:
                break
            time.sleep(0.2)
        ember.shutdown()
        print("RESULT " + json.dumps({"before": before, "live": live, "after": after}))
    """)
    size = 32 * MiB
    assert r["live"]["node2"][1] >= r["before"]["node2"][1] + size
    assert r["live"]["head"][1] >= r["before"]["head"][1] + size
    assert r["after"]["node2"] == r["before"]["node2"], r  # the primary copy is freed
    assert r["after"]["head"] == r["before"]["head"], (
        f"the copy pulled to the head is still there after its last ref was dropped: {r}")


def test_remote_client_without_arena_mapping(cluster2):
    r = _driver(cluster2, """
        import json, sys
        import numpy as np
        import ember
        from ember._private.objects import plasma
        from ember._private import worker

        plasma.PlasmaClient._arena = lambda self: False  # as if the arena could not be mapped
        ember.init(address=sys.argv[1])

        @ember.remote
        def total(a):
            return int(a.sum()), bool(a.flags.writeable), a.nbytes

        @ember.remote(resources={"node2": 1})
        def make():
            return np.full(2**17, 3, dtype=np.int64)

        a = np.arange(2**17, dtype=np.int64)  # 1 MiB
        ref = ember.put(a)
        b = ember.get(ref)
        c = ember.get(make.remote())
        big = np.arange(20 * 2**20 // 8, dtype=np.int64)  # 20 MiB: two WriteObject/ReadObject chunks
        big_ref = ember.put(big)
        big_back = ember.get(big_ref)
        big_ok = bool(np.array_equal(big, big_back)) and ember.get(total.remote(big_ref))[0] == int(big.sum())
        del big_back, big_ref
        res = {
            "equal": bool(np.array_equal(a, b)), "writeable": bool(b.flags.writeable),
            "task": ember.get(total.remote(ref)),
            "node2_task": [int(c.sum()), c.nbytes],
            "mapped": worker.global_worker().core.plasma._view is not None,
            "big": big_ok,
        }
        del b, c, ref
        ember.shutdown()
        print("RESULT " + json.dumps(res))
    """)
    n = 2**17
    assert r["equal"] and not r["writeable"]
    assert r["task"] == [n * (n - 1) // 2, False, n * 8]
    assert r["node2_task"] == [3 * n, n * 8]
    assert r["big"]
    assert not r["mapped"]
