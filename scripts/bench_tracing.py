"""Tracing cost on the task hot path: tracing off vs on, CPU time per task and tasks/s.

Each round runs the microbenchmark's "single client tasks async" workload (batches of 1,000
`small_value.remote()` then one get) in a fresh embedded cluster, once with tracing off and once
exporting OTLP/gRPC to a receiver process on loopback (ember.testing.otlp_receiver), alternating.
Reported per run: tasks/s (wall clock: noise on a loaded machine) and CPU µs per task of the
driver and of every process under it (raylet, workers, ...: user + system from psutil), which
stays meaningful under load. The receiver's CPU is reported apart (it stands for the tracing
backend, not for Ember).

    .venv/bin/python scripts/bench_tracing.py [--rounds 3] [--batches 8] [--sampler-arg 1.0]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

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
    total = sum(me.cpu_times()[:2])
    for p in me.children(recursive=True):
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total

n = int(sys.argv[1])
c0, t0 = cpu(), time.perf_counter()
for _ in range(n):
    batch()
wall = time.perf_counter() - t0
from ember_common import tracing
tracing.flush()  # the driver's spans are exported (and paid for) inside the measurement
time.sleep(6.0)  # the workers export within their 5 s schedule delay (OTEL_BSP_SCHEDULE_DELAY)
c1 = cpu()
print("RESULT " + json.dumps({"tasks_per_s": n * 1000 / wall, "cpu_us_per_task": (c1 - c0) / (n * 1000) * 1e6}))
ember.shutdown()
"""


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
    args = ap.parse_args()
    import psutil

    from ember.testing.otlp_receiver import OtlpReceiver

    with tempfile.TemporaryDirectory() as d, OtlpReceiver(d) as rx:
        endpoint = rx.grpc_endpoint
        rproc = psutil.Process(rx.proc.pid)
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
