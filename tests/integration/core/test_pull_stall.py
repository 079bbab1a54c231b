"""Calls whose peer goes silent (issue 19, the chaos suite's hangs). A `get` whose pull hits an object manager that answers nothing (issue 19, the chaos suite's
hang): the node's objmgr is SIGSTOPped after a first pull connected to it, so the connection
stays established but no byte ever comes back and no reset either, as when a container's IP
vanishes. The pull must fail
within its stall deadline, and the get then rebuild the value elsewhere (lineage) instead of
waiting forever. Without the deadline the pull, and the get above it, never return.
A task whose whole node is SIGSTOPped while it runs (its worker's task stream stays open and
silent) is retried elsewhere once gRPC keepalive (EMBER_GRPC_KEEPALIVE_S) drops the stream.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import numpy as np
import pytest

import ember
from ember.testing import LocalCluster, wait_for

N = 256 * 1024  # int64s: 2 MiB, in shared memory
STALL_S = 3
KEEPALIVE_S = 2


@pytest.fixture(scope="module")
def cluster():
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_NODE_DEATH_TIMEOUT_S", "2")
    mp.setenv("EMBER_PULL_STALL_TIMEOUT_S", str(STALL_S))  # the objmgr processes inherit it
    mp.setenv("EMBER_GRPC_KEEPALIVE_S", str(KEEPALIVE_S))  # every process's channels and servers
    c = LocalCluster()
    try:
        c.add_node({"CPU": 1}, is_head=True)
        ember.init(address=c.gcs_address)
        yield c
    finally:
        ember.shutdown()
        c.shutdown()
        mp.undo()


@ember.remote(max_retries=2)
def produce(n, start):
    return np.arange(start, start + n, dtype=np.int64)


@ember.remote(max_retries=2)
def slow(pid_dir):
    with open(os.path.join(pid_dir, str(os.getpid())), "w"):
        pass
    time.sleep(3)
    return ember.get_runtime_context().get_node_id()


def _node_of(ref) -> str:
    entry = ember._private.worker.global_worker().core.store.get(ref.binary())
    assert entry is not None and entry.in_plasma, "expected a value in shared memory"
    return entry.node_id


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_a_pull_from_a_silent_objmgr_fails_over_to_a_rebuild(cluster):
    a = cluster.add_node({"CPU": 1, "stall1": 1})
    warm = produce.options(resources={"stall1": 1}).remote(N, 5)
    ref = produce.options(resources={"stall1": 1}).remote(N, 11)
    ready, _ = ember.wait([warm, ref], num_returns=2, timeout=120)
    assert len(ready) == 2 and _node_of(ref) == a.node_id  # the only copy is on node a, not read yet
    # A first pull connects this node's objmgr to a's: the connection then stays established
    # when a goes silent (gRPC bounds a connect by its own timeout, not a silent stream).
    assert ember.get(warm, timeout=60)[0] == 5

    objmgr_pid = a.procs[1].pid
    os.kill(objmgr_pid, signal.SIGSTOP)  # open socket, no answer, no RST
    out: dict[str, Any] = {}

    def reader() -> None:
        t0 = time.monotonic()
        try:
            out["value"] = ember.get(ref, timeout=90)
        except Exception as e:  # reported below
            out["error"] = e
        out["took_s"] = time.monotonic() - t0

    th = threading.Thread(target=reader, daemon=True)
    try:
        th.start()
        time.sleep(1.0)  # the pull is in flight, stuck on the silent object manager
        assert th.is_alive(), f"the get ended before its pull could stall: {out}"
        _kill(a.procs[0].pid)  # the node dies (its raylet); the objmgr stays stopped, not reset
        wait_for(lambda: not any(n["NodeID"] == a.node_id and n["Alive"] for n in ember.nodes()),
                 timeout_s=30, what=f"node {a.node_id} to be marked dead")
        cluster.add_node({"CPU": 1, "stall1": 1})  # where the rebuild runs
        th.join(120)
        assert not th.is_alive(), "the get still hangs on the stopped object manager after 120 s"
    finally:
        _kill(objmgr_pid)  # a SIGKILLed process resets its connections: a hung get ends too
        th.join(30)
    assert "error" not in out, f"the get failed instead of rebuilding: {out['error']!r}"
    assert out["took_s"] < 60, f"the get took {out['took_s']:.1f}s (stall deadline {STALL_S}s)"
    value = out["value"]
    assert value[0] == 11 and value[-1] == 11 + N - 1 and len(value) == N
    assert _node_of(ref) != a.node_id


def test_a_task_on_a_silent_node_is_retried_elsewhere(cluster, tmp_path):
    a = cluster.add_node({"CPU": 1, "stall2": 1})
    ref = slow.options(resources={"stall2": 1}).remote(str(tmp_path))
    wait_for(lambda: any(tmp_path.iterdir()), timeout_s=60, what="the task to start on node a")
    pids = [int(p.name) for p in tmp_path.iterdir()] + [p.pid for p in a.procs]
    for pid in pids:  # the whole node goes silent: its task stream stays open, unanswered
        os.kill(pid, signal.SIGSTOP)
    try:
        cluster.add_node({"CPU": 1, "stall2": 1})  # where the retry runs
        t0 = time.monotonic()
        node = ember.get(ref, timeout=60)  # GetTimeoutError if the push waits on the silent stream
        assert node != a.node_id
        assert time.monotonic() - t0 < 60
    finally:
        for pid in pids:
            _kill(pid)
