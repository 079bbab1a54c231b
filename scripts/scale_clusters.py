"""The scale envelope's cluster workloads (see scale_workloads.py): many nodes on one machine.

- nodes:      one-CPU nodes (Ember: `ember start --head` + `ember start --address`; Ray:
              ray.cluster_utils.Cluster, which starts the same processes without `ray stop`
              touching other clusters on the machine): join time, spread of 50 ms tasks, then
              more nodes: join time, the GCS's idle CPU, a fan-out of no-op tasks over them.
- lightnodes: N lightweight nodes (a raylet with one logical CPU, a small unprefaulted store,
              no prestarted worker; Ray: ray.cluster_utils nodes): join time, memory per
              node, the GCS's CPU per node per second while they only heartbeat (at N/4 and
              N nodes: the slope), the GCS's memory; then churn: a STRICT_SPREAD placement
              group of N one-CPU bundles made and removed in turn, each state held longer than
              a heartbeat, so that every node's free CPU flips and each flip reaches every
              subscriber of the node table: the GCS's CPU per node change.
"""
from __future__ import annotations

import collections
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

from scale_workloads import cpu_s, init_kwargs, pss_kb, size

from ember_common import envvars


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmberNodes:
    """Nodes started with the `ember` command, recorded in a private EMBER_TEMP_DIR."""

    def __init__(self) -> None:
        # scale_envelope.py gives the directory, to stop the nodes even if this process is killed.
        self.tmp = os.environ.get("SCALE_ENVELOPE_TMP") or tempfile.mkdtemp(prefix="ember-scale-")
        self.env = dict(os.environ, EMBER_TEMP_DIR=self.tmp)
        self.cli = [sys.executable, "-m", "ember._tools.cli"]
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.count = 0

    def _start(self, args: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.cli + ["start", "--num-cpus", "1", "--object-store-memory",
                                            str(80 * 2**20)] + args, env=self.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def head(self) -> None:
        p = self._start(["--head", "--port", str(self.port)])
        if p.wait(120) != 0:
            raise RuntimeError(f"ember start --head failed: {p.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        self.count = 1

    def add(self, n: int) -> None:
        """Starts n nodes, four `ember start --address` at a time."""
        for i in range(0, n, 4):
            procs = [self._start(["--address", self.address]) for _ in range(min(4, n - i))]
            for p in procs:
                if p.wait(120) != 0:
                    raise RuntimeError(f"ember start failed: {p.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        self.count += n

    def gcs_pid(self) -> int:
        for name in os.listdir(os.path.join(self.tmp, "nodes")):
            with open(os.path.join(self.tmp, "nodes", name)) as f:
                rec = json.load(f)
            for pid in rec.get("pids", []):
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"gcs" in f.read():
                        return int(pid)
        raise RuntimeError("no GCS process recorded")

    def stop(self) -> None:
        subprocess.run(self.cli + ["stop"], env=self.env, stdout=subprocess.DEVNULL, timeout=300)


class RayNodes:
    """Nodes of ray.cluster_utils.Cluster (its own processes only)."""

    def __init__(self) -> None:
        from ray.cluster_utils import Cluster

        self.cluster = Cluster()
        self.count = 0
        self.address = ""

    def head(self) -> None:
        self.cluster.add_node(num_cpus=1, object_store_memory=80 * 2**20, include_dashboard=False)
        self.address = self.cluster.address
        self.count = 1

    def add(self, n: int) -> None:
        for _ in range(n):
            self.cluster.add_node(num_cpus=1, object_store_memory=80 * 2**20)
        self.count += n

    def gcs_pid(self) -> int:
        procs = self.cluster.head_node.all_processes["gcs_server"]
        return int(procs[0].process.pid)

    def stop(self) -> None:
        self.cluster.shutdown()


def nodes(mod: Any, quick: bool) -> dict[str, Any]:
    c: Any = EmberNodes() if mod.__name__ == "ember" else RayNodes()
    first, total = size("spread_nodes", quick), size("fanout_nodes", quick)
    out: dict[str, Any] = {}
    try:
        t0 = time.monotonic()
        c.head()
        c.add(first - 1)
        mod.init(address=c.address, **init_kwargs(mod.__name__))
        _wait_nodes(mod, first)
        out["join_s_first"] = round(time.monotonic() - t0, 1)

        @mod.remote(num_cpus=1)
        def nap(s: float) -> str:
            time.sleep(s)
            return str(mod.get_runtime_context().get_node_id())

        n = size("spread_tasks", quick)
        mod.get([nap.remote(0) for _ in range(first)], timeout=300)  # workers up
        t0 = time.monotonic()
        where = collections.Counter(mod.get([nap.remote(0.05) for _ in range(n)], timeout=900))
        out.update(spread_s=round(time.monotonic() - t0, 1), spread_nodes_used=len(where),
                   spread_min=min(where.values()), spread_max=max(where.values()))
        t0 = time.monotonic()
        c.add(total - first)
        _wait_nodes(mod, total)
        out["join_s_more"] = round(time.monotonic() - t0, 1)
        time.sleep(2)
        gcs, idle = c.gcs_pid(), size("idle_s", quick)
        cpu0 = cpu_s(gcs)
        time.sleep(idle)
        out["gcs_idle_cpu_pct"] = round(100 * (cpu_s(gcs) - cpu0) / idle, 1)
        out["gcs_pss_mb"] = round(pss_kb(gcs) / 1024)
        n = size("fanout_tasks", quick)
        t0 = time.monotonic()
        where = collections.Counter(mod.get([nap.remote(0) for _ in range(n)], timeout=900))
        out.update(fanout_s=round(time.monotonic() - t0, 1), fanout_nodes_used=len(where),
                   nodes=total)
        return out
    finally:
        try:
            mod.shutdown()
        finally:
            c.stop()


class EmberLight:
    """Lightweight Ember nodes: ember.testing's LocalCluster (a GCS in memory; per node an
    object manager and a raylet with one logical CPU, an 8 MiB unprefaulted store and no
    prestarted worker), started four at a time."""

    def __init__(self) -> None:
        os.environ["EMBER_OBJECT_STORE_PREFAULT_BYTES"] = "0"
        from ember.testing.cluster import LocalCluster

        self.c = LocalCluster(object_store_memory=8 * 2**20)
        self.address = self.c.gcs_address
        self.gcs = self.c.gcs.pid if self.c.gcs else 0

    def add(self, n: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        first = not self.c.nodes
        with ThreadPoolExecutor(4) as ex:
            list(ex.map(lambda i: self.c.add_node({"CPU": 1}, is_head=first and i == 0,
                                                  num_prestart_workers=0), range(n)))

    def node_pids(self) -> list[list[int]]:
        return [[p.pid for p in nd.procs] for nd in self.c.nodes]

    def deaths(self) -> int | None:
        """How often the GCS declared a node dead (a late heartbeat; the node registers again)."""
        try:
            with open(os.path.join(self.c.session_dir, "logs", "gcs.err")) as f:
                return sum(1 for line in f if "marked DEAD" in line)
        except OSError:
            return None

    def stop(self) -> None:
        self.c.shutdown()


class RayLight:
    """Ray's nodes of ray.cluster_utils.Cluster, one logical CPU and the smallest store each."""

    def __init__(self) -> None:
        from ray.cluster_utils import Cluster

        self.c = Cluster()
        self.c.add_node(num_cpus=0, object_store_memory=80 * 2**20, include_dashboard=False)
        self.address = self.c.address
        self.gcs = int(self.c.head_node.all_processes["gcs_server"][0].process.pid)

    def add(self, n: int) -> None:
        for _ in range(n):
            self.c.add_node(num_cpus=1, object_store_memory=80 * 2**20)

    def node_pids(self) -> list[list[int]]:
        return [[int(p.process.pid) for ps in nd.all_processes.values() for p in ps]
                for nd in self.c.worker_nodes]

    def deaths(self) -> int | None:
        return None

    def stop(self) -> None:
        self.c.shutdown()


def lightnodes(mod: Any, n: int, quick: bool) -> dict[str, Any]:
    c: Any = EmberLight() if mod.__name__ == "ember" else RayLight()
    idle, out = size("idle_s", quick), {}
    base = 1 if mod.__name__ == "ray" else 0  # Ray's head node (no CPU) is one more node
    try:
        node_pct: list[float] = []

        def gcs_cpu_pct() -> float:
            """The GCS's CPU over `idle` seconds (% of a core); node_pct: each node's."""
            pids = c.node_pids()
            n0, c0 = [sum(_cpu(p) for p in ps) for ps in pids], cpu_s(c.gcs)
            time.sleep(idle)
            node_pct[:] = sorted(100 * (sum(_cpu(p) for p in ps) - a) / idle
                                 for ps, a in zip(pids, n0, strict=True))
            return 100 * (cpu_s(c.gcs) - c0) / idle

        quarter = max(1, n // 4)
        t0 = time.monotonic()
        c.add(quarter)
        mod.init(address=c.address, **init_kwargs(mod.__name__))
        _wait_nodes(mod, quarter + base)
        time.sleep(2)
        cpu_q = gcs_cpu_pct()
        t1 = time.monotonic()
        c.add(n - quarter)
        alive = _wait_alive(mod, n + base, 180) - base  # late heartbeats: some may flap
        joined = time.monotonic()
        time.sleep(2)
        cpu_n = gcs_cpu_pct()
        per_node = sorted(sum(pss_kb(p) for p in pids) for pids in c.node_pids())
        slope_us = 1e6 * (cpu_n - cpu_q) / 100 / max(1, n - quarter)
        out.update(light_nodes=n, light_alive=alive, light_join_s=round(joined - t0, 1),
                   light_join_per_s=round((n - quarter) / (joined - t1), 1),
                   light_node_pss_mb=round(per_node[len(per_node) // 2] / 1024, 1),
                   light_gcs_cpu_pct_quarter=round(cpu_q, 1), light_gcs_cpu_pct=round(cpu_n, 1),
                   gcs_us_per_node_s=round(slope_us, 1),
                   gcs_us_per_node_s_avg=round(1e6 * cpu_n / 100 / n, 1),
                   light_gcs_pss_mb=round(pss_kb(c.gcs) / 1024),
                   node_idle_cpu_pct=round(node_pct[len(node_pct) // 2], 2),
                   heartbeat_period_s=float(envvars.value("EMBER_HEARTBEAT_PERIOD_S")),
                   node_deaths=c.deaths())
        if _wait_alive(mod, n + base, 60) == n + base:  # the churn's group needs every node
            out.update(_churn(mod, c.gcs, n, 2 * size("idle_s", quick), cpu_n))
        out["node_deaths"] = c.deaths()
        return out
    finally:
        try:
            mod.shutdown()
        finally:
            c.stop()


def _cpu(pid: int) -> float:
    try:
        return cpu_s(pid)
    except OSError:
        return 0.0


def _churn(mod: Any, gcs: int, n: int, churn_s: float, idle_pct: float) -> dict[str, Any]:
    """Flips every node's free CPU (1 -> 0 -> 1) with a STRICT_SPREAD group of n bundles, each
    state held 1.2 s (over two heartbeats), for churn_s; the GCS's CPU above its idle level
    per node change (a change is one node's new free CPU, sent to every node table reader)."""
    util = __import__(f"{mod.__name__}.util.placement_group", fromlist=["placement_group"])
    cycles, c0, t0 = 0, cpu_s(gcs), time.monotonic()
    while time.monotonic() - t0 < churn_s:
        pg = util.placement_group([{"CPU": 1}] * n, strategy="STRICT_SPREAD")
        mod.get(pg.ready(), timeout=300)
        time.sleep(1.2)
        util.remove_placement_group(pg)
        time.sleep(1.2)
        cycles += 1
    took, cpu = time.monotonic() - t0, cpu_s(gcs) - c0
    extra = max(0.0, cpu - idle_pct / 100 * took)
    changes = 2 * cycles * n
    return {"churn_cycles": cycles, "churn_gcs_cpu_pct": round(100 * cpu / took, 1),
            "gcs_us_per_node_change": round(1e6 * extra / changes, 1),
            "gcs_us_per_change_per_reader": round(1e6 * extra / changes / (n + 1), 2)}


def _wait_alive(mod: Any, n: int, timeout_s: float) -> int:
    """Waits for n alive nodes; returns how many are alive then (fewer after timeout_s)."""
    deadline = time.monotonic() + timeout_s
    while (alive := sum(1 for x in mod.nodes() if x["Alive"])) < n and time.monotonic() < deadline:
        time.sleep(0.5)
    return alive


def _wait_nodes(mod: Any, n: int, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while sum(1 for x in mod.nodes() if x["Alive"]) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{n} nodes not alive after {timeout_s:g}s")
        time.sleep(0.1)
