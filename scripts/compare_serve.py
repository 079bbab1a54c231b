"""Serve HTTP throughput and latency, Ember vs Ray Serve, in one run on this machine.

A no-op deployment (1 replica, max_ongoing_requests=64) behind each system's HTTP proxy; a
bounded load generator (raw asyncio HTTP/1.1 keep-alive connections, one per client) sends GET /
from CONCURRENCY clients until REQUESTS responses or DURATION seconds, whichever comes first,
after a short warm-up. Reports req/s, p50 and p99 latency and errors for each system.

    .venv/bin/python scripts/compare_serve.py [--requests 20000] [--duration 20] [--concurrency 64]
        [--ray-python .rayvenv/bin/python]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

from _server_proc import server_process

RAY_SERVER = r"""
import sys, ray
from ray import serve
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)

@serve.deployment(num_replicas=1, max_ongoing_requests=64)
class Noop:
    async def __call__(self, request):
        return "ok"

serve.start(http_options={"host": "127.0.0.1", "port": int(sys.argv[1])})
serve.run(Noop.bind(), route_prefix="/")
print("READY", flush=True)
sys.stdin.read()
serve.shutdown()
ray.shutdown()
"""

EMBER_SERVER = r"""
import sys
import ember
from ember import serve
ember.init(num_cpus=2, log_to_driver=False)

@serve.deployment(num_replicas=1, max_ongoing_requests=64)
class Noop:
    async def __call__(self, request):
        return "ok"

serve.run(Noop.bind(), route_prefix="/", host="127.0.0.1", port=int(sys.argv[1]))
print("READY", flush=True)
sys.stdin.read()
serve.shutdown()
ember.shutdown()
"""


async def _client(host: str, port: int, stop_at: float, budget: list[int], lat: list[float],
                  errors: list[str]) -> None:
    req = f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while budget[0] > 0 and time.monotonic() < stop_at:
            budget[0] -= 1
            t0 = time.perf_counter()
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = 0
            chunked = False
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    length = int(v)
                elif k.strip().lower() == b"transfer-encoding" and b"chunked" in v.lower():
                    chunked = True
            if chunked:
                while True:
                    size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                    await reader.readexactly(size + 2)
                    if size == 0:
                        break
            elif length:
                await reader.readexactly(length)
            lat.append(time.perf_counter() - t0)
            if status != 200:
                errors.append(str(status))
    except (OSError, asyncio.IncompleteReadError) as e:
        errors.append(repr(e))
    finally:
        writer.close()


async def load(host: str, port: int, concurrency: int, requests: int, duration: float) -> dict:
    """Bounded in count (requests) and in time (duration)."""
    warm_lat: list[float] = []
    await asyncio.gather(*[_client(host, port, time.monotonic() + 5, [20], warm_lat, [])
                           for _ in range(concurrency)])
    lat: list[float] = []
    errors: list[str] = []
    budget = [requests]
    t0 = time.perf_counter()
    await asyncio.gather(*[_client(host, port, time.monotonic() + duration, budget, lat, errors)
                           for _ in range(concurrency)])
    elapsed = time.perf_counter() - t0
    lat.sort()
    pct = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan"))
    return {"requests": len(lat), "seconds": round(elapsed, 2), "req_per_s": round(len(lat) / elapsed, 1),
            "p50_ms": round(pct(0.50), 2), "p99_ms": round(pct(0.99), 2), "errors": len(errors)}


def run_system(python: str, server: str, args: argparse.Namespace) -> dict:
    with server_process(python, server, []) as port:
        return asyncio.run(load("127.0.0.1", port, args.concurrency, args.requests, args.duration))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--ray-python", default=".rayvenv/bin/python")
    ap.add_argument("--only", choices=["ember", "ray"], default=None)
    args = ap.parse_args()
    results = {}
    if args.only in (None, "ember"):
        results["ember"] = run_system(sys.executable, EMBER_SERVER, args)
        print("ember", json.dumps(results["ember"]), flush=True)
    if args.only in (None, "ray") and os.path.exists(args.ray_python):
        results["ray_serve_2.60"] = run_system(args.ray_python, RAY_SERVER, args)
        print("ray  ", json.dumps(results["ray_serve_2.60"]), flush=True)
    if len(results) == 2:
        e, r = results["ember"], results["ray_serve_2.60"]
        print(f"\n{'system':<16}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'errors':>8}")
        for name, v in results.items():
            print(f"{name:<16}{v['req_per_s']:>10}{v['p50_ms']:>10}{v['p99_ms']:>10}{v['errors']:>8}")
        print(f"\nember/ray throughput: {e['req_per_s'] / max(r['req_per_s'], 1e-9):.2f}x; "
              f"p99 {e['p99_ms']} ms vs {r['p99_ms']} ms")


if __name__ == "__main__":
    main()
