"""Object fault tolerance on a real multi-node cluster: a task's return lost with its node is
rebuilt on get by running the task again (its lost arguments first), within max_retries; a put
object or an object whose owner died is not, and get names why. Nodes are killed with SIGKILL
(raylet, object manager and workers); replacement nodes bring the resources the reruns need."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ember
from ember import exceptions as ex
from ember.testing import LocalCluster, wait_for
from ember_common import tracing

N = 256 * 1024  # int64s: 2 MiB, far over the inline limit, so values live in shared memory


@pytest.fixture(scope="module")
def cluster():
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_NODE_DEATH_TIMEOUT_S", "2")
    c = LocalCluster()
    try:
        c.add_node({"CPU": 1}, is_head=True)
        ember.init(address=c.gcs_address)
        yield c
    finally:
        ember.shutdown()
        c.shutdown()
        mp.undo()


def core():
    return ember._private.worker.global_worker().core


def node_of(ref) -> str:
    entry = core().store.get(ref.binary())
    assert entry is not None and entry.in_plasma, "expected a value in shared memory"
    return entry.node_id


def kill_and_wait(c, node) -> None:
    c.kill_raylet(node)
    wait_for(lambda: not any(n["NodeID"] == node.node_id and n["Alive"] for n in ember.nodes()),
             timeout_s=30, what=f"node {node.node_id} to be marked dead")


@ember.remote(max_retries=2)
def produce(n, start):
    return np.arange(start, start + n, dtype=np.int64)


@ember.remote(max_retries=2)
def add_one(a):
    return a + 1


def test_a_return_lost_with_its_node_is_rebuilt_on_get(cluster):
    a = cluster.add_node({"CPU": 1, "lin1": 1})
    ref = produce.options(resources={"lin1": 1}).remote(N, 7)
    ready, _ = ember.wait([ref], timeout=120)
    assert ready and node_of(ref) == a.node_id  # not read yet: the only copy is on node a
    before = core().ref_table.lineage.stats()["reconstructions"]

    cluster.kill_raylet(a)  # no wait for the GCS to notice: the failed pull is the signal
    b = cluster.add_node({"CPU": 1, "lin1": 1})
    value = ember.get(ref, timeout=180)
    assert value[0] == 7 and value[-1] == 7 + N - 1 and len(value) == N
    assert node_of(ref) == b.node_id
    assert core().ref_table.lineage.stats()["reconstructions"] == before + 1


def test_lost_arguments_are_rebuilt_first_recursively(cluster):
    pa = cluster.add_node({"CPU": 1, "lin2a": 1})
    pb = cluster.add_node({"CPU": 1, "lin2b": 1})
    x = produce.options(resources={"lin2a": 1}).remote(N, 100)
    y = add_one.options(resources={"lin2b": 1}).remote(x)
    ready, _ = ember.wait([y], timeout=120)
    assert ready and node_of(x) == pa.node_id and node_of(y) == pb.node_id
    del x  # its value is freed; the lineage y needs stays with the owner
    lineage = core().ref_table.lineage
    before = lineage.stats()["reconstructions"]

    kill_and_wait(cluster, pa)  # the node with the argument
    kill_and_wait(cluster, pb)  # and the node with the output
    cluster.add_node({"CPU": 1, "lin2a": 1})
    cluster.add_node({"CPU": 1, "lin2b": 1})
    value = ember.get(y, timeout=180)
    assert value[0] == 101 and value[-1] == 100 + N and len(value) == N
    assert lineage.stats()["reconstructions"] == before + 2  # y, and x under it

    # Dropping y drops the whole chain's lineage: nothing grows per task.
    entries = lineage.stats()["entries"]
    del y, value, ready
    wait_for(lambda: lineage.stats()["entries"] <= entries - 2, timeout_s=10,
             what="y's and x's lineage to be dropped with y's last reference")


def test_a_task_whose_argument_was_lost_before_it_ran_gets_it_rebuilt(cluster):
    """The consumer is submitted after the producer's node died: its worker cannot fetch the
    argument, so the owner rebuilds the argument and runs the consumer again."""
    a = cluster.add_node({"CPU": 1, "lin7": 1})
    x = produce.options(resources={"lin7": 1}).remote(N, 5)
    ready, _ = ember.wait([x], timeout=120)
    assert ready and node_of(x) == a.node_id
    lineage = core().ref_table.lineage
    before = lineage.stats()["reconstructions"]
    cluster.kill_raylet(a)
    cluster.add_node({"CPU": 1, "lin7": 1})
    value = ember.get(add_one.remote(x), timeout=180)
    assert value[0] == 6 and value[-1] == 5 + N and len(value) == N
    assert lineage.stats()["reconstructions"] == before + 1


def test_several_returns_lost_together_are_rebuilt_by_one_get(cluster):
    a = cluster.add_node({"CPU": 1, "lin8": 1})
    refs = [produce.options(resources={"lin8": 1}).remote(N, 1000 * i) for i in range(3)]
    ready, _ = ember.wait(refs, num_returns=3, timeout=120)
    assert len(ready) == 3 and {node_of(r) for r in refs} == {a.node_id}
    del ready
    cluster.kill_raylet(a)
    cluster.add_node({"CPU": 2, "lin8": 2})
    values = ember.get(refs, timeout=180)
    assert [int(v[0]) for v in values] == [0, 1000, 2000]


def test_a_task_with_no_retries_left_is_not_rebuilt_and_get_says_why(cluster):
    a = cluster.add_node({"CPU": 1, "lin3": 1})
    ref = produce.options(resources={"lin3": 1}, max_retries=0).remote(N, 1)
    ready, _ = ember.wait([ref], timeout=120)
    assert ready and node_of(ref) == a.node_id
    kill_and_wait(cluster, a)
    with pytest.raises(ex.ObjectReconstructionFailedMaxAttemptsExceededError,
                       match=r"produce\(\).*max_retries=0"):
        ember.get(ref, timeout=60)
    # The cluster keeps working, and the error is an ObjectLostError as Ray's is.
    assert issubclass(ex.ObjectReconstructionFailedMaxAttemptsExceededError, ex.ObjectLostError)
    assert ember.get(add_one.remote(1), timeout=60) == 2


def test_lineage_does_not_grow_with_tasks_whose_refs_are_gone(cluster):
    lineage = core().ref_table.lineage
    start = lineage.stats()["entries"]
    for i in range(20):  # bounded: 20 big-return tasks, each ref dropped after its get
        ref = produce.remote(N, i)
        assert ember.get(ref, timeout=60)[0] == i
        del ref
    wait_for(lambda: lineage.stats()["entries"] <= start, timeout_s=10,
             what="the lineage of released returns to be dropped")
    assert lineage.stats()["bytes"] >= 0


class Holder:
    def __init__(self):
        self.ref = None

    def make(self):
        self.ref = ember.put(np.arange(N, dtype=np.int64))
        return [self.ref]  # nested: the caller borrows it; the actor owns it


def test_a_lost_put_object_raises_object_lost_error(cluster):
    """A put() value has no lineage: lost with its node's object store, get raises
    ObjectLostError naming what failed (its owner, an actor, is still alive)."""
    n = cluster.add_node({"CPU": 1, "lin5": 1})
    holder = ember.remote(Holder).options(resources={"lin5": 1}).remote()
    [ref] = ember.get(holder.make.remote(), timeout=120)
    cluster.kill_objmgr(n)
    with pytest.raises(ex.ObjectLostError, match="is lost") as info:
        ember.get(ref, timeout=60)
    assert not isinstance(info.value, ex.OwnerDiedError)
    assert ember.get(add_one.remote(1), timeout=60) == 2


def test_an_object_whose_owner_died_raises_owner_died_error(cluster):
    n = cluster.add_node({"CPU": 1, "lin6": 1})
    holder = ember.remote(Holder).options(resources={"lin6": 1}).remote()
    [ref] = ember.get(holder.make.remote(), timeout=120)
    kill_and_wait(cluster, n)
    with pytest.raises(ex.OwnerDiedError, match="owner"):
        ember.get(ref, timeout=60)


TRACED_DRIVER = textwrap.dedent("""
    import json, numpy as np
    import ember
    from ember.testing import LocalCluster
    from ember_common import metrics
    from opentelemetry import trace
    from prometheus_client import generate_latest

    metrics.configure(1, "driver")  # this process's registry (no endpoint is served)
    with LocalCluster() as c:
        c.add_node({"CPU": 1}, is_head=True)
        a = c.add_node({"CPU": 1, "t": 1})
        ember.init(address=c.gcs_address)

        @ember.remote(max_retries=1, resources={"t": 1})
        def produce():
            return np.arange(256 * 1024, dtype=np.int64)

        with trace.get_tracer("test").start_as_current_span("job") as root:
            trace_id = format(root.get_span_context().trace_id, "032x")
            ref = produce.remote()
            ember.wait([ref], timeout=120)
            c.kill_raylet(a)
            c.add_node({"CPU": 1, "t": 1})
            ok = int(ember.get(ref, timeout=120)[-1]) == 256 * 1024 - 1
        text = generate_latest(metrics.registry()).decode()
        ember.shutdown()
    print(json.dumps({"trace_id": trace_id, "ok": ok, "metrics": text}))
