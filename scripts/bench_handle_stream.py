"""The first item of a streamed handle call against a unary handle call, in one Ember cluster.

A deployment `Gen` answers `unary(x)` at once and `stream(n, gap)` with a generator whose first
item is yielded at once, then n - 1 more GAP_MS apart (as a token stream's). Measured, each
CALLS times after WARMUP:

- `unary`: `handle.unary.remote(x)` until its result is back;
- `stream_first`: `handle.options(stream=True).stream.remote(ITEMS, GAP)` until its first item is back
  (the stream is then read to its end, outside the timing);
- `stream_all`: the same call read to its end (first item and the end of the stream).

from the driver (`driver`: a plain thread, `.result()` / `for`) and from inside another replica
(`replica`: the `Caller` deployment, `await` / `async for` on its actor loop — the OpenAI app's
ingress → LLMServer hop). Reports p50/p99 in ms and the CPU time (user + system) per call of the
calling process and of Gen's replica (psutil), the figure that stays meaningful on a loaded
machine (it counts the whole call: for a stream, its later items too).

    .venv/bin/python scripts/bench_handle_stream.py [--calls 300] [--warmup 50] [--only driver|replica]
        [--items 3] [--gap-ms 2] [--pause-ms P]

Every call, of every mode, is made after a pause (PAUSE_MS; by default a stream's time after its
first item, (items - 1) x GAP_MS): a streamed call's first item then follows the same idle time
as a unary call does, which matters: a call made right after another finds the threads of both
processes running, one made after an idle gap has to wake them (under load, to wait for a core).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from typing import Any

import psutil

import ember
from ember import serve


@serve.deployment(max_ongoing_requests=64)
class Gen:
    """Answers at once: the cost measured is Serve's, not the user's."""

    async def pid(self) -> int:
        return os.getpid()

    async def unary(self, x: Any) -> Any:
        return x

    async def stream(self, n: int, gap_s: float) -> Any:
        for i in range(n):
            if i:
                await asyncio.sleep(gap_s)
            yield i


_ITEMS = [3, 0.002, 0.0]  # a stream's items, the gap between them after the first, the pause between calls


def _cpu(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def _stats(lat: list[float]) -> dict[str, float]:
    s = sorted(lat)
    return {"p50_ms": round(statistics.median(s) * 1e3, 3),
            "p99_ms": round(s[min(len(s) - 1, int(len(s) * 0.99))] * 1e3, 3)}


async def _one_async(h: Any, mode: str) -> float:
    if _ITEMS[2]:
        await asyncio.sleep(_ITEMS[2])
    t0 = time.perf_counter()
    if mode == "unary":
        await h.unary.remote(1)
        return time.perf_counter() - t0
    gen = h.options(stream=True).stream.remote(*_ITEMS[:2])
    first = -1.0
    async for _ in gen:
        if first < 0:
            first = time.perf_counter() - t0
    return first if mode == "stream_first" else time.perf_counter() - t0


def _one_sync(h: Any, mode: str) -> float:
    if _ITEMS[2]:
        time.sleep(_ITEMS[2])
    t0 = time.perf_counter()
    if mode == "unary":
        h.unary.remote(1).result()
        return time.perf_counter() - t0
    first = -1.0
    for _ in h.options(stream=True).stream.remote(*_ITEMS[:2]):
        if first < 0:
            first = time.perf_counter() - t0
    return first if mode == "stream_first" else time.perf_counter() - t0


@serve.deployment(max_ongoing_requests=8)
class Caller:
    """Makes the calls from inside a replica (the ingress case)."""

    def __init__(self, gen: Any) -> None:
        self.gen = gen

    async def run(self, mode: str, calls: int, warmup: int, items: list[Any]) -> tuple[list[float], float, float]:
        """(latencies, this process's CPU seconds, wall seconds) of `calls` calls of `mode`."""
        _ITEMS[:] = items
        for _ in range(warmup):
            await _one_async(self.gen, mode)
        c0, w0 = time.process_time(), time.perf_counter()
        lat = [await _one_async(self.gen, mode) for _ in range(calls)]
        return lat, time.process_time() - c0, time.perf_counter() - w0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--only", choices=["driver", "replica"], default=None)
    ap.add_argument("--modes", default="unary,stream_first,stream_all")
    ap.add_argument("--items", type=int, default=3)
    ap.add_argument("--gap-ms", type=float, default=2.0)
    ap.add_argument("--pause-ms", type=float, default=None,
                    help="idle time before each call (default: a stream's time after its first item)")
    args = ap.parse_args()
    pause_ms = (args.items - 1) * args.gap_ms if args.pause_ms is None else args.pause_ms
    _ITEMS[:] = [args.items, args.gap_ms / 1000, pause_ms / 1000]
    ember.init(num_cpus=2, log_to_driver=False)
    caller = serve.run(Caller.bind(Gen.bind()), name="bench", route_prefix=None)
    gen = serve.get_deployment_handle("Gen", "bench")
    gen_pid = gen.pid.remote().result()
    out: dict[str, Any] = {"loadavg_before": open("/proc/loadavg").read().split()[:3]}
    for where in ("driver", "replica"):
        if args.only and args.only != where:
            continue
        for mode in args.modes.split(","):
            g0 = _cpu(gen_pid)
            if where == "driver":
                for _ in range(args.warmup):
                    _one_sync(gen, mode)
                g0 = _cpu(gen_pid)
                c0, w0 = time.process_time(), time.perf_counter()
                lat = [_one_sync(gen, mode) for _ in range(args.calls)]
                cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            else:
                lat, cpu, wall = caller.run.remote(mode, args.calls, args.warmup, _ITEMS).result()
                # Gen's CPU includes the warm-up calls here: scale to the measured share
                g_cpu = (_cpu(gen_pid) - g0) * args.calls / (args.calls + args.warmup)
            if where == "driver":
                g_cpu = _cpu(gen_pid) - g0
            out[f"{where}/{mode}"] = {**_stats(lat), "caller_cpu_ms_per_call": round(cpu / args.calls * 1e3, 3),
                                      "replica_cpu_ms_per_call": round(g_cpu / args.calls * 1e3, 3),
                                      "calls_per_s": round(args.calls / wall, 1)}
            print(f"{where:8s} {mode:13s} {json.dumps(out[f'{where}/{mode}'])}", flush=True)
    out["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
    print(json.dumps(out))
    serve.shutdown()
    ember.shutdown()


if __name__ == "__main__":
    main()
