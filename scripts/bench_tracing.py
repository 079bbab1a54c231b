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
meaningful under load than wall clock.

`--inproc` measures only what tracing itself costs per task, in one process: the submit span,
the spec serialized and parsed (the context travels in it: `TaskSpec.trace_parent`'s 25 bytes
with `tracing.task_submitted`, or a trace_context map entry in a tree without it), the execute
span with its context made current (`tracing.task_span`'s lazy span, or in a tree without it
`execute_span`'s) and the export of both (OTLP/gRPC to the sink, flushed after every
1,000 tasks), as CPU time of the process (all threads) minus the same loop without tracing
(`--driver`: only the owner's side, the submit span, the spec serialized and the export):
the figure to compare before/after a change to the tracing code, robust under load. Run it
with another tree's interpreter to measure that tree.

    .venv/bin/python scripts/bench_tracing.py [--rounds 3] [--batches 8] [--sampler-arg 1.0] [--inproc]
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

        with (tracing.task_span("execute small_value", spec.trace_context, attributes, spec.trace_parent)
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
                              "lazy_execute_span": lazy, "compact_submit_span": compact}))
"""


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
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=8, help="batches of 1,000 tasks per run")
    ap.add_argument("--sampler-arg", type=float, default=1.0,
                    help="below 1: parentbased_traceidratio with this ratio")
    ap.add_argument("--receiver", action="store_true",
                    help="export to ember.testing.otlp_receiver (parses and writes every span)")
    import psutil

    ap.add_argument("--inproc", action="store_true",
                    help="only the tracing work per task, in one process (CPU µs per task)")
    ap.add_argument("--driver", action="store_true",
                    help="with --inproc: only the owner's side (submit span, spec serialized, export)")
    args = ap.parse_args()
    with (receiver() if args.receiver else sink()) as (endpoint, pid):
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
    print(f"\n{'mode':<6}{'tasks/s':>10}{'cpu µs/task':>13}{'receiver µs':>13}")
    for mode, rows in res.items():
        print(f"{mode:<6}{statistics.mean(r['tasks_per_s'] for r in rows):>10.0f}"
              f"{statistics.mean(r['cpu_us_per_task'] for r in rows):>13.1f}"
              f"{statistics.mean(r['receiver_cpu_us_per_task'] for r in rows):>13.1f}")
    off, on = res["off"], res["on"]
    print(f"on/off tasks/s {statistics.mean(r['tasks_per_s'] for r in on) / statistics.mean(r['tasks_per_s'] for r in off):.2f}; "
          f"CPU per task on/off {statistics.mean(r['cpu_us_per_task'] for r in on) / statistics.mean(r['cpu_us_per_task'] for r in off):.2f}")


if __name__ == "__main__":
    main()
