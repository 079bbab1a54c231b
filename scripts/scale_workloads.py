"""The scale envelope's workloads (see scale_envelope.py), one per process, for Ember or Ray.

    <python> scripts/scale_workloads.py --runtime ember|ray --scenario NAME [--quick]

prints one JSON object (the figures) as its last line. It imports nothing from Ember at module
level, so Ray's interpreter runs it as a plain script; the same code drives both runtimes.
Scenarios:

- actors:  N actors (num_cpus=0) alive at once on a 2-CPU local cluster: creation rate (each
           answers a call), PSS per idle actor (/proc/<pid>/smaps_rollup), all still answering,
           the GCS's memory per live actor.
- actor_records: N actors registered but waiting for a resource another actor holds (no
           process each): submit rate and the GCS's memory per actor record, at sizes that
           live actor processes could not reach on one machine.
- pgs:     N placement groups of one bundle each, created, ready, then removed: rates and the
           GCS's memory per placement group.
- objects: N small puts (100 bytes) held by one driver on the runtime's own path (Ember: inline
           in the owner's memory; Ray: plasma): put rate, owner (driver) and store memory per
           object, the time to free them all.
- store_objects: the same through the node's store (Ember: EMBER_MAX_INLINE_BYTES=0, as
           Ray's puts always go to plasma).
- tasks:   N no-op tasks submitted by one driver, then one get: throughput, peak driver RSS.
- get:     N small objects put, then one get of all N refs.
- pending: N no-op tasks pending behind two blocked tasks that hold both CPUs: the driver's
           resident memory and CPU (all its threads) per pending task, then all of them run.
- nodes, lightnodes: clusters of many nodes on this machine (scale_clusters.py).
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
import sys
import tempfile
import time
from typing import Any

if __name__ == "__main__":  # run as a plain script: this directory must not shadow packages
    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    sys.path.append(_HERE)  # last: scale_clusters (the cluster scenarios) and nothing it shadows

SIZES = {  # scenario -> (full, quick) sizes
    "actors": (300, 50), "actor_records": (10_000, 1000), "pgs": (10_000, 1000),
    "objects": (1_000_000, 50_000), "store_objects": (20_000, 5000), "lightnodes": (100, 12), "tasks": (1_000_000, 100_000), "get": (100_000, 20_000),
    "pending": (1_000_000, 20_000),
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


def descendants(root: int | None = None) -> list[int]:
    """The pids of this process's descendants (read from /proc: Ray's venv has no psutil)."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    children[int(f.read().rsplit(")", 1)[1].split()[1])].append(int(name))
            except OSError:
                continue
    out, todo = [], [root or os.getpid()]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def find_proc(*needles: bytes) -> int:
    """This process's descendant whose command line holds one of needles (the GCS, the store)."""
    for pid in descendants():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if any(n in cmd for n in needles):
            return pid
    raise RuntimeError(f"no descendant process runs {needles}")


def gcs_pid() -> int:
    return find_proc(b"ember_gcs", b"gcs_server")


