"""The scale envelope's workloads (see scale_envelope.py), one per process, for Ember or Ray.

    <python> scripts/scale_workloads.py --runtime ember|ray --scenario NAME [--quick]

prints one JSON object (the figures) as its last line. It imports nothing from Ember at module
level, so Ray's interpreter runs it as a plain script; the same code drives both runtimes.
Scenarios:

- actors:  N actors (num_cpus=0) alive at once on a 2-CPU local cluster: creation rate (each
           answers a call), PSS per idle actor (/proc/<pid>/smaps_rollup), all still answering.
- tasks:   N no-op tasks submitted by one driver, then one get: throughput, peak driver RSS.
- get:     N small objects put, then one get of all N refs.
- pending: N no-op tasks pending behind two blocked tasks that hold both CPUs: the driver's
           resident memory and CPU (all its threads) per pending task, then all of them run.
- nodes:   a cluster of one-CPU nodes (Ember: `ember start --head` + `ember start --address`;
           Ray: ray.cluster_utils.Cluster, which starts the same processes without `ray stop`
           touching other clusters on the machine): join time, spread of 50 ms tasks, then
           more nodes: join time, the GCS's idle CPU, a fan-out of no-op tasks over them.
"""
from __future__ import annotations

import argparse
import collections
import gc
import importlib
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

if __name__ == "__main__":  # run as a plain script: this directory must not shadow packages
    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

SIZES = {  # scenario -> (full, quick) sizes
    "actors": (500, 100), "tasks": (1_000_000, 100_000), "get": (100_000, 20_000),
    "pending": (100_000, 20_000),
    "spread_nodes": (10, 5), "spread_tasks": (1000, 300), "fanout_nodes": (20, 10),
    "fanout_tasks": (10_000, 2000), "idle_s": (10, 5),
}


def size(key: str, quick: bool) -> int:
    return SIZES[key][1 if quick else 0]


def init_kwargs(runtime: str, **kw: Any) -> dict[str, Any]:
    if runtime == "ray":
        kw.setdefault("include_dashboard", False)
    kw.setdefault("log_to_driver", False)
    return kw


def pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
    except (OSError, StopIteration):
        return 0


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def load() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


# --------------------------------------------------------------------------- local scenarios

def actors(mod: Any, n: int) -> dict[str, Any]:
    mod.init(**init_kwargs(mod.__name__, num_cpus=2))

    @mod.remote(num_cpus=0)
    class Idle:
        def pid(self) -> int:
            return os.getpid()

    try:
        warm = Idle.remote()
        mod.get(warm.pid.remote(), timeout=120)
        mod.kill(warm)
        t0 = time.monotonic()
        handles = [Idle.remote() for _ in range(n)]
        pids = mod.get([h.pid.remote() for h in handles], timeout=900)
        took = time.monotonic() - t0
        time.sleep(3)  # settle: idle
        pss = sorted(pss_kb(p) for p in pids)
        again = mod.get([h.pid.remote() for h in handles], timeout=300)
        return {"actors": n, "create_s": round(took, 2), "actors_per_s": round(n / took, 2),
                "pss_mb_median": round(pss[len(pss) // 2] / 1024, 1),
                "pss_mb_total": round(sum(pss) / 1024), "all_answer": again == pids}
    finally:
        mod.shutdown()


def tasks(mod: Any, n: int) -> dict[str, Any]:
    mod.init(**init_kwargs(mod.__name__, num_cpus=2))

    @mod.remote
    def noop() -> None:
        return None

    try:
        mod.get([noop.remote() for _ in range(100)])
        t0 = time.monotonic()
        refs = [noop.remote() for _ in range(n)]
        submitted = time.monotonic() - t0
        out = mod.get(refs, timeout=1800)
        took = time.monotonic() - t0
        assert len(out) == n
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {"tasks": n, "submit_s": round(submitted, 1), "total_s": round(took, 1),
                "tasks_per_s": round(n / took), "peak_driver_rss_mb": round(rss_mb)}
    finally:
        mod.shutdown()


def get_refs(mod: Any, n: int) -> dict[str, Any]:
    mod.init(**init_kwargs(mod.__name__, num_cpus=2))
    try:
        t0 = time.monotonic()
        refs = [mod.put(i) for i in range(n)]
        put_s = time.monotonic() - t0
        t0 = time.monotonic()
        values = mod.get(refs, timeout=600)
        get_s = time.monotonic() - t0
        assert values[-1] == n - 1
        return {"refs": n, "put_s": round(put_s, 2), "get_s": round(get_s, 2),
                "gets_per_s": round(n / get_s)}
    finally:
        mod.shutdown()


def pending(mod: Any, n: int) -> dict[str, Any]:
    mod.init(**init_kwargs(mod.__name__, num_cpus=2))
    d = tempfile.mkdtemp(prefix="scale-pending-")

    @mod.remote(num_cpus=1)
    def block(d: str, i: int) -> None:
        open(os.path.join(d, f"started{i}"), "w").close()
        deadline = time.monotonic() + 1800
        while not os.path.exists(os.path.join(d, "go")) and time.monotonic() < deadline:
            time.sleep(0.05)

    @mod.remote
    def noop() -> None:
        return None

    try:
        mod.get([noop.remote() for _ in range(100)], timeout=300)
        blockers = [block.remote(d, i) for i in range(2)]
        deadline = time.monotonic() + 300
        while not all(os.path.exists(os.path.join(d, f"started{i}")) for i in range(2)):
            if time.monotonic() > deadline:
                raise TimeoutError("the two blocking tasks did not start in 300 s")
            time.sleep(0.05)
        gc.collect()
        r0, c0 = rss_bytes(), time.process_time()
        refs = [noop.remote() for _ in range(n)]
        cpu = time.process_time() - c0
        time.sleep(2)  # the submission path takes the last ones in
        gc.collect()
        per_task = (rss_bytes() - r0) / n
        open(os.path.join(d, "go"), "w").close()
        t0 = time.monotonic()
        assert len(mod.get(refs, timeout=1800)) == n
        drain = time.monotonic() - t0
        mod.get(blockers, timeout=120)
        return {"pending": n, "bytes_per_pending_task": round(per_task),
                "submit_cpu_us": round(cpu * 1e6 / n, 1), "drain_per_s": round(n / drain)}
    finally:
        mod.shutdown()
        shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------- clusters

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


def _wait_nodes(mod: Any, n: int, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while sum(1 for x in mod.nodes() if x["Alive"]) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{n} nodes not alive after {timeout_s:g}s")
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runtime", default="ember", choices=("ember", "ray"))
    p.add_argument("--scenario", required=True,
                   choices=("actors", "tasks", "get", "pending", "nodes"))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--n", type=int, default=0, help="override the scenario's size")
    a = p.parse_args(argv)
    mod = importlib.import_module(a.runtime)
    l0 = load()
    if a.scenario == "nodes":
        res = nodes(mod, a.quick)
    else:
        fn = {"actors": actors, "tasks": tasks, "get": get_refs, "pending": pending}[a.scenario]
        res = fn(mod, a.n or size(a.scenario, a.quick))
    res["load"] = f"{l0:.1f}->{load():.1f}"
    print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
