"""The raylet's memory monitor on a real node: a task that keeps allocating is killed and its
owner's get raises OutOfMemoryError (an actor's calls: ActorDiedError saying so); the cluster
keeps working afterwards.

The threshold is set relative to the memory the machine uses when the test starts (the node's
own processes plus about 1 GiB more), so the task never allocates more than 2 GiB whatever
else runs on the machine; before checking that the cluster still works the test waits for the
node's memory to be back under the threshold (the killed worker's pages freed)."""
from __future__ import annotations

import time

import pytest

import ember
from ember import exceptions as ex
from ember.testing import LocalCluster, wait_for
from ember_raylet.memory_monitor import read_memory

MiB = 2**20
MAX_ALLOC = 2048 * MiB


@pytest.fixture
def oom_cluster(monkeypatch):
    snap = read_memory()
    threshold = (snap.used_bytes + 1024 * MiB) / snap.total_bytes
    monkeypatch.setenv("EMBER_MEMORY_MONITOR_REFRESH_MS", "50")
    monkeypatch.setenv("EMBER_MEMORY_USAGE_THRESHOLD", f"{threshold:.6f}")
    monkeypatch.setenv("EMBER_MIN_MEMORY_FREE_BYTES", "-1")
    with LocalCluster() as c:
        node = c.add_node({"CPU": 2}, is_head=True, num_prestart_workers=0)
        ember.init(address=c.gcs_address)
        try:
            yield node, threshold
        finally:
            ember.shutdown()


def _hog() -> int:
    """Allocates (and touches) 64 MiB at a time, up to MAX_ALLOC; returns what it got to if
    nothing killed it."""
    chunks = []
    while len(chunks) * 64 * MiB < MAX_ALLOC:
        chunks.append(b"\x01" * (64 * MiB))
        time.sleep(0.05)
    time.sleep(1.0)  # the monitor's next look
    return len(chunks) * 64


hog = ember.remote(max_retries=3)(_hog)


@ember.remote
def one() -> int:
    return 1


@ember.remote(max_restarts=0)
class Holder:
    def grow(self) -> int:
        return _hog()


def test_a_task_that_overflows_memory_raises_out_of_memory_error(oom_cluster):
    node, threshold = oom_cluster
    with pytest.raises(ex.OutOfMemoryError) as info:
        ember.get(hog.remote(), timeout=120)
    msg = str(info.value)
    # Its owner's only task on the node: failed at once, its retries (max_retries=3) unused.
    assert "low on memory" in msg and node.node_id in msg, msg
    assert f"memory usage threshold of {threshold:.6f}" in msg, msg
    assert isinstance(info.value, ex.RayError)
    _memory_back_under(threshold)
    assert ember.get([one.remote() for _ in range(4)], timeout=60) == [1] * 4


def _memory_back_under(threshold: float) -> None:
    wait_for(lambda: read_memory().fraction < threshold - 0.01, timeout_s=60,
             what=f"the node's memory to come back under the threshold ({read_memory()})")


def test_an_actor_killed_for_memory_dies_saying_so(oom_cluster):
    _, threshold = oom_cluster
    a = Holder.remote()
    with pytest.raises(ex.ActorDiedError) as info:
        ember.get(a.grow.remote(), timeout=120)
    assert "memory monitor" in str(info.value), str(info.value)
    _memory_back_under(threshold)
    assert ember.get(one.remote(), timeout=60) == 1
