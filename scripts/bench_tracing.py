"""Tracing cost on the task hot path: tracing off vs on, CPU time per task and tasks/s.

Each round runs the microbenchmark's "single client tasks async" workload (batches of 1,000
`small_value.remote()` then one get) in a fresh embedded cluster, once with tracing off and once
exporting OTLP/gRPC to a sink process on loopback, alternating. The sink (started by this
script) takes each Export call's bytes and answers without parsing them, so that what it costs
(it stands for the tracing backend, not for Ember, and shares the machine's cores) stays small;
its CPU is reported apart. `--receiver` uses ember.testing.otlp_receiver instead (parses every
span and writes it as a JSON line, as the tests read them).
Reported per run: tasks/s (wall clock: noise on a loaded machine) and CPU µs per task of the
driver and of every process under it, by kind (gcs, raylet, objmgr, worker: the fork server and
the workers it forked; user + system from psutil) over the timed batches, which stays more
meaningful under load than wall clock; then the medians of the rounds and the on/off ratio of
each round (one bad round does not decide: 5 rounds of 20,000 tasks by default).

`--paired N` runs one cluster with tracing on and switches it off and on in the driver (no
submit span, so no context in the spec and no execute span in the worker) in N alternating
segments (on off off on ...; `--ways A,B,...`: settings in turn, as A B ... B A ..., switched in
the workers by a task and in the driver, each reported against `off`: the workers' CurrentExec
or an ExecSpan per task (new, old), no execute span (noexec), no-op begin/finish (wlight), spans
dropped at the workers' or the driver's buffer (wdrop, ddrop, min), the driver exporting in
process (norelay), export batches of N (bN)): all settings see the same processes and nearly the same moment of
a loaded machine, so the paired figures are much steadier than separate runs: tasks/s, and CPU
per task of each driver thread, of each worker thread (by name: a task writes the workers'
Python thread names into /proc/.../comm), of the other processes and of the sink, read from
/proc/.../schedstat (ns; /proc's stat ticks are 10 ms, ~3 µs per task in a segment), as medians
of the segments and as totals over them. Export threads run in both settings (idle in the off
segments).

`--inproc` measures only what tracing itself costs per task, in one process: the submit span,
the spec serialized and parsed (the context travels in it: `TaskSpec.trace_parent`'s 25 bytes
with `tracing.task_submitted`, or a trace_context map entry in a tree without it), the execute
span with its context made current (`tracing.task_executing`'s, or in a tree without it
`tracing.task_span`'s lazy span or `execute_span`'s) and the export of both (OTLP/gRPC to the sink, flushed after every
1,000 tasks), as CPU time of the process (all threads) minus the same loop without tracing
(`--driver`: only the owner's side, the submit span, the spec serialized and the export):
the figure to compare before/after a change to the tracing code, robust under load. Run it
with another tree's interpreter to measure that tree.

    .venv/bin/python scripts/bench_tracing.py [--rounds 5] [--batches 20] [--sampler-arg 1.0] [--inproc]
    .venv/bin/python scripts/bench_tracing.py --paired 40 [--segment-s 0.5] [--ways [new,old,off]]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Iterator

_CHILD = r"""
import json, os, sys, time
import psutil
import ember

ember.init(num_cpus=2, log_to_driver=False)

@ember.remote
def small_value():
    return b"ok"

def batch():
    ember.get([small_value.remote() for _ in range(1000)])

for _ in range(3):
    batch()  # warm-up: workers started, leases held
me = psutil.Process()

def cpu():
    out = {"driver": sum(me.cpu_times()[:2])}
    for p in me.children(recursive=True):
        try:
            t, cmd = p.cpu_times(), p.cmdline()
        except psutil.NoSuchProcess:
            continue
        # by the module it runs (`python -m ember_gcs`); workers are forked by the fork server
        module = cmd[cmd.index("-m") + 1] if "-m" in cmd[:-1] else ""
        name = {"ember_gcs": "gcs", "ember_raylet": "raylet", "ember_objmgr": "objmgr",
                "ember._private.execution.fork_server": "worker",
                "ember._private.execution.worker_main": "worker"}.get(module, "other")
        out[name] = out.get(name, 0.0) + t.user + t.system
    return out