""")


def test_a_reconstruction_has_a_span_and_is_counted(tmp_path):
    """Tracing on: the rerun is a `reconstruct produce` span in the get's trace, with the
    rerun's submit and execute spans under it; metrics on: the counter says 1."""
    env = dict(os.environ, OTEL_TRACES_EXPORTER="ember_file", EMBER_TRACE_DIR=str(tmp_path),
               OTEL_BSP_SCHEDULE_DELAY="100", EMBER_NODE_DEATH_TIMEOUT_S="2")
    r = subprocess.run([sys.executable, "-c", TRACED_DRIVER], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ok"]
    assert "ember_object_reconstructions_total 1.0" in out["metrics"]
    spans = tracing.read_trace(str(tmp_path), out["trace_id"])
    rec = [s for s in spans if s["name"] == "reconstruct produce"]
    assert len(rec) == 1, sorted(s["name"] for s in spans)
    ids = {s["span_id"]: s for s in spans}
    under = [s for s in spans if s["parent_id"] == rec[0]["span_id"]]
    assert any(s["name"] == "submit produce" for s in under)
    submit = next(s for s in under if s["name"] == "submit produce")
    assert any(s["name"] == "execute produce" and s["parent_id"] == submit["span_id"]
               for s in spans)
    assert rec[0]["parent_id"] in ids  # inside the driver's trace, not a root of its own


BOUNDED_DRIVER = textwrap.dedent("""
    import json, numpy as np
    import ember
    from ember import exceptions as ex
    from ember.testing import LocalCluster

    with LocalCluster() as c:
        c.add_node({"CPU": 1}, is_head=True)
        a = c.add_node({"CPU": 1, "t": 1})
        ember.init(address=c.gcs_address)

        @ember.remote(max_retries=3, resources={"t": 1})
        def produce():
            return np.arange(256 * 1024, dtype=np.int64)

        ref = produce.remote()
        ember.wait([ref], timeout=120)
        lineage = ember._private.worker.global_worker().core.ref_table.lineage
        stats = lineage.stats()
        c.kill_raylet(a)
        c.add_node({"CPU": 1, "t": 1})
        try:
            ember.get(ref, timeout=120)
            error = None
        except ex.ObjectLostError as e:
            error = [type(e).__name__, str(e)]
        ember.shutdown()
    print(json.dumps({"stats": stats, "error": error}))
""")


def test_lineage_past_the_byte_bound_is_evicted_and_get_says_so():
    """EMBER_MAX_LINEAGE_BYTES bounds what an owner keeps: with a bound below one spec, the
    spec is evicted at once and the lost return fails naming the eviction and the variable."""
    env = dict(os.environ, EMBER_MAX_LINEAGE_BYTES="1", EMBER_NODE_DEATH_TIMEOUT_S="2")
    r = subprocess.run([sys.executable, "-c", BOUNDED_DRIVER], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["stats"]["entries"] == 1 and out["stats"]["bytes"] == 0
    assert out["stats"]["evictions"] == 1
    name, message = out["error"]
    assert name == "ObjectReconstructionFailedLineageEvictedError"
    assert "EMBER_MAX_LINEAGE_BYTES" in message and "evicted" in message
