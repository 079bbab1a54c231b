"""Task events on vs off: what recording and reporting every task's transitions costs.

Usage: python scripts/bench_task_events.py [--rounds 3] [--tasks 3000] [--duration-s 1]
       python scripts/bench_task_events.py --hooks | --paired 40 [--segment-s 0.5]

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
cluster: the six hook calls a plain task makes (owner: submitted, PENDING_NODE_ASSIGNMENT,
pushed, replied; executor: started, executed; both in one process here), the reporter's share
(coalescing, encoding and serializing the batch), and the GCS's (keeping a batch as bytes;
decoding and merging it when a query asks), then the owner's path with a fresh spec per task
(what records keep alive until a flush costs too: CPU and page faults). Load barely moves these
numbers.

`--paired N` runs one cluster with events on and switches the driver's hooks on and off in N
alternating segments of the async workload: paired medians of the driver's CPU per task, its
page faults, and TaskStream messages and specs per message (whether events change batching).
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


def paired(segments: int, seg_s: float) -> None:
    """--paired: one embedded cluster with events on; the driver's hooks are switched on and
    off in alternating segments (on off off on ...) of the async workload (1,000 tasks, then
    get), so both settings see the same machine at nearly the same time. Prints the medians of
    the driver's CPU per task, the rest of the cluster's, minor page faults per task, and
    TaskStream messages per 1,000 tasks and specs per message (counted where the stream builds
    them)."""
    import collections
    import resource
    import statistics

    import psutil

    import ember
    from ember._private.telemetry import task_events as te
    from ember._private.transport import task_stream
    from ember_common.proto import core_worker_pb2

    counts = collections.Counter()

    class Counting:  # task_stream's view of core_worker_pb2, counting TaskBatch messages
        def __getattr__(self, name: str) -> object:
            return getattr(core_worker_pb2, name)

        @staticmethod
        def TaskBatch(specs: object = (), give_back: bool = False) -> core_worker_pb2.TaskBatch:  # noqa: N802
            batch = core_worker_pb2.TaskBatch(specs=specs, give_back=give_back)
            counts["messages"] += 1
            counts["specs"] += len(batch.specs)
            return batch

    task_stream.core_worker_pb2 = Counting()  # type: ignore[assignment]
    ember.init(num_cpus=2, log_to_driver=False)

    @ember.remote
    def f() -> int:
        return 1

    for _ in range(5):  # warm: workers started, functions cached
        ember.get([f.remote() for _ in range(1000)])
    kids = psutil.Process().children(recursive=True)

    def kids_cpu() -> float:
        total = 0.0
        for k in kids:
            try:
                total += sum(k.cpu_times()[:2])
            except psutil.NoSuchProcess:
                pass
        return total

    got: dict[bool, dict[str, list[float]]] = {True: {}, False: {}}
    for k in range(segments):
        te.on = k % 4 in (0, 3)
        ember.get([f.remote() for _ in range(1000)])  # the switch settles
        counts.clear()
        f0, c0, k0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time(), kids_cpu()
        w0, n = time.perf_counter(), 0
        while time.perf_counter() - w0 < seg_s:
            ember.get([f.remote() for _ in range(1000)])
            n += 1000
        row = {"driver_cpu_us": 1e6 * (time.process_time() - c0) / n, "others_cpu_us": 1e6 * (kids_cpu() - k0) / n,
               "minflt_per_task": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / n,
               "tasks_per_s": n / (time.perf_counter() - w0), "messages_per_1000": 1000 * counts["messages"] / n,
               "specs_per_message": counts["specs"] / max(1, counts["messages"])}
        for key, v in row.items():
            got[te.on].setdefault(key, []).append(v)
    ember.shutdown()
    print(f"paired, {segments} segments of {seg_s} s (load {_load()})\nmedians            driver hooks on   off   on/off")
    for key in got[True]:
        on, off = statistics.median(got[True][key]), statistics.median(got[False][key])
        print(f"{key:20} {on:14.2f} {off:8.2f} {on / off if off else float('nan'):8.3f}")


def hooks(n: int = 100_000) -> None:
    """CPU time per task of the hooks, of the reporter's batch and of the GCS's ingest and
    merge, in this process."""
    from ember._private.owner.task_queue_types import TaskEntry
    from ember._private.telemetry import task_events as te
    from ember_common.proto import common_pb2, core_worker_pb2
    from ember_gcs.task_events import TaskEventStore

    entries = [TaskEntry(common_pb2.TaskSpec(task_id=os.urandom(16), job_id=b"\x01\x00\x00\x00", name="f"), [], 0)
               for _ in range(n)]
    reply = core_worker_pb2.PushTaskReply(start_time_ns=time.time_ns(), end_time_ns=time.time_ns())
    te._max_records = 10 * n
    te._max_flat = te.WIDTH * te._max_records
    address = "10.0.0.2:7000"
    me = ("n" * 32, "w" * 32, 99)
    chunk = 2000  # the reporter takes the records every ~1 s (held longer, they burden the GC)
    data_parts: list[bytes] = []
    for on in (False, True):
        te.on = on
        te.leased(address, "n" * 32, "w" * 32, 1234)  # once per lease, not per task
        hook_s = flush_s = 0.0
        data_parts = []
        records = 0
        for i in range(0, n, chunk):
            t0 = time.process_time()
            for e in entries[i:i + chunk]:
                te.submitted(e)  # owner
                te.record(e, te.PENDING_NODE_ASSIGNMENT)
                te.pushed(e, address)
                te.started(e.spec)  # executor
                te.executed(e.spec, reply)
                te.replied(e, reply)  # owner
            t1 = time.process_time()
            got = te.take({})
            batch, by_job = te.encode(got, me, te._workers)
            data_parts.append(batch.SerializeToString())
            flush_s += time.process_time() - t1
            hook_s += t1 - t0
            records += len(got) // te.WIDTH
        print(f"hooks, events {'on ' if on else 'off'}: {1e6 * hook_s / n:.2f} us of CPU per task (6 calls)")
    data = b"".join(data_parts)
    print(f"reporter: {1e6 * flush_s / n:.2f} us of CPU per task to coalesce, encode and serialize "
          f"{records // n} record(s) ({len(data) / n:.0f} bytes per task on the wire)")
    store = TaskEventStore(max_attempts=n)
    t0 = time.process_time()
    for part in data_parts:  # the servicer's share: keep the bytes
        store.add_raw(part, {"01000000": chunk})
    ingest_us = 1e6 * (time.process_time() - t0) / n
    t0 = time.process_time()
    store.merge_pending()
    merge_us = 1e6 * (time.process_time() - t0) / n
    assert len(store) == n, len(store)
    print(f"GCS: {ingest_us:.2f} us of CPU per task to take a batch (kept as bytes); {merge_us:.2f} us "
          f"per task to decode and merge it when a query asks")
    lifetimes()


def lifetimes(n: int = 200_000, per_flush: int = 10_000, window: int = 1000) -> None:
    """The owner's hot path as it allocates: a fresh spec per task (as submit makes it), the
    owner's four hooks with `window` tasks in flight (the async microbenchmark's 1,000), the spec
    dropped when its task ends, the reporter's take, encode and serialize every per_flush tasks
    (~1 s of tasks at 10,000/s): all of the owner's events work, in one thread. What events on costs here beyond the hooks is
    what the records keep alive until the flush (CPU time, its GC share, minor page faults)."""
    import collections
    import gc
    import resource
    from typing import Any

    from ember._private.owner.task_queue_types import TaskEntry
    from ember._private.telemetry import task_events as te
    from ember_common.proto import common_pb2, core_worker_pb2

    reply = core_worker_pb2.PushTaskReply(start_time_ns=time.time_ns(), end_time_ns=time.time_ns())
    te._max_records = 10 * per_flush
    te._max_flat = te.WIDTH * te._max_records
    tasks: dict[bytes, Any] = {}  # the submitter's table of tasks in flight
    te._tracked = tasks
    address = "10.0.0.2:7000"
    me = ("n" * 32, "w" * 32, 99)
    te.leased(address, "n" * 32, "w" * 32, 1234)
    rid, job = os.urandom(28), b"\x01\x00\x00\x00"
    gc_s = [0.0, 0.0]

    def gc_time(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_s[0] = time.process_time()
        else:
            gc_s[1] += time.process_time() - gc_s[0]

    gc.callbacks.append(gc_time)
    for on in (False, True, False, True):
        te.on = on
        gc_s[1] = 0.0
        in_flight: collections.deque[Any] = collections.deque()
        f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time()
        for i in range(n):
            s = common_pb2.TaskSpec(task_id=os.urandom(24), job_id=job, name="small_value")
            s.args.add().value.data = b"x" * 60
            s.return_ids.append(rid)
            s.resources["CPU"] = 1.0
            entry = TaskEntry(s, [], 0)  # what the owner keeps per task meanwhile
            tasks[s.task_id] = entry
            te.submitted(entry)
            te.record(entry, te.PENDING_NODE_ASSIGNMENT)
            te.pushed(entry, address)
            s.SerializeToString()  # the push
            in_flight.append(entry)
            if len(in_flight) > window:  # the reply of the task pushed `window` tasks ago
                done = in_flight.popleft()
                del tasks[done.spec.task_id]
                te.replied(done, reply)
            if i % per_flush == per_flush - 1:  # the reporter's share: take, encode, serialize
                te.encode(te.take({}), me, te._workers)[0].SerializeToString()
        cpu, faults = time.process_time() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
        for e in in_flight:
            del tasks[e.spec.task_id]
            te.replied(e, reply)
        te.take({})
        print(f"owner path, fresh specs, {window} in flight, events {'on ' if on else 'off'}: {1e6 * cpu / n:.2f} "
              f"us of CPU per task ({1e6 * gc_s[1] / n:.2f} in GC), {faults / n:.3f} minor page faults per task")
    gc.callbacks.remove(gc_time)


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
    p.add_argument("--probe-only", action="store_true", help="skip the microbenchmark (quicker rounds)")
    p.add_argument("--paired", type=int, metavar="SEGMENTS", default=0,
                   help="driver hooks on/off in alternating segments of one cluster (e.g. 40)")
    p.add_argument("--segment-s", type=float, default=0.5, help="--paired: seconds per segment")
    ns = p.parse_args(argv)
    if ns.hooks:
        hooks()
        return 0
    if ns.paired:
        paired(ns.paired, ns.segment_s)
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
            if ns.probe_only:
                continue
            with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
                _run(mode, ["-m", "ember._tools.perf", "--filter", "single client tasks", "--duration-s",
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
            if key not in table["off"]:
                continue
            on, off = statistics.median(table["on"][key]), statistics.median(table["off"][key])
            print(f"{key:34} {on:10.1f} {off:12.1f}   {on / off:6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