n = int(sys.argv[1])
c0, t0 = cpu(), time.perf_counter()
for _ in range(n):
    batch()
wall = time.perf_counter() - t0
c1 = cpu()  # spans still queued (under one export batch per process) are not counted
per = {k: (v - c0.get(k, 0.0)) / (n * 1000) * 1e6 for k, v in c1.items()}
print("RESULT " + json.dumps({"tasks_per_s": n * 1000 / wall, "cpu_us_per_task": sum(per.values()),
                              **{"cpu_" + k: v for k, v in per.items()}}))
ember.shutdown()
"""


_SINK = r"""
import sys, time
from concurrent import futures
import grpc

def export(request, context):
    return b""  # an empty ExportTraceServiceResponse

handler = grpc.method_handlers_generic_handler("opentelemetry.proto.collector.trace.v1.TraceService", {
    "Export": grpc.unary_unary_rpc_method_handler(export)})  # bytes in, bytes out: nothing parsed
server = grpc.server(futures.ThreadPoolExecutor(2))
server.add_generic_rpc_handlers((handler,))
port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(port, flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def sink() -> Iterator[tuple[str, int]]:
    """(OTLP/gRPC endpoint, pid) of a process that accepts exports and drops them."""
    p = subprocess.Popen([sys.executable, "-c", _SINK], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        yield f"http://127.0.0.1:{int(p.stdout.readline())}", p.pid
    finally:
        assert p.stdin is not None
        p.stdin.close()
        p.wait(10)


@contextlib.contextmanager
def receiver() -> Iterator[tuple[str, int]]:
    from ember.testing.otlp_receiver import OtlpReceiver

    with tempfile.TemporaryDirectory() as d, OtlpReceiver(d) as rx:
        yield rx.grpc_endpoint, rx.proc.pid


_INPROC = r"""
import json, os, sys, time
from ember_common import tracing
from ember_common.proto import common_pb2, core_worker_pb2

assert tracing.setup("ember-driver")
lazy = hasattr(tracing, "task_span")  # this tree's lazy execute span (else: execute_span's LightSpan)
compact = hasattr(tracing, "task_submitted")  # this tree's compact submit span (TaskSpec.trace_parent)
executing = hasattr(tracing, "task_executing")  # this tree's cheapest execute span
driver_only = sys.argv[2] == "driver"  # only the owner's side: submit span, spec serialized, export

def batch():
    for _ in range(1000):
        spec = common_pb2.TaskSpec(name="small_value", task_id=os.urandom(24), job_id=b"\1\0\0\0")
        if compact:
            tracing.task_submitted(spec, "submit small_value")
        else:
            tracing.submit_span("submit small_value", spec.trace_context,
                                **{"ember.task_id": spec.task_id.hex()})
        # the spec travels: serialized by the owner, parsed by the worker
        if driver_only:
            spec.SerializeToString()
            continue
        spec = common_pb2.TaskSpec.FromString(spec.SerializeToString())

        def attributes():
            return {"ember.task_id": spec.task_id.hex(), "ember.job_id": spec.job_id.hex(),
                    "ember.node_id": "n" * 56, "ember.worker_id": "w" * 56, "ember.attempt": 0,
                    "ember.actor_id": None}

        with (tracing.task_executing("execute small_value", spec, "n" * 56, "w" * 56) if executing else
              tracing.task_span("execute small_value", spec.trace_context, attributes, spec.trace_parent)
              if compact else
              tracing.task_span("execute small_value", spec.trace_context, attributes) if lazy else
              tracing.execute_span("execute small_value", spec.trace_context, **attributes())):
            pass
    tracing.flush()

def base():  # the same loop without tracing: subtracted
    for _ in range(1000):
        spec = common_pb2.TaskSpec(name="small_value", task_id=os.urandom(24), job_id=b"\1\0\0\0")
        if driver_only:
            spec.SerializeToString()
        else:
            common_pb2.TaskSpec.FromString(spec.SerializeToString())

for _ in range(2):
    batch()
n = int(sys.argv[1])
t0 = time.process_time()
for _ in range(n):
    base()
t1 = time.process_time()
for _ in range(n):
    batch()
t2 = time.process_time()
print("RESULT " + json.dumps({"tracing_cpu_us_per_task": ((t2 - t1) - (t1 - t0)) / (n * 1000) * 1e6,
                              "lazy_execute_span": lazy, "compact_submit_span": compact,
                              "exec_span": executing}))
"""


WAY_HELP = {
    "new": "the workers' CurrentExec (tracing.exec_begin: the default)", "on": "everything on (the default)",
    "old": "the workers' ExecSpan per task (task_executing's way)",
    "noexec": "the workers make no execute span (the driver's submit spans and export stay)",
    "wlight": "the workers' begin/finish are no-ops (their executor's tracing path stays)",
    "wdrop": "the workers make their execute spans and drop them at their buffer (no export)",
    "ddrop": "the driver makes its submit spans and drops them at its buffer (no export)",
    "min": "noexec and ddrop together", "norelay": "the driver exports in process (no span relay)",
}


_PAIRED = r"""
import collections, json, os, sys, threading, time
import psutil
import ember
from ember_common import tracing
from ember_common.proto import core_worker_pb2
from ember._private.transport import task_stream, wire

counts = collections.Counter()

class Counting:  # the task streams' view of core_worker_pb2 (gRPC and direct), counting the TaskBatch messages they build
    def __getattr__(self, name):
        return getattr(core_worker_pb2, name)

    @staticmethod
    def TaskBatch(specs=(), give_back=False):
        batch = core_worker_pb2.TaskBatch(specs=specs, give_back=give_back)
        counts["messages"] += 1
        counts["specs"] += len(batch.specs)
        return batch

task_stream.core_worker_pb2 = wire.core_worker_pb2 = Counting()
_received = wire.DirectConn.data_received


def _counted_received(self, data):  # reads of the direct transport's replies in the driver
    counts["reads"] += 1
    return _received(self, data)


wire.DirectConn.data_received = _counted_received
ember.init(num_cpus=2, log_to_driver=False)
assert tracing.enabled(), "tracing is not on in the paired run"

@ember.remote
def small_value():
    return b"ok"

def batch():
    ember.get([small_value.remote() for _ in range(1000)])

def name_threads_here():
    # Python names its threads only for itself: write them where /proc shows them (comm), so
    # that the workers' CPU can be split by thread below.
    import threading as th
    for t in th.enumerate():  # (a forked worker's main thread is the process: tid = pid)
        tid = os.getpid() if t is th.main_thread() else t.native_id
        try:
            with open(f"/proc/self/task/{tid}/comm", "w") as f:
                f.write(("main" if t is th.main_thread() else t.name)[:15])
        except OSError:
            pass


@ember.remote
def name_threads():
    name_threads_here()
    time.sleep(0.02)


@ember.remote
def worker_way(w):
    # --ways: what a worker does of tracing under setting w (WAY_HELP); bN: export batches of N
    from ember_common import tracing
    from ember_common.tracing import _exec, _state
    import ember._private.execution.executor as ex

    class NoTrace:  # the executor's view of tracing, off
        def __getattr__(self, n):
            return getattr(tracing, n)

        def enabled(self):
            return False

    ex.tracing = NoTrace() if w in ("noexec", "min") else tracing
    begin, finish = _exec.begin, _exec.finish
    if w == "old":
        begin = lambda *a: None
    elif w == "wlight":
        begin, finish = (lambda *a: 1), (lambda *a: None)
    tracing.exec_begin, tracing.exec_finish = begin, finish
    buf = _state.buffer
    buf.batch = int(w[1:]) if w[:1] == "b" and w[1:].isdigit() else BATCH
    if w == "wdrop":
        buf.add_record = lambda rec: None
    elif "add_record" in buf.__dict__:
        del buf.add_record
    name_threads_here()  # (a worker started since)
    time.sleep(0.02)  # (the 20 calls spread over the workers)
    return os.getpid()


def driver_way(w):
    from ember_common.tracing import _state
    buf = _state.buffer
    relay = RELAY[0]
    if hasattr(relay, "_local"):
        buf.exporters = [relay._local()] if w == "norelay" else [relay]
    buf.batch = int(w[1:]) if w[:1] == "b" and w[1:].isdigit() else BATCH
    if w in ("ddrop", "min"):
        buf.add_record = lambda rec: None
    elif "add_record" in buf.__dict__:
        del buf.add_record


from ember_common.tracing import _state as _st
RELAY, BATCH = _st.buffer.exporters[:1], _st.buffer.batch

for _ in range(5):
    batch()  # warm-up: workers started, leases held
ember.get([name_threads.remote() for _ in range(20)])
me = psutil.Process()
kids = me.children(recursive=True)
kind = {}
for p in kids:
    cmd = p.cmdline()
    module = cmd[cmd.index("-m") + 1] if "-m" in cmd[:-1] else ""
    kind[p.pid] = "worker" if module.startswith("ember._private.") else module.replace("ember_", "") or "others"
sink_pid = int(sys.argv[3])

slices = collections.Counter()  # timeslices (schedstat's third field) by the keys of cpu()

def run_ns(pid, tid, key=None):
    # a thread's CPU time in ns (schedstat: ns resolution; /proc's stat ticks are 10 ms, which
    # at a few thousand tasks per 0.5 s segment is a 3 µs-per-task quantum); key: its
    # timeslices (times it was scheduled in: each wake after blocking, each preemption) are
    # added up there
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            fields = f.read().split()
    except OSError:
        return 0
    if key is not None:
        slices[key] += int(fields[2])
    return int(fields[0])

def proc_ns(pid, by_thread=None):
    # a process's CPU ns; by_thread: also added up by thread name (comm) there
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    total = 0
    for tid in tids:
        if by_thread is None:
            total += run_ns(pid, tid)
            continue
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        key = name if name in WORKER_THREADS else "grpc" if name in GRPC_THREADS else "others"
        t = run_ns(pid, tid, "worker " + key)
        total += t
        by_thread[key] += t
    return total

WORKER_THREADS = {"main", "ember-core", "ember-span-expo", "ember-task-even", "Thread-1 (_poll"}
GRPC_THREADS = {"event_engine", "grpc_global_tim", "lifeguard"}  # gRPC's C threads

def kids_cpu():
    global kids
    kids = me.children(recursive=True)  # (workers started since, the driver's span relay)
    for p in kids:
        if p.pid not in kind:
            try:
                cmd = p.cmdline()
            except psutil.NoSuchProcess:
                continue
            module = cmd[cmd.index("-m") + 1] if "-m" in cmd[:-1] else ""
            kind[p.pid] = "worker" if module.startswith("ember._private.") else module.replace("ember_", "") or "others"
    kids = [p for p in kids if p.pid in kind]
    out = collections.Counter()
    threads = collections.Counter()
    for p in kids:
        out[kind[p.pid]] += proc_ns(p.pid, threads if kind[p.pid] == "worker" else None)
    out.update({"worker " + k: v for k, v in threads.items()})
    out["sink"] = proc_ns(sink_pid)
    return out

def threads_cpu():
    # the driver's CPU ns by thread (Python threads by name, the rest: gRPC's own)
    names = {t.native_id: t.name for t in threading.enumerate()}
    out = collections.Counter()
    pid = os.getpid()
    for tid in os.listdir("/proc/self/task"):
        name = names.get(int(tid), "grpc and others")
        key = "driver " + ("main" if name == "MainThread" else name)
        out[key] += run_ns(pid, tid, key)
    return out

def cpu():
    slices.clear()
    c = kids_cpu()
    c.update(threads_cpu())
    c["driver"] = sum(v for k, v in c.items() if k.startswith("driver "))
    return c, dict(slices)

segments, seg_s, ways = int(sys.argv[1]), float(sys.argv[2]), [w for w in sys.argv[4].split(",") if w]
cycle = ways + ways[::-1]  # new old off off old new ...: every setting sees the same drift
rows = []
way = None
for k in range(segments):
    on = k % 4 in (0, 3)  # on off off on ...: both settings see the same drift
    if ways:
        setting = cycle[k % len(cycle)]
        on = setting != "off"
        if setting != way:
            way = setting
            pids = set(ember.get([worker_way.remote(way) for _ in range(20)]))
            assert len(pids) >= 2, pids
            driver_way(way)
    _st.on = on  # the driver's switch: no submit span, no context, so no execute span
    batch()  # the switch settles (tasks in flight made under the other setting)
    counts.clear()
    (c0, s0), w0, n = cpu(), time.perf_counter(), 0
    while time.perf_counter() - w0 < seg_s:
        batch()
        n += 1000
    wall, (c1, s1) = time.perf_counter() - w0, cpu()
    # CPU ns per segment by process kind and driver thread, timeslices by thread; n tasks in
    # wall seconds
    rows.append({"on": on, "way": way if on or ways else "off", "n": n, "wall": wall, "messages": counts["messages"],
                 "specs": counts["specs"], "reads": counts["reads"],
                 "cpu_ns": {key: c1[key] - c0.get(key, 0) for key in c1},
                 "slices": {key: s1[key] - s0.get(key, 0) for key in s1}})
_st.on = True
print("RESULT " + json.dumps(rows))
ember.shutdown()
"""


def run_paired(segments: int, seg_s: float, endpoint: str, sink_pid: int, ways: str = "") -> list[dict]:
    """--paired: one cluster with tracing on, switched on and off in the driver in alternating
    segments; a row per segment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="grpc")
    out = subprocess.run([sys.executable, "-c", _PAIRED, str(segments), str(seg_s), str(sink_pid), ways],
                         env=env,
                         capture_output=True,
                         text=True, timeout=900)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            r: list[dict] = json.loads(line[7:])
            return r
    raise RuntimeError(f"paired run failed:\n{out.stdout}\n{out.stderr[-3000:]}")


def print_paired(rows: list[dict]) -> None:
    """Per setting: tasks/s (median of segments), then CPU µs per task by process kind and by
    driver thread, as medians of the segments and as totals (all segments' CPU over all their
    tasks: the steadier figure), and task stream (gRPC or direct) specs per message."""
    on_rows, off_rows = [r for r in rows if r["on"]], [r for r in rows if not r["on"]]

    def med(rs: list[dict], f: Any) -> float:
        return statistics.median(f(r) for r in rs)

    tps_on, tps_off = med(on_rows, lambda r: r["n"] / r["wall"]), med(off_rows, lambda r: r["n"] / r["wall"])
    print(f"{'':<34}{'on':>9}{'off':>9}{'on/off':>8}{'on-off':>8}   {'total on':>9}{'off':>9}{'on-off':>8}")
    print(f"{'tasks/s (median)':<34}{tps_on:>9.0f}{tps_off:>9.0f}{tps_on / tps_off:>8.3f}")
    keys = sorted({k for r in rows for k in r["cpu_ns"]}, key=lambda k: (not k.startswith("driver"), not k.startswith("worker"), k))
    for key in keys:
        def per(r: dict, key: str = key) -> float:
            return float(r["cpu_ns"].get(key, 0)) / r["n"] / 1e3
        a, b = med(on_rows, per), med(off_rows, per)
        ta = sum(r["cpu_ns"].get(key, 0) for r in on_rows) / sum(r["n"] for r in on_rows) / 1e3
        tb = sum(r["cpu_ns"].get(key, 0) for r in off_rows) / sum(r["n"] for r in off_rows) / 1e3
        print(f"{key + ' µs/task':<34}{a:>9.1f}{b:>9.1f}{a / b if b else float('nan'):>8.3f}{a - b:>+8.1f}"
              f"   {ta:>9.1f}{tb:>9.1f}{ta - tb:>+8.1f}")
    total = [sum(v for k, v in r["cpu_ns"].items() if not k.startswith(("driver ", "worker ")))
             / r["n"] / 1e3 for r in rows]
    a = statistics.median(x for x, r in zip(total, rows, strict=True) if r["on"])
    b = statistics.median(x for x, r in zip(total, rows, strict=True) if not r["on"])
    print(f"{'all processes µs/task':<34}{a:>9.1f}{b:>9.1f}{a / b:>8.3f}{a - b:>+8.1f}")
    # timeslices per 1,000 tasks (each wake of a blocked thread, each preemption): a thread
    # that blocks more often with tracing on pays a context switch and runs cold each time
    for key in sorted({k for r in rows for k in r.get("slices", {})}):
        ta = sum(r["slices"].get(key, 0) for r in on_rows) / sum(r["n"] for r in on_rows) * 1e3
        tb = sum(r["slices"].get(key, 0) for r in off_rows) / sum(r["n"] for r in off_rows) * 1e3
        if ta + tb >= 1:
            print(f"{key + ' slices/1000 tasks':<34}{'':>42}{ta:>9.0f}{tb:>9.0f}{ta - tb:>+8.0f}")
    sa = sum(r["specs"] for r in on_rows) / max(1, sum(r["messages"] for r in on_rows))
    sb = sum(r["specs"] for r in off_rows) / max(1, sum(r["messages"] for r in off_rows))
    ratio = f"{sa / sb:>8.3f}" if sb else f"{'-':>8}"
    print(f"{'specs per task stream message':<34}{sa:>9.2f}{sb:>9.2f}{ratio}")
    ra = sum(r.get("reads", 0) for r in on_rows) / sum(r["n"] for r in on_rows) * 1e3
    rb = sum(r.get("reads", 0) for r in off_rows) / sum(r["n"] for r in off_rows) * 1e3
    print(f"{'driver reads of replies per 1000 tasks':<34}{ra:>9.1f}{rb:>9.1f}")


def run_inproc(batches: int, endpoint: str, sampler_arg: float, side: str = "both") -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="grpc")
    if sampler_arg < 1.0:
        env.update(OTEL_TRACES_SAMPLER="parentbased_traceidratio", OTEL_TRACES_SAMPLER_ARG=str(sampler_arg))
    out = subprocess.run([sys.executable, "-c", _INPROC, str(batches * 4), side], env=env, capture_output=True,
                         text=True, timeout=600)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            r: dict = json.loads(line[7:])
            return r
    raise RuntimeError(f"in-process run failed:\n{out.stdout}\n{out.stderr[-3000:]}")


def run_one(tracing_on: bool, batches: int, endpoint: str, sampler_arg: float) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if tracing_on:
        env.update(OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
                   OTEL_EXPORTER_OTLP_PROTOCOL="grpc")
        if sampler_arg < 1.0:
            env.update(OTEL_TRACES_SAMPLER="parentbased_traceidratio", OTEL_TRACES_SAMPLER_ARG=str(sampler_arg))
    out = subprocess.run([sys.executable, "-c", _CHILD, str(batches)], env=env, capture_output=True,
                         text=True, timeout=600)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            r: dict = json.loads(line[7:])
            return r
    raise RuntimeError(f"benchmark child failed:\n{out.stdout}\n{out.stderr[-3000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="alternating off/on rounds (medians reported)")
    ap.add_argument("--batches", type=int, default=20, help="batches of 1,000 tasks per run")
    ap.add_argument("--sampler-arg", type=float, default=1.0,
                    help="below 1: parentbased_traceidratio with this ratio")
    ap.add_argument("--receiver", action="store_true",
                    help="export to ember.testing.otlp_receiver (parses and writes every span)")
    import psutil

    ap.add_argument("--inproc", action="store_true",
                    help="only the tracing work per task, in one process (CPU µs per task)")
    ap.add_argument("--driver", action="store_true",
                    help="with --inproc: only the owner's side (submit span, spec serialized, export)")
    ap.add_argument("--paired", type=int, default=0, metavar="SEGMENTS",
                    help="one cluster, tracing switched on/off in the driver in alternating segments")
    ap.add_argument("--segment-s", type=float, default=0.5, help="--paired: seconds per segment")
    ap.add_argument("--ways", nargs="?", const="new,old,off", default="",
                    help="--paired: settings in turn, as a comma list, segments a b c c b a ...; each is "
                         "reported against off: " + "; ".join(f"{k}: {v}" for k, v in WAY_HELP.items())
                         + "; bN: export batches of N spans; off (default list: new,old,off)")
    args = ap.parse_args()
    with (receiver() if args.receiver else sink()) as (endpoint, pid):
        if args.paired:
            rows = run_paired(args.paired, args.segment_s, endpoint, pid, args.ways)
            print(f"paired: {args.paired} segments of {args.segment_s} s, load average {os.getloadavg()[0]:.1f}")
            if not args.ways:
                print_paired(rows)
                return
            for way in [w for w in args.ways.split(",") if w != "off"]:
                print(f"\non = {way}: {WAY_HELP.get(way, f'export batches of {way[1:]} spans' if way[:1] == 'b' else way)}")
                print_paired([r for r in rows if r["way"] in (way, "off")])
            return
        if args.inproc:
            xs = []
            for i in range(args.rounds):
                r = run_inproc(args.batches, endpoint, args.sampler_arg, "driver" if args.driver else "both")
                xs.append(r["tracing_cpu_us_per_task"])
                print(i, f"tracing CPU per task {xs[-1]:.1f} µs (load average {os.getloadavg()[0]:.1f})", flush=True)
            print(f"mean {statistics.mean(xs):.1f} µs, min {min(xs):.1f} µs")
            return
        rproc = psutil.Process(pid)
        res: dict[str, list[dict]] = {"off": [], "on": []}
        for i in range(args.rounds):
            for mode in ("off", "on"):
                r0 = sum(rproc.cpu_times()[:2])
                r = run_one(mode == "on", args.batches, endpoint, args.sampler_arg)
                r["receiver_cpu_us_per_task"] = (sum(rproc.cpu_times()[:2]) - r0) / (args.batches * 1000) * 1e6
                r["load_avg"] = os.getloadavg()[0]
                res[mode].append(r)
                print(i, mode, json.dumps({k: round(v, 1) for k, v in r.items()}), flush=True)
    print(f"\n{'mode':<6}{'tasks/s':>10}{'cpu µs/task':>13}{'driver':>9}{'worker':>9}{'receiver µs':>13}   (medians of {args.rounds} rounds)")
    for mode, rows in res.items():
        print(f"{mode:<6}{statistics.median(r['tasks_per_s'] for r in rows):>10.0f}"
              f"{statistics.median(r['cpu_us_per_task'] for r in rows):>13.1f}"
              f"{statistics.median(r.get('cpu_driver', 0.0) for r in rows):>9.1f}"
              f"{statistics.median(r.get('cpu_worker', 0.0) for r in rows):>9.1f}"
              f"{statistics.median(r['receiver_cpu_us_per_task'] for r in rows):>13.1f}")
    off, on = res["off"], res["on"]
    ratios = [b["tasks_per_s"] / a["tasks_per_s"] for a, b in zip(off, on, strict=True)]
    cpu = [b["cpu_us_per_task"] / a["cpu_us_per_task"] for a, b in zip(off, on, strict=True)]
    print("on/off tasks/s by round: " + " ".join(f"{x:.2f}" for x in ratios))
    print(f"on/off tasks/s: median of rounds {statistics.median(ratios):.2f}, of medians "
          f"{statistics.median(r['tasks_per_s'] for r in on) / statistics.median(r['tasks_per_s'] for r in off):.2f}; "
          f"CPU per task on/off: median of rounds {statistics.median(cpu):.2f}")


if __name__ == "__main__":
    main()
