"""Task events on vs off: what recording and reporting every task's transitions costs.

Usage: python scripts/bench_task_events.py [--rounds 3] [--tasks 3000] [--duration-s 1]

Each round runs, once with EMBER_TASK_EVENTS_ENABLED=1 and once with =0 (alternating, so a
machine's drift hits both alike), in fresh processes:
  1. a CPU-time probe: an embedded cluster (2 CPUs) runs `--tasks` tiny tasks, a third one by
     one (submit, get) and the rest in batches of 1,000; it reports the driver's CPU time per
     task (`time.process_time`: owner-side hooks and the reporter thread) and the whole
     cluster's (driver + GCS + raylet + objmgr + workers, from psutil: executor hooks, the GCS
     ingesting batches), which load on a shared machine distorts far less than wall clock;
  2. `ember microbenchmark --filter "single client tasks"` (tasks/s, wall clock).
It prints every measurement with the load average next to it, then the medians side by side.

`--hooks` measures, in this process and in CPU time, what the events cost per task without a
cluster: the seven hook calls a plain task makes (owner: submitted, PENDING_NODE_ASSIGNMENT,
SUBMITTED_TO_WORKER, executed; executor: started, executed; both in one process here) and the
reporter's share (building and serializing the batch). Load barely moves these numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def child(tasks: int) -> None:
    """The CPU-time probe (runs in its own process)."""
    import psutil

    import ember

    ember.init(num_cpus=2, log_to_driver=False)

    @ember.remote
    def f() -> int:
        return 1

    ember.get([f.remote() for _ in range(500)])  # warm: workers started, functions cached
    me = psutil.Process()

    def cluster_cpu() -> float:
        total = sum(me.cpu_times()[:2])
        for p in me.children(recursive=True):
            try:
                total += sum(p.cpu_times()[:2])
            except psutil.NoSuchProcess:
                pass
        return total

    c0, p0, w0 = cluster_cpu(), time.process_time(), time.perf_counter()
    sync = tasks // 3
    for _ in range(sync):
        ember.get(f.remote())
    done = sync
    while done < tasks:
        n = min(1000, tasks - done)
        ember.get([f.remote() for _ in range(n)])
        done += n
    wall = time.perf_counter() - w0
    time.sleep(1.5)  # the reporters' next flush and the GCS's ingest belong to these tasks
    out = {"driver_cpu_us": 1e6 * (time.process_time() - p0) / tasks,
           "cluster_cpu_us": 1e6 * (cluster_cpu() - c0) / tasks, "tasks_per_s": tasks / wall}
    ember.shutdown()
    print("RESULT " + json.dumps(out), flush=True)


def hooks(n: int = 100_000) -> None:
    """CPU time per task of the hooks and of the reporter's batch, in this process."""
    from types import SimpleNamespace

    from ember._private import task_events as te
    from ember_common.proto import common_pb2, core_worker_pb2

    specs = [common_pb2.TaskSpec(task_id=os.urandom(16), job_id=b"\x01\x00\x00\x00", name="f")
             for _ in range(n)]
    reply = core_worker_pb2.PushTaskReply()
    te._max_events = 10 * n
    for on in (False, True):
        te.on = on
        t0 = time.process_time()
        for s in specs:
            te.submitted(s)
            te.record(s, te.PENDING_NODE_ASSIGNMENT)
            te.record(s, te.SUBMITTED_TO_WORKER)
            te.started(s)
            te.executed(s, reply)
            te.executed(s, reply)
        hook_us = 1e6 * (time.process_time() - t0) / n
        print(f"hooks, events {'on ' if on else 'off'}: {hook_us:.2f} us of CPU per task (6 calls)")
    core = SimpleNamespace(worker_id="w" * 32, node_id="n" * 32)
    t0 = time.process_time()
    items = [te._events.popleft() for _ in range(len(te._events))]
    infos = [te._infos.popleft() for _ in range(len(te._infos))]
    data = te._batch(core, items, infos, {}).SerializeToString()  # type: ignore[arg-type]
    flush_us = 1e6 * (time.process_time() - t0) / n
    print(f"reporter: {flush_us:.2f} us of CPU per task to batch and serialize {len(items) // n} events "
          f"({len(data) / n:.0f} bytes per task on the wire)")


def _load() -> str:
    with open("/proc/loadavg") as fh:
        return " ".join(fh.read().split()[:3])


def _run(mode: str, args: list[str]) -> str:
    env = dict(os.environ, EMBER_TASK_EVENTS_ENABLED="1" if mode == "on" else "0")
    r = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args)} ({mode}) failed:\n{r.stdout}\n{r.stderr[-3000:]}")
    return r.stdout


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tasks", type=int, default=3000)
    p.add_argument("--duration-s", type=float, default=1.0, help="microbenchmark seconds per trial")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--hooks", action="store_true", help="only the in-process CPU cost of the hooks")
    ns = p.parse_args(argv)
    if ns.hooks:
        hooks()
        return 0
    if ns.child:
        child(ns.tasks)
        return 0
    if ns.rounds < 1 or ns.tasks < 3:
        p.error("--rounds >= 1 and --tasks >= 3")
    probe: dict[str, dict[str, list[float]]] = {"on": {}, "off": {}}
    bench: dict[str, dict[str, list[float]]] = {"on": {}, "off": {}}
    for rnd in range(ns.rounds):
        for mode in (("on", "off") if rnd % 2 == 0 else ("off", "on")):
            out = _run(mode, [os.path.abspath(__file__), "--child", "--tasks", str(ns.tasks)])
            res = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
            print(f"round {rnd} events {mode:3}: probe {json.dumps({k: round(v, 1) for k, v in res.items()})}"
                  f"  (load {_load()})", flush=True)
            for k, v in res.items():
                probe[mode].setdefault(k, []).append(v)
            with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
                _run(mode, ["-m", "ember._private.perf", "--filter", "single client tasks", "--duration-s",
                            str(ns.duration_s), "--trials", "2", "--warmup-s", "0.5", "--num-cpus", "2",
                            "--json", tmp.name])
                with open(tmp.name) as fh:
                    rows = json.load(fh)
            for row in rows:
                bench[mode].setdefault(row["name"], []).append(row["per_second"])
            print(f"round {rnd} events {mode:3}: " + ", ".join(f"{r['name']} {r['per_second']:.1f}/s" for r in rows)
                  + f"  (load {_load()})", flush=True)
    print("\nmedians            events on   events off   on/off")
    for table in (probe, bench):
        for key in table["on"]:
            on, off = statistics.median(table["on"][key]), statistics.median(table["off"][key])
            print(f"{key:34} {on:10.1f} {off:12.1f}   {on / off:6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
