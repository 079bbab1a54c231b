"""CPU cost per task (or per put) of the whole embedded cluster: driver, workers, raylet,
objmgr, GCS — robust under load, unlike wall-clock rates.

Starts `ember.init(num_cpus=...)` (or Ray's, with --ray), warms a workload up, then reads
utime+stime from /proc/<pid>/stat of the driver and every process under it before and after
`--rounds` rounds, and prints microseconds of CPU per unit of work for each kind of process and
in all, with the wall rate and the load average beside it. Workloads (the microbenchmark's
shapes): `batch` (get of 1,000 tasks), `wait` (1,000 tasks then wait() one at a time),
`sync` (one task, get, repeat), `put` (put(0)), `actor_sync` (one call to a sync actor, get,
repeat: the "1:1 actor calls sync" row) and `actor_async` (1,000 calls to it, then one get: the
"1:1 actor calls async" row), `actor_stream` (a sync actor's generator of 200 items,
each got as it comes: the streamed-item path, per item).

    .venv/bin/python scripts/bench_task_cpu.py --workload wait --rounds 5
"""
from __future__ import annotations

import argparse
import importlib
import os
import time
from collections import defaultdict
from typing import Any, Callable

_TICK = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
    except OSError:
        pass
    return out


def _tree(root: int) -> list[int]:
    seen, todo = [], [root]
    while todo:
        p = todo.pop()
        seen.append(p)
        todo.extend(_children(p))
    return seen


def _kind(pid: int, root: int) -> str:
    if pid == root:
        return "driver"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    words = cmd.split()
    module = words[words.index("-m") + 1] if "-m" in words[:-1] else cmd
    if "fork_server" in module:  # Ember's workers are forks of the fork server
        return "worker"
    for name in ("gcs", "raylet", "objmgr", "worker", "etcd", "ray::", "raylet", "gcs_server"):
        if name in module:
            return name.strip(":_")
    return "other"


def _cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime


def _switches(pid: int) -> int:
    """Context switches (voluntary + involuntary) of every thread of pid so far: each is a
    sleep/wake-up or a preemption, the latency a CPU-time figure does not show."""
    n = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt", "nonvoluntary_ctxt")):
                        n += int(line.split()[1])
        except OSError:
            pass
    return n


def snapshot(root: int) -> dict[int, tuple[str, float, int]]:
    """pid -> (kind, CPU seconds so far, context switches so far) for root and every
    process below it."""
    return {p: (_kind(p, root), _cpu(p), _switches(p)) for p in _tree(root)}


def workload(mod: Any, name: str) -> tuple[Callable[[], None], int]:
    """(one round, units of work per round)."""
    @mod.remote
    def small_value() -> bytes:
        return b"ok"

    if name == "batch":
        return (lambda: mod.get([small_value.remote() for _ in range(1000)])), 1000
    if name == "sync":
        def sync() -> None:
            for _ in range(200):
                mod.get(small_value.remote())
        return sync, 200
    if name == "wait":
        def wait() -> None:
            not_ready = [small_value.remote() for _ in range(1000)]
            fetch_local = True
            for _ in range(1000):
                _ready, not_ready = mod.wait(not_ready, fetch_local=fetch_local)
                fetch_local = False
        return wait, 1000
    if name in ("actor_sync", "actor_async", "actor_stream"):
        @mod.remote(num_cpus=0)
        class Actor:
            def small_value(self) -> bytes:
                return b"ok"

            def items(self, n: int) -> Any:
                for i in range(n):
                    yield i

        a = Actor.remote()
        mod.get(a.small_value.remote())  # created, its worker connected
        if name == "actor_stream":
            def actor_stream() -> None:
                for ref in a.items.options(num_returns="streaming").remote(200):
                    mod.get(ref)
            return actor_stream, 200
        if name == "actor_sync":
            def actor_sync() -> None:
                for _ in range(200):
                    mod.get(a.small_value.remote())
            return actor_sync, 200

        def actor_async() -> None:
            mod.get([a.small_value.remote() for _ in range(1000)])
        return actor_async, 1000
    if name == "put":
        def put() -> None:
            for _ in range(5000):
                mod.put(0)
        return put, 5000
    raise SystemExit(f"unknown workload {name!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="batch", choices=["batch", "sync", "wait", "put", "actor_sync", "actor_async",
                                                          "actor_stream"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--num-cpus", type=int, default=4)
    ap.add_argument("--ray", action="store_true", help="measure Ray instead of Ember")
    args = ap.parse_args()
    mod = importlib.import_module("ray" if args.ray else "ember")
    kw: dict[str, Any] = {"num_cpus": args.num_cpus, "log_to_driver": False}
    if args.ray:
        kw["include_dashboard"] = False
    mod.init(**kw)
    try:
        fn, units = workload(mod, args.workload)
        warm = workload(mod, "batch")[0]
        warm()  # every worker started, the function loaded
        for _ in range(2):
            fn()
        time.sleep(0.5)
        root = os.getpid()
        before = snapshot(root)
        t0 = time.perf_counter()
        for _ in range(args.rounds):
            fn()
        wall = time.perf_counter() - t0
        after = snapshot(root)
    finally:
        mod.shutdown()
    n = units * args.rounds
    per: dict[str, float] = defaultdict(float)
    sw: dict[str, int] = defaultdict(int)
    for pid, (kind, cpu, nsw) in after.items():
        _, cpu0, nsw0 = before.get(pid, (kind, 0.0, 0))
        per[kind] += cpu - cpu0
        sw[kind] += nsw - nsw0
    total = sum(per.values())
    parts = " ".join(f"{k} {v / n * 1e6:.0f}" for k, v in sorted(per.items()) if v > 0)
    sws = " ".join(f"{k} {v / n:.1f}" for k, v in sorted(sw.items()) if v > 0)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(f"{args.workload}: {n} units, {n / wall:,.0f}/s wall, CPU us/unit: total "
          f"{total / n * 1e6:.0f} ({parts}); switches/unit {sum(sw.values()) / n:.1f} ({sws}); "
          f"load {load}", flush=True)


if __name__ == "__main__":
    main()
