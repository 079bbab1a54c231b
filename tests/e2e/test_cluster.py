"""The compose cluster works: tasks, actors and large objects whose work lands on both nodes,
from a driver inside the cluster (`compose exec` on the head's raylet container, and the
`driver` service) and from a driver on the host through the published GCS port."""
from __future__ import annotations

import os
import socket
import subprocess

import numpy as np
import pytest

from .conftest import DRIVER_PRELUDE, Cluster


def test_two_nodes_alive(cluster: Cluster) -> None:
    out = cluster.exec_python("raylet-head", DRIVER_PRELUDE + """
nodes = [n for n in ember.nodes() if n["Alive"]]
print(len(nodes), ember.cluster_resources().get("CPU"))
""")
    assert out.split() == ["2", "4.0"], out


def test_services_run_as_non_root(cluster: Cluster) -> None:
    for service in ("gcs", "objmgr-head", "raylet-head", "etcd", "serve-proxy"):
        uid = subprocess.run(["docker", "exec", cluster.container(service), "id", "-u"],
                             capture_output=True, text=True, check=True).stdout.strip()
        assert uid == "10001", (service, uid)
    # the head's raylet and objmgr share /dev/shm: the arena the objmgr made is visible to the raylet
    r = cluster.run("exec -T raylet-head sh -c 'ls /dev/shm/ember-store/default/*/arena'")
    assert r.stdout.strip().endswith("/arena"), r.stdout


def test_tasks_land_on_both_nodes(cluster: Cluster) -> None:
    out = cluster.exec_python("raylet-head", DRIVER_PRELUDE + """
@ember.remote(num_cpus=1)
def square(x):
    time.sleep(0.5)
    return x * x, ember.get_runtime_context().get_node_id()

res = ember.get([square.remote(i) for i in range(12)])
assert [r[0] for r in res] == [i * i for i in range(12)], res
print(len({r[1] for r in res}))
""")
    assert out.strip() == "2"


def test_actors_on_both_nodes(cluster: Cluster) -> None:
    out = cluster.exec_python("raylet-head", DRIVER_PRELUDE + """
@ember.remote(num_cpus=1)
class Counter:
    def __init__(self):
        self.n = 0
    def incr(self, k):
        self.n += k
        return self.n
    def node(self):
        return ember.get_runtime_context().get_node_id()

actors = [Counter.remote() for _ in range(4)]   # 4 CPUs in the cluster: 2 per node
for a in actors:
    for k in range(10):
        a.incr.remote(k)
assert ember.get([a.incr.remote(0) for a in actors]) == [45] * 4
print(len(set(ember.get([a.node.remote() for a in actors]))))
""")
    assert out.strip() == "2"


def test_large_objects_between_nodes(cluster: Cluster) -> None:
    out = cluster.exec_python("raylet-head", DRIVER_PRELUDE + """
import numpy as np
arr = np.arange(8_000_000, dtype=np.int64)          # 64 MB, in the head node's store
ref = ember.put(arr)

@ember.remote(num_cpus=1)
def consume(a):
    time.sleep(1)                                   # keep the CPU so the next one spills over
    return int(a.sum()), ember.get_runtime_context().get_node_id()

@ember.remote(num_cpus=1)
def produce(n):
    time.sleep(1)
    return np.full(n, 7, dtype=np.uint8), ember.get_runtime_context().get_node_id()

res = ember.get([consume.remote(ref) for _ in range(4)])
assert all(r[0] == int(arr.sum()) for r in res), res
made = ember.get([produce.remote(30_000_000) for _ in range(4)])   # 30 MB results, read here
assert all(int(m[0].sum()) == 7 * 30_000_000 for m in made)
print(len({r[1] for r in res}), len({m[1] for m in made}))
""")
    assert out.split() == ["2", "2"], out


def test_driver_service(cluster: Cluster) -> None:
    """`docker compose run --rm driver ...`: a driver in a container of its own (remote client)."""
    r = cluster.run("run --rm -T driver python -c \"import ember, numpy as np; ember.init(); "
                    "f = ember.remote(lambda a: int(a.sum())); "
                    "print(ember.get(f.remote(np.ones(3_000_000, dtype=np.uint8))))\"", timeout=180)
    assert r.stdout.strip().splitlines()[-1] == "3000000", r.stdout + r.stderr


@pytest.fixture(scope="module")
def host_driver(cluster: Cluster):
    """ember.init() in this process, through the published GCS port. The host advertises its
    address on the compose network (the bridge's gateway) so that workers can reach it."""
    import ember

    old = os.environ.get("EMBER_NODE_IP")
    os.environ["EMBER_NODE_IP"] = cluster.gateway
    try:
        ember.init(address=f"127.0.0.1:{cluster.gcs_port}")
        yield ember
    finally:
        ember.shutdown()
        if old is None:
            os.environ.pop("EMBER_NODE_IP", None)
        else:
            os.environ["EMBER_NODE_IP"] = old


