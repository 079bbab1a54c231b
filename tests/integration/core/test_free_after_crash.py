"""The owner's Free of an object once its last ref is dropped, after errors: a task whose worker
died mid-task, an error caught around get().

The task's push failed with the broken stream's error. That error, shared by every task of the
stream and kept by the stream's connection, held in its traceback the connection's reader frame
(a reference cycle) and the frame of each waiter that raised it, with the task's entry and so
its argument refs: the argument's last `ObjectRef` went only when the cyclic GC next ran, which
in a long-lived driver (after test_multinode, say) may be much later. The owner's Free then
waited with it, and every copy of the object stayed. Likewise an error that get() raised kept
the frame that raised it (its own local) and, caught in a user's function, that function's frame.

These tests run with the cyclic GC off, so only reference counts free anything: they do not
depend on when a collection happens to run (nor on which tests ran before)."""
from __future__ import annotations

import gc
import os
import signal
import time
from typing import Iterator

import numpy as np
import pytest

import ember
from ember import exceptions as ex
from ember.testing import LocalCluster, wait_for
from ember_common import rpc
from ember_common.proto import objmgr_pb2, objmgr_pb2_grpc

MiB = 2**20


def _big_objects(address: str) -> list[objmgr_pb2.ObjectStat]:
    ch = rpc.sync_channel(address)
    try:
        return [o for o in objmgr_pb2_grpc.ObjectManagerStub(ch).ListObjects(
            objmgr_pb2.ListObjectsRequest(), timeout=5).objects if o.size >= MiB]
    finally:
        ch.close()


@pytest.fixture
def no_cyclic_gc() -> Iterator[None]:
    """Only reference counting frees objects while the test runs."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture
def cluster(no_cyclic_gc):
    with LocalCluster() as c:
        c.add_node({"CPU": 1}, is_head=True)
        node = c.add_node({"CPU": 1, "b": 1}, num_prestart_workers=1)
        ember.init(address=c.gcs_address)
        try:
            yield c, node
        finally:
            ember.shutdown()


@ember.remote(max_retries=0)
def hold(arr: np.ndarray, pid_file: str) -> int:
    with open(pid_file + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(pid_file + ".tmp", pid_file)
    time.sleep(600)  # killed before it returns
    return int(arr[0])


def _run_and_kill(task, arg, pid_file) -> None:
    out = task.remote(arg, str(pid_file))
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), timeout_s=60,
                       what="the task to start"))
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ex.WorkerCrashedError):
        ember.get(out, timeout=60)


def test_argument_of_a_crashed_task_is_freed_on_every_node_once_dropped(cluster, tmp_path):
    """The task runs on node b (a copy of its argument is pulled there); its worker is killed;
    once the driver drops the argument, its owner's Free reaches both copies."""
    c, node = cluster
    stores = [c.nodes[0].record.objmgr_address, node.record.objmgr_address]
    ref = ember.put(np.ones(8 * MiB, dtype=np.uint8))
    _run_and_kill(hold.options(resources={"b": 1}), ref, tmp_path / "pid")
    assert all(_big_objects(a) for a in stores), "both copies should be there while ref lives"
    del ref
    wait_for(lambda: not any(_big_objects(a) for a in stores), timeout_s=30,
             what="the owner to free both copies once the last ref went "
                  f"(left: {[_big_objects(a) for a in stores]})")


@ember.remote(resources={"nowhere": 1})
def never() -> None:
    pass


def test_a_caught_error_keeps_no_frame_alive(cluster):
    """An error get() raises (here a cancelled task's) caught in a function: once the function
    returns, the refs in its locals go (the error did not keep its frame in a cycle)."""
    c, _ = cluster
    head = c.nodes[0].record.objmgr_address

    def helper() -> None:
        ref = ember.put(np.ones(4 * MiB, dtype=np.uint8))
        assert _big_objects(head)
        waiting = never.remote()  # infeasible: it waits until cancelled
        ember.cancel(waiting)
        try:
            ember.get(waiting, timeout=60)
        except ex.TaskCancelledError:
            pass
        assert ref is not None  # kept until here

    helper()
    wait_for(lambda: not _big_objects(head), timeout_s=30,
             what=f"the put object freed once the function returned (left: {_big_objects(head)})")
