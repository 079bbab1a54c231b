"""Prometheus metrics: a real cluster with `--metrics-export-port`, scraped over HTTP on
loopback like Prometheus (or curl) would, with values that follow what the cluster does."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

import ember
from ember.testing import wait_for


def free_port_range(n: int) -> int:
    """A base port with n consecutive free ports after it (checked by binding them)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("0.0.0.0", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """{sample or family name: [(labels, value), ...]} from http://127.0.0.1:port/metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        out.setdefault(fam.name, [])  # families without samples yet are listed too
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def value(samples, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    return sum(v for lb, v in samples.get(name, []) if all(lb.get(k) == w for k, w in labels.items()))


def rpc_calls(port: int, method: str) -> float:
    """How many calls of an RPC method the service on port has served."""
    return value(scrape(port), "ember_rpc_server_latency_seconds_count", method=method)


@pytest.fixture(scope="module")
def cluster():
    base = free_port_range(3)
    ember.init(num_cpus=2, num_gpus=1, object_store_memory=256 * 2**20, _metrics_export_port=base)
    yield {"raylet": base, "objmgr": base + 1, "gcs": base + 2}
    ember.shutdown()


def test_every_service_serves_the_metrics(cluster):
    raylet, objmgr, gcs = (scrape(cluster[k]) for k in ("raylet", "objmgr", "gcs"))
    node_id = ember.get_runtime_context().get_node_id()
    for name in ["ember_node_cpu_utilization", "ember_node_gpu_utilization", "ember_node_mem_used",
                 "ember_tasks_running", "ember_tasks_queued", "ember_workers"]:
        assert name in raylet, name
    assert value(raylet, "ember_node_mem_used", node_id=node_id) > 0
    assert 0 <= value(raylet, "ember_node_cpu_utilization", node_id=node_id) <= 100
    # One logical GPU and no NVML here: one sample, the share leased (none yet).
    assert [lb["gpu"] for lb, _ in raylet["ember_node_gpu_utilization"]] == ["0"]
    for name in ["ember_object_store_used_bytes", "ember_object_store_capacity_bytes",
                 "ember_object_store_spilled_bytes"]:
        assert name in objmgr, name
    assert value(objmgr, "ember_object_store_capacity_bytes", node_id=node_id) >= 256 * 2**20 - 4096
    assert "ember_actors_total" in gcs and "ember_nodes_total" in gcs
    assert value(gcs, "ember_nodes_total", state="ALIVE") == 1
    for samples in (raylet, objmgr, gcs):
        assert "ember_rpc_server_latency_seconds" in samples
        assert "process_resident_memory_bytes" in samples


def test_tasks_running_and_gpu_use_are_live(cluster, tmp_path):
    gate = tmp_path / "go"

    @ember.remote(num_gpus=1)
    def waits(path):
        while not os.path.exists(path):
            time.sleep(0.01)
        return 1

    ref = waits.remote(str(gate))
    wait_for(lambda: value(scrape(cluster["raylet"]), "ember_tasks_running") >= 1,
             what="ember_tasks_running >= 1 while a task runs")
    assert value(scrape(cluster["raylet"]), "ember_node_gpu_utilization", gpu="0") == 100.0
    gate.touch()
    assert ember.get(ref) == 1
    wait_for(lambda: value(scrape(cluster["raylet"]), "ember_tasks_running") == 0,
             what="ember_tasks_running back to 0")
    assert value(scrape(cluster["raylet"]), "ember_node_gpu_utilization", gpu="0") == 0.0


def test_object_store_bytes_follow_puts_and_frees(cluster):
    import numpy as np

    def used():
        return value(scrape(cluster["objmgr"]), "ember_object_store_used_bytes")

    before = used()
    ref = ember.put(np.ones(10 * 2**20, dtype=np.uint8))
    after = used()
    assert after >= before + 10 * 2**20
    objects = scrape(cluster["objmgr"])["ember_object_store_num_objects"]
    assert sum(v for _, v in objects) >= 1
    del ref
    wait_for(lambda: used() <= after - 10 * 2**20, what="used bytes to drop after the ref is gone")


def test_actors_total_by_state(cluster):
    @ember.remote
    class A:
        def ping(self):
            return "pong"

    a = A.remote()
    assert ember.get(a.ping.remote()) == "pong"
    assert value(scrape(cluster["gcs"]), "ember_actors_total", state="ALIVE") >= 1
    ember.kill(a)
    wait_for(lambda: value(scrape(cluster["gcs"]), "ember_actors_total", state="DEAD") >= 1,
             what="a killed actor counted as DEAD")


def test_rpc_latency_histograms_count_calls(cluster):
    import numpy as np

    creates, kv = rpc_calls(cluster["objmgr"], "Create"), rpc_calls(cluster["gcs"], "InternalKVPut")
    leases = rpc_calls(cluster["raylet"], "RequestWorkerLease")

    @ember.remote(num_cpus=2)  # a new shape: a fresh lease
    def f():
        return 1

    assert ember.get(f.remote()) == 1
    ember.put(np.zeros(2 * 2**20, dtype=np.uint8))
    assert rpc_calls(cluster["objmgr"], "Create") > creates
    assert rpc_calls(cluster["gcs"], "InternalKVPut") > kv  # the function table entry
    assert rpc_calls(cluster["raylet"], "RequestWorkerLease") > leases
    raylet = scrape(cluster["raylet"])
    buckets = [(lb, v) for lb, v in raylet["ember_rpc_server_latency_seconds_bucket"]
               if lb["method"] == "RequestWorkerLease"]
    assert buckets and max(v for _, v in buckets) == rpc_calls(cluster["raylet"], "RequestWorkerLease")


def test_a_burst_on_a_full_cluster_waits_in_few_lease_requests(cluster):
    # Two CPUs: at most two one-CPU leases at once. Once a grant has said so (Grant.capacity),
    # the owner keeps one request beyond its leases waiting at the raylet during a burst, not
    # max_pending_lease_requests (10) of which eight could only wait and be cancelled when the
    # burst drains (before: ~10 requests and ~8 cancels per burst of 500, each ~0.5 ms of raylet CPU).
    def count(method):
        return rpc_calls(cluster["raylet"], method)

    @ember.remote(num_cpus=1)
    def g():
        return b"ok"

    assert len(ember.get([g.remote() for _ in range(200)])) == 200  # the capacity learned
    requests, cancels = count("RequestWorkerLease"), count("CancelWorkerLease")
    bursts = 20
    for _ in range(bursts):
        assert ember.get([g.remote() for _ in range(500)]) == [b"ok"] * 500
    requests, cancels = count("RequestWorkerLease") - requests, count("CancelWorkerLease") - cancels
    # ~3 requests and ~2 cancels per burst (2 leases + 1 waiting; a cancel may cross a grant);
    # before the cap, 12-15 of each
    assert requests <= 5 * bursts, requests
    assert cancels <= 5 * bursts, cancels


def test_not_found_and_bad_method(cluster):
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{cluster['gcs']}/nope", timeout=10)
    assert e.value.code == 404
    e.value.close()


def test_cli_start_metrics_ports_and_status(tmp_path):
    env = dict(os.environ, EMBER_TEMP_DIR=str(tmp_path / "ember-tmp"))
    base = free_port_range(3)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        gcs_port = s.getsockname()[1]

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "ember.scripts", *args], env=env,
                              capture_output=True, text=True, timeout=120)

    try:
        r = cli("start", "--head", "--port", str(gcs_port), "--num-cpus", "1",
                "--metrics-export-port", str(base))
        assert r.returncode == 0, r.stderr
        assert f"http://127.0.0.1:{base}/metrics" in r.stdout
        for port, name in [(base, "ember_tasks_running"), (base + 1, "ember_object_store_used_bytes"),
                           (base + 2, "ember_actors_total")]:
            assert name in scrape(port)
        status = cli("status").stdout
        assert "Metrics (Prometheus):" in status
        for port in (base, base + 1, base + 2):
            assert f":{port}/metrics" in status
    finally:
        cli("stop")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the ports are free again once the services are gone
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{base}/metrics", timeout=1).close()
        except OSError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("metrics endpoint still up after ember stop")


def test_bad_metrics_port_is_a_clear_error(tmp_path):
    env = dict(os.environ, EMBER_TEMP_DIR=str(tmp_path / "ember-tmp"))
    r = subprocess.run([sys.executable, "-m", "ember.scripts", "start", "--head", "--port", "0",
                        "--metrics-export-port", "70000"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0
    assert "metrics export port" in r.stderr and "Traceback" not in r.stderr


HOOK = """
import sys, urllib.request
from ember_common import metrics
assert metrics.configure(int(sys.argv[1]), "serve-proxy")
h = metrics.histogram("ember_serve_http_latency_seconds", "HTTP latency", ("route",))
h.labels("/hello").observe(0.01)
state = {"n": 3}
metrics.gauge("ember_serve_replicas", "replicas", lambda: state["n"])
port = metrics.start_in_thread("127.0.0.1")
state["n"] = 5
with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
    print(r.read().decode())
"""


def test_hook_for_other_services():
    """What serve-proxy calls: its own metrics, served from a thread, values read at scrape."""
    port = free_port_range(1)
    r = subprocess.run([sys.executable, "-c", HOOK, str(port)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    samples = {}
    for fam in text_string_to_metric_families(r.stdout):
        for s in fam.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    assert value(samples, "ember_serve_replicas") == 5
    assert value(samples, "ember_serve_http_latency_seconds_count", route="/hello") == 1
    assert "process_cpu_seconds_total" in samples