def test_host_driver_tasks_actors_objects(host_driver) -> None:
    ember = host_driver

    @ember.remote(num_cpus=1)
    def where(x):
        import time

        time.sleep(0.5)
        return x + 1, ember.get_runtime_context().get_node_id()

    res = ember.get([where.remote(i) for i in range(8)])
    assert [r[0] for r in res] == list(range(1, 9))
    assert len({r[1] for r in res}) == 2

    @ember.remote
    class Acc:
        def __init__(self) -> None:
            self.total = 0

        def add(self, a) -> int:
            self.total += int(a.sum())
            return self.total

    acc = Acc.remote()
    big = np.ones(5_000_000, dtype=np.uint8)     # 5 MB: through the object store, from the host
    ref = ember.put(big)
    assert ember.get(acc.add.remote(ref)) == 5_000_000
    assert ember.get(acc.add.remote(big)) == 10_000_000

    @ember.remote
    def make(n):
        return np.full(n, 3, dtype=np.uint8)

    out = ember.get(make.remote(20_000_000))      # 20 MB result read back by the host
    assert out.shape == (20_000_000,) and int(out[-1]) == 3


def test_job_submit_from_host(cluster: Cluster, tmp_path) -> None:
    """`ember job submit` on the host: the program runs on a cluster node, its output comes back."""
    import sys

    (tmp_path / "prog.py").write_text(
        "import ember, socket\n"
        "ember.init()\n"
        "f = ember.remote(lambda x: x * 3)\n"
        "print('RESULT', sum(ember.get([f.remote(i) for i in range(10)])), socket.gethostname())\n")
    env = dict(os.environ, EMBER_NODE_IP=cluster.gateway)
    r = subprocess.run([sys.executable, "-m", "ember.scripts", "job", "submit", "--address",
                        f"127.0.0.1:{cluster.gcs_port}", "--working-dir", str(tmp_path), "--",
                        "python", "prog.py"], env=env, capture_output=True, text=True,
                       errors="replace", timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    result = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT")]
    assert result and result[0].split()[1] == "135", r.stdout
    assert result[0].split()[2] != socket.gethostname()   # it ran in a container, not here


def test_every_service_serves_prometheus_metrics(cluster: Cluster) -> None:
    """EMBER_METRICS_EXPORT_PORT (9090 in compose) gives each service a /metrics endpoint at its
    role's offset; scraped from inside the containers, with live values."""
    scrape = """
import urllib.request
body = urllib.request.urlopen("http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
print("\\n".join(l for l in body.splitlines() if l.startswith({prefix!r})))
"""
    expect = {  # service: (port, metric prefix)
        "raylet-head": (9090, "ember_node_cpu_utilization"),
        "objmgr-head": (9091, "ember_object_store_capacity_bytes"),
        "gcs": (9092, "ember_nodes_total"),
        # no deployment yet, so no labelled samples: the series is declared
        "serve-proxy": (9093, "# TYPE ember_serve_proxy_request_seconds histogram"),
    }
    for service, (port, prefix) in expect.items():
        out = cluster.exec_python(service, scrape.format(port=port, prefix=prefix))
        assert out.strip().startswith(prefix), (service, out)
    nodes = cluster.exec_python("gcs", scrape.format(port=9092, prefix='ember_nodes_total{state="ALIVE"}'))
    assert float(nodes.split()[-1]) == 2.0, nodes
    capacity = cluster.exec_python("objmgr-head", scrape.format(port=9091, prefix="ember_object_store_capacity_bytes"))
    assert float(capacity.split()[-1]) > 0, capacity


def test_a_driver_in_a_container_is_reachable_from_the_other_node(cluster: Cluster) -> None:
    """`compose exec` leaves EMBER_NODE_IP unset: the driver must still give out an address the
    worker node can call (a ref passed inside a list is borrowed: its reader asks the owner, the
    driver), not 127.0.0.1. Before the fix the worker node's tasks failed with OwnerDiedError."""
    out = cluster.exec_python("raylet-head", DRIVER_PRELUDE + """
ctx = ember.get_runtime_context()
assert "EMBER_NODE_IP" not in __import__("os").environ
ref = ember.put(list(range(1000)))                  # owned by this driver

@ember.remote(num_cpus=1)
def read(boxed):
    time.sleep(0.5)                                 # hold the CPU so the tasks spread over both nodes
    return sum(ember.get(boxed[0])), ember.get_runtime_context().get_node_id()

res = ember.get([read.remote([ref]) for _ in range(8)], timeout=90)
assert {r[0] for r in res} == {sum(range(1000))}, res
print(len({r[1] for r in res}))
""")
    assert out.strip() == "2", out
