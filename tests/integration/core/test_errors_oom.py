"""The raylet's memory monitor on a real node: a task that keeps allocating is killed and its
owner's get raises OutOfMemoryError (so do the calls of an actor killed so, once it is dead, as
Ray's); the cluster keeps working afterwards.

Where this process may create a memory cgroup (cgroup v1 or v2, as root), the node's raylet is
moved into one of its own, limited to 2 GiB, with the threshold at half of it: the monitor reads
the raylet's own cgroup, so what the rest of the machine does cannot move the threshold.
Elsewhere the threshold is set relative to the memory the machine uses when the test starts
(plus 1 GiB). Either way the task allocates at most 1.5 GiB; before checking that the cluster
still works the test waits for the node's memory to be back under the threshold."""
from __future__ import annotations

import contextlib
import os
import time
from typing import Callable, Iterator

import pytest

import ember
from ember import exceptions as ex
from ember.testing import LocalCluster, wait_for
from ember_raylet.memory_monitor import MemorySnapshot, own_cgroups, read_memory

MiB = 2**20
MAX_ALLOC = 1536 * MiB
CGROUP_LIMIT = 2048 * MiB


@contextlib.contextmanager
def memory_cgroup() -> Iterator[str | None]:
    """A fresh memory cgroup under this process's own, limited to CGROUP_LIMIT (None when
    this process may not make one); removed at the end."""
    v2, v1 = own_cgroups()
    root = "/sys/fs/cgroup"
    if os.path.exists(os.path.join(root, "memory.max")) or (v2 and os.path.exists(
            os.path.join(root, v2.lstrip("/"), "memory.max"))):
        base, limit_file = os.path.join(root, (v2 or "/").lstrip("/")), "memory.max"
    else:
        base, limit_file = os.path.join(root, "memory", (v1 or "/").lstrip("/")), "memory.limit_in_bytes"
    path = os.path.join(base, f"ember-oom-test-{os.urandom(4).hex()}")
    try:
        os.mkdir(path)
    except OSError:
        yield None
        return
    try:
        with open(os.path.join(path, limit_file), "w") as f:
            f.write(str(CGROUP_LIMIT))
    except OSError:
        os.rmdir(path)
        yield None
        return
    try:
        yield path
    finally:
        wait_for(lambda: _rmdir(path), timeout_s=30, what=f"the test cgroup {path} to empty")


def _rmdir(path: str) -> bool:
    try:
        os.rmdir(path)
        return True
    except OSError:
        return False


@pytest.fixture
def oom_cluster(monkeypatch):
    with memory_cgroup() as cgroup:
        if cgroup is not None:
            threshold = 0.5
        else:
            snap = read_memory()
            threshold = (snap.used_bytes + 1024 * MiB) / snap.total_bytes
        monkeypatch.setenv("EMBER_MEMORY_MONITOR_REFRESH_MS", "50")
        monkeypatch.setenv("EMBER_MEMORY_USAGE_THRESHOLD", f"{threshold:.6f}")
        monkeypatch.setenv("EMBER_MIN_MEMORY_FREE_BYTES", "-1")
        monkeypatch.setenv("EMBER_TASK_OOM_RETRIES", "1")  # the driver's budget
        with LocalCluster() as c:
            node = c.add_node({"CPU": 2}, is_head=True, num_prestart_workers=0)
            raylet_pid = node.raylet.pid
            if cgroup is not None:  # before it starts any worker: they all start in there
                with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                    f.write(str(raylet_pid))

            def node_memory() -> MemorySnapshot:
                return read_memory(proc_cgroup=f"/proc/{raylet_pid}/cgroup")

            if cgroup is not None:
                assert node_memory().total_bytes == CGROUP_LIMIT
            ember.init(address=c.gcs_address)
            try:
                yield node, threshold, node_memory
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
    node, threshold, node_memory = oom_cluster
    with pytest.raises(ex.OutOfMemoryError) as info:
        ember.get(hog.remote(), timeout=120)
    msg = str(info.value)
    # Its owner's only task on the node: failed at once, its retries (max_retries=3) unused.
    assert "low on memory" in msg and node.node_id in msg, msg
    assert f"memory usage threshold of {threshold:.6f}" in msg, msg
    assert isinstance(info.value, ex.RayError)
    _memory_back_under(threshold, node_memory)
    assert ember.get([one.remote() for _ in range(4)], timeout=60) == [1] * 4


def _memory_back_under(threshold: float, node_memory: Callable[[], MemorySnapshot]) -> None:
    wait_for(lambda: node_memory().fraction < threshold - 0.01, timeout_s=60,
             what=f"the node's memory to come back under the threshold ({node_memory()})")


def test_an_actor_killed_for_memory_dies_with_out_of_memory_error(oom_cluster):
    _, threshold, node_memory = oom_cluster
    a = Holder.remote()
    with pytest.raises(ex.OutOfMemoryError) as info:
        ember.get(a.grow.remote(), timeout=120)
    assert "memory monitor" in str(info.value) and "is dead" in str(info.value), str(info.value)
    with pytest.raises(ex.OutOfMemoryError):  # dead for good (max_restarts=0): later calls too
        ember.get(a.grow.remote(), timeout=60)
    _memory_back_under(threshold, node_memory)
    assert ember.get(one.remote(), timeout=60) == 1


@ember.remote(max_retries=3)
def hold(mib: int, started: str, release: str) -> int:
    block = b"\x01" * (mib * MiB)
    open(started, "w").close()
    wait_for(lambda: os.path.exists(release), timeout_s=120, what="the test to release it")
    return len(block) // MiB


@ember.remote(max_retries=3)
def grow(attempts: str) -> int:
    with open(attempts, "a") as f:
        f.write("attempt\n")
    return _hog()


def test_the_newest_of_an_owners_tasks_is_killed_and_retried_on_its_oom_budget(oom_cluster, tmp_path):
    """Two tasks of one owner: the newer is killed and, its owner having another task there,
    retried on EMBER_TASK_OOM_RETRIES (1 here) apart from max_retries; then OutOfMemoryError.
    The older one is left alone and finishes."""
    started, release, attempts = (str(tmp_path / n) for n in ("started", "release", "attempts"))
    older = hold.remote(400, started, release)
    wait_for(lambda: os.path.exists(started), timeout_s=60, what="the older task to hold its memory")
    with pytest.raises(ex.OutOfMemoryError):
        ember.get(grow.remote(attempts), timeout=180)
    with open(attempts) as f:
        assert len(f.readlines()) == 2  # the first run and its one OOM retry
    open(release, "w").close()
    assert ember.get(older, timeout=60) == 400
