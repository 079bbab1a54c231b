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
segments (on off off on ...): both settings see the same processes and nearly the same moment of
a loaded machine, so the paired medians of tasks/s, of the driver's CPU per task (and of each of
its threads: where a difference lands), of the workers' and of the other processes' are much
steadier than separate runs. Export threads run in both settings (idle in the off segments).

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
    .venv/bin/python scripts/bench_tracing.py --paired 40 [--segment-s 0.5]
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
from typing import Iterator

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
                "ember._private.fork_server": "worker", "ember._private.worker_main": "worker"}.get(module, "other")
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
executing = hasattr(tracing, "task_executing")  # this tree's cheapest execute span (tracing_exec)
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


_PAIRED = r"""
import collections, json, os, sys, threading, time
import psutil
import ember
from ember_common import tracing
from ember_common.proto import core_worker_pb2
from ember._private import task_stream

counts = collections.Counter()

class Counting:  # task_stream's view of core_worker_pb2, counting the TaskBatch messages it builds
    def __getattr__(self, name):
        return getattr(core_worker_pb2, name)

    @staticmethod
    def TaskBatch(specs=(), give_back=False):
        batch = core_worker_pb2.TaskBatch(specs=specs, give_back=give_back)
        counts["messages"] += 1
        counts["specs"] += len(batch.specs)
        return batch

task_stream.core_worker_pb2 = Counting()
ember.init(num_cpus=2, log_to_driver=False)
assert tracing.enabled(), "tracing is not on in the paired run"

@ember.remote
def small_value():
    return b"ok"

def batch():
    ember.get([small_value.remote() for _ in range(1000)])

for _ in range(5):
    batch()  # warm-up: workers started, leases held
me = psutil.Process()
kids = me.children(recursive=True)
kind = {}
for p in kids:
    cmd = p.cmdline()
    module = cmd[cmd.index("-m") + 1] if "-m" in cmd[:-1] else ""
    kind[p.pid] = "worker" if module.startswith("ember._private.") else "others"

def kids_cpu():
    out = {"worker": 0.0, "others": 0.0, "worker main": 0.0}
    for p in kids:
        try:
            t = p.cpu_times()
            if kind[p.pid] == "worker":  # the thread that runs tasks (and their execute spans)
                out["worker main"] += sum(x.user_time + x.system_time for x in p.threads() if x.id == p.pid)
        except psutil.NoSuchProcess:
            continue
        out[kind[p.pid]] += t.user + t.system
    return out

TICK = os.sysconf("SC_CLK_TCK")

def threads_cpu():
    # the driver's CPU seconds by thread (Python threads by name, the rest: gRPC's own)
    names = {t.native_id: t.name for t in threading.enumerate()}
    out = collections.Counter()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = names.get(int(tid), "grpc and others")
        out["main" if name == "MainThread" else name] += (int(fields[11]) + int(fields[12])) / TICK
    return out

segments, seg_s = int(sys.argv[1]), float(sys.argv[2])
rows = []
for k in range(segments):
    on = k % 4 in (0, 3)  # on off off on ...: both settings see the same drift
    tracing._enabled = on  # the driver's switch: no submit span, no context, so no execute span
    batch()  # the switch settles (tasks in flight made under the other setting)
    counts.clear()
    c0, k0, t0, w0, n = time.process_time(), kids_cpu(), threads_cpu(), time.perf_counter(), 0
    while time.perf_counter() - w0 < seg_s:
        batch()
        n += 1000
    wall, c1, k1, t1 = time.perf_counter() - w0, time.process_time(), kids_cpu(), threads_cpu()
    rows.append({**{"driver " + k: 1e6 * (t1[k] - t0.get(k, 0.0)) / n for k in t1}, "on": on, "tasks_per_s": n / wall, "driver": 1e6 * (c1 - c0) / n,
                 "worker": 1e6 * (k1["worker"] - k0["worker"]) / n, "others": 1e6 * (k1["others"] - k0["others"]) / n,
                 "worker main thread": 1e6 * (k1["worker main"] - k0["worker main"]) / n,
                 "specs_per_message": counts["specs"] / max(1, counts["messages"])})
tracing._enabled = True
print("RESULT " + json.dumps(rows))
ember.shutdown()
"""


def run_paired(segments: int, seg_s: float, endpoint: str) -> list[dict]:
    """--paired: one cluster with tracing on, switched on and off in the driver in alternating
    segments; a row per segment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="grpc")
    out = subprocess.run([sys.executable, "-c", _PAIRED, str(segments), str(seg_s)], env=env, capture_output=True,
                         text=True, timeout=900)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            r: list[dict] = json.loads(line[7:])
            return r
    raise RuntimeError(f"paired run failed:\n{out.stdout}\n{out.stderr[-3000:]}")


def print_paired(rows: list[dict]) -> None:
    print(f"{'median':<40}{'on':>10}{'off':>10}{'on/off':>9}")
    threads = sorted({k for r in rows for k in r if k.startswith("driver ")})
    for key in ("tasks_per_s", "driver", *threads, "worker", "worker main thread", "others", "specs_per_message"):
        on = statistics.median(r.get(key, 0.0) for r in rows if r["on"])
        off = statistics.median(r.get(key, 0.0) for r in rows if not r["on"])
        label = key if key in ("tasks_per_s", "specs_per_message") else f"{key} µs/task"
        print(f"{label:<40}{on:>10.1f}{off:>10.1f}{on / off if off else float('nan'):>9.3f}")


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
    args = ap.parse_args()
    with (receiver() if args.receiver else sink()) as (endpoint, pid):
        if args.paired:
            rows = run_paired(args.paired, args.segment_s, endpoint)
            print(f"paired: {args.paired} segments of {args.segment_s} s, load average {os.getloadavg()[0]:.1f}")
            print_paired(rows)
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