def settle(pid: int, quiet_pct: float = 5.0, timeout_s: float = 600) -> None:
    """Waits until pid uses under quiet_pct of a core over one second (its backlog is done)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        c0 = cpu_s(pid)
        time.sleep(1)
        if 100 * (cpu_s(pid) - c0) < quiet_pct:
            return


def pss_self_kb() -> int:
    return pss_kb(os.getpid())


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
        gcs = gcs_pid()
        settle(gcs)
        g0 = pss_kb(gcs)
        t0 = time.monotonic()
        handles = [Idle.remote() for _ in range(n)]
        pids = mod.get([h.pid.remote() for h in handles], timeout=900)
        took = time.monotonic() - t0
        time.sleep(3)  # settle: idle
        settle(gcs)
        gcs_kb = (pss_kb(gcs) - g0) / n
        pss = sorted(pss_kb(p) for p in pids)
        again = mod.get([h.pid.remote() for h in handles], timeout=300)
        return {"actors": n, "create_s": round(took, 2), "actors_per_s": round(n / took, 2),
                "pss_mb_median": round(pss[len(pss) // 2] / 1024, 1),
                "pss_mb_total": round(sum(pss) / 1024), "all_answer": again == pids,
                "gcs_kb_per_actor": round(gcs_kb, 1)}
    finally:
        mod.shutdown()


def actor_records(mod: Any, n: int) -> dict[str, Any]:
    mod.init(**init_kwargs(mod.__name__, num_cpus=2, resources={"slot": 1}))

    @mod.remote(num_cpus=0)
    class Waiter:
        def ping(self) -> int:
            return 1

    try:
        holder = Waiter.options(resources={"slot": 1}).remote()
        mod.get(holder.ping.remote(), timeout=120)
        gcs = gcs_pid()
        settle(gcs)
        g0 = pss_kb(gcs)
        t0 = time.monotonic()
        waiting = [Waiter.options(resources={"slot": 1}).remote() for _ in range(n)]
        submit_s = time.monotonic() - t0
        time.sleep(2)
        settle(gcs)
        took = time.monotonic() - t0
        gcs_kb = (pss_kb(gcs) - g0) / n
        assert len(waiting) == n and mod.get(holder.ping.remote(), timeout=120) == 1
        return {"actor_records": n, "records_per_s": round(n / submit_s),
                "gcs_settled_s": round(took, 1), "gcs_kb_per_actor_record": round(gcs_kb, 2),
                "gcs_pss_mb": round(pss_kb(gcs) / 1024)}
    finally:
        mod.shutdown()


def pgs(mod: Any, n: int) -> dict[str, Any]:
    mod.init(**init_kwargs(mod.__name__, num_cpus=2, resources={"slot": n}))
    util = importlib.import_module(f"{mod.__name__}.util.placement_group")
    try:
        warm = util.placement_group([{"slot": 1}])
        mod.get(warm.ready(), timeout=120)
        util.remove_placement_group(warm)
        gcs = gcs_pid()
        settle(gcs)
        g0 = pss_kb(gcs)
        t0 = time.monotonic()
        groups = [util.placement_group([{"slot": 1}]) for _ in range(n)]
        submit_s = time.monotonic() - t0
        # Bounded: with thousands of groups on one node its heartbeats grow (each bundle adds
        # resources to the node's record) and may come late; count what got ready.
        done, _ = mod.wait([g.ready() for g in groups], num_returns=n, timeout=300 + n / 10)
        ready_s = time.monotonic() - t0
        settle(gcs)
        gcs_kb = (pss_kb(gcs) - g0) / n
        # Each placed bundle adds resources to its node's record (the heartbeat, the node feed).
        entries = max(len(x["Resources"]) for x in mod.nodes() if x["Alive"])
        t0 = time.monotonic()
        for g in groups:
            util.remove_placement_group(g)
        remove_s = time.monotonic() - t0
        return {"pgs": n, "pgs_ready": len(done), "pg_submit_s": round(submit_s, 1),
                "pgs_ready_per_s": round(len(done) / ready_s),
                "gcs_kb_per_pg": round(gcs_kb, 2), "pgs_removed_per_s": round(n / remove_s),
                "node_resource_entries": entries}
    finally:
        mod.shutdown()


def objects(mod: Any, n: int, store_path: bool = False) -> dict[str, Any]:
    if mod.__name__ == "ember" and store_path:
        os.environ["EMBER_MAX_INLINE_BYTES"] = "0"  # every put goes to the store, as Ray's do
    mod.init(**init_kwargs(mod.__name__, num_cpus=2, object_store_memory=2 * 2**30))
    value = b"x" * 100
    try:
        mod.get(mod.put(value))
        store = find_proc(b"ember_objmgr", b"/raylet")
        gc.collect()
        d0, s0 = pss_self_kb(), pss_kb(store)
        t0 = time.monotonic()
        refs = [mod.put(value) for _ in range(n)]
        put_s = time.monotonic() - t0
        time.sleep(2)
        settle(store)
        gc.collect()
        d1, s1 = pss_self_kb(), pss_kb(store)
        assert mod.get(refs[-1], timeout=60) == value
        t0 = time.monotonic()
        del refs
        gc.collect()
        settle(store)
        free_s = time.monotonic() - t0
        pre = "store_" if store_path else ""
        return {f"{pre}objects": n, f"{pre}puts_per_s": round(n / put_s),
                f"{pre}owner_bytes_per_object": round((d1 - d0) * 1024 / n),
                f"{pre}store_bytes_per_object": round((s1 - s0) * 1024 / n),
                f"{pre}free_s": round(free_s, 1)}
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runtime", default="ember", choices=("ember", "ray"))
    p.add_argument("--scenario", required=True,
                   choices=("actors", "actor_records", "pgs", "objects",
                            "store_objects", "tasks", "get", "pending",
                            "nodes", "lightnodes"))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--n", type=int, default=0, help="override the scenario's size")
    a = p.parse_args(argv)
    if a.runtime == "ember":  # an arena populated in the background (by the store and the
        # driver) would grow their memory while it is measured: only pages in use count here
        os.environ.setdefault("EMBER_OBJECT_STORE_PREFAULT_BYTES", "0")
    mod = importlib.import_module(a.runtime)
    l0 = load()
    if a.scenario in ("nodes", "lightnodes"):
        import scale_clusters

        res = (scale_clusters.nodes(mod, a.quick) if a.scenario == "nodes" else
               scale_clusters.lightnodes(mod, a.n or size("lightnodes", a.quick), a.quick))
    else:
        fn = {"actors": actors, "actor_records": actor_records, "pgs": pgs, "objects": objects,
              "store_objects": lambda m, k: objects(m, k, store_path=True),
              "tasks": tasks, "get": get_refs, "pending": pending}[a.scenario]
        res = fn(mod, a.n or size(a.scenario, a.quick))
    res["load"] = f"{l0:.1f}->{load():.1f}"
    print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
