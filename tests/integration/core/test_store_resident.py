"""The node's object store keeps its pages resident, as a user's cluster runs it: after start-up
the object manager's arena mapping is backed (Rss of the mapping ~ its size, read from
/proc/<objmgr pid>/smaps), so is the driver's own mapping, a large put/get round trip is
zero-copy, and deleting the object hands no page back to the kernel."""
from __future__ import annotations

import gc
import os
import sys

import numpy as np
import pytest

import ember
from ember._private import worker as ember_worker
from ember.testing import wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc smaps (Linux)")

MiB = 2**20
STORE = 64 * MiB
SLACK = 256 * 1024  # pages of the mapping's edges the kernel may account elsewhere


def arena_rss(pid: int | str, path: str) -> int:
    """Resident bytes of process pid's mapping(s) of the file at path."""
    total, inside = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            first = line.split(maxsplit=1)[0]
            if "-" in first and ":" not in first:  # a mapping's header line
                inside = line.rstrip("\n").endswith(" " + path)
            elif inside and first == "Rss:":
                total += int(line.split()[1]) * 1024
    return total


def objmgr_pid(store_dir: str) -> int:
    """The object manager serving store_dir (its command line names it)."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    cmd = f.read().decode(errors="replace")
            except OSError:
                continue
            if "ember_objmgr" in cmd and store_dir in cmd:
                return int(name)
    raise AssertionError(f"no object manager process for {store_dir}")


def in_mapping(addr: int, nbytes: int, path: str) -> bool:
    """Whether [addr, addr+nbytes) lies inside this process's mapping of path."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5] == path:
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                if lo <= addr and addr + nbytes <= hi:
                    return True
    return False


@pytest.fixture(scope="module")
def node():
    ember.init(num_cpus=1, object_store_memory=STORE)
    try:
        head = ember_worker._gcs_nodes()[0]
        yield head
    finally:
        ember.shutdown()


def test_arena_resident_after_start_and_after_delete(node):
    arena = os.path.join(node.store_dir, "arena")
    pid = objmgr_pid(node.store_dir)
    wait_for(lambda: arena_rss(pid, arena) >= STORE - SLACK, timeout_s=60,
             what="the object manager's arena to be prefaulted")
    wait_for(lambda: arena_rss("self", arena) >= STORE - SLACK, timeout_s=60,
             what="the driver's mapping of the arena to be prefaulted")
    on_disk = os.stat(arena).st_blocks * 512
    assert on_disk >= STORE - SLACK

    arr = np.arange(40 * MiB // 8, dtype=np.int64)
    ref = ember.put(arr)
    out = ember.get(ref)
    assert in_mapping(out.__array_interface__["data"][0], out.nbytes, arena)  # zero-copy view
    assert not out.flags.writeable and out[-1] == arr[-1]
    del out, ref
    gc.collect()

    wait_for(lambda: _store_used(node) == 0, timeout_s=30, what="the object to be deleted from the store")
    assert os.stat(arena).st_blocks * 512 == on_disk  # no page returned to the kernel
    assert arena_rss(pid, arena) >= STORE - SLACK


def _store_used(node) -> int:
    from ember_common import rpc
    from ember_common.proto import objmgr_pb2, objmgr_pb2_grpc

    ch = rpc.sync_channel(node.objmgr_address)
    try:
        stub = objmgr_pb2_grpc.ObjectManagerStub(ch)
        return stub.GetStoreStats(objmgr_pb2.GetStoreStatsRequest(), timeout=5).used_bytes
    finally:
        ch.close()
