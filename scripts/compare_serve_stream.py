"""Serve streaming throughput, Ember vs Ray Serve, in one run on this machine.

A deployment (1 replica, max_ongoing_requests=64) whose reply is a StreamingResponse of CHUNKS
chunks produced GAP_MS apart (as a token generator produces tokens), behind each system's HTTP
proxy. CONCURRENCY clients (raw asyncio HTTP/1.1 keep-alive connections, one per client) each
send GET / again and again until REQUESTS responses or DURATION seconds, after a warm-up. Every
chunk is one line (`tok NNNNN\\n`), so chunks are counted in the bytes received whether the
proxy relays them one by one or several per HTTP chunk.

Reports, per system: chunks/s (all clients together), request latency p50/p99, time to first
chunk p50/p99, the ideal request latency (CHUNKS x GAP_MS) and the ceiling it sets on chunks/s
(CONCURRENCY chunks per GAP_MS, since a client waits for a reply's end before its next request;
so no system can be more than ceiling/Ray's chunks/s over Ray), and the CPU time per chunk of each
process under the server (proxy, replica, raylet, ...; user + system, from psutil): the figure
that stays meaningful on a loaded machine, where wall-clock rates are noise. `in_process` is the same
generator consumed by CONCURRENCY tasks in this process (no HTTP, no Serve): the ideal as this
machine can deliver it under its current load, measured in the same run, on asyncio's stock loop
(which wakes a timer up to 1 ms late: epoll's timeout is whole milliseconds, rounded up), and
`in_process_precise` the same on the loop Ember's async actors (so its replicas) run on, whose
timers wake when due (ember/_private/execution/precise_loop.py): what Serve itself adds is Ember minus
that one.

Wall-clock figures on a machine shared with other work are noise; run it quietly, or (as root)
under `chrt -f 10` so that this run and every process it starts preempt the rest (the floors
then come out the same run after run).

    .venv/bin/python scripts/compare_serve_stream.py [--requests 400] [--duration 20]
        [--concurrency 16] [--chunks 64] [--gap-ms 5] [--ray-python .rayvenv/bin/python]
        [--only ember|ray|floor]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

from _server_proc import server_process

_DEPLOYMENT = r"""
import asyncio, sys
from starlette.responses import StreamingResponse

CHUNKS, GAP = int(sys.argv[2]), float(sys.argv[3]) / 1000

@serve.deployment(num_replicas=1, max_ongoing_requests=64)
class Stream:
    async def __call__(self, request):
        async def gen():
            for i in range(CHUNKS):
                yield f"tok {i:05d}\n"
                await asyncio.sleep(GAP)
        return StreamingResponse(gen(), media_type="text/plain")
"""

RAY_SERVER = r"""
import sys, ray
from ray import serve
ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never another session's cluster
""" + _DEPLOYMENT + r"""
serve.start(http_options={"host": "127.0.0.1", "port": int(sys.argv[1])})
serve.run(Stream.bind(), route_prefix="/")
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
""" + _DEPLOYMENT + r"""
serve.run(Stream.bind(), route_prefix="/", host="127.0.0.1", port=int(sys.argv[1]))
print("READY", flush=True)
sys.stdin.read()
serve.shutdown()
ember.shutdown()
"""


async def _read_response(reader: asyncio.StreamReader, t0: float) -> tuple[int, int, float]:
    """(status, lines received, seconds to the first line) of one chunked or sized response."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length, chunked = 0, False
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
        elif k.strip().lower() == b"transfer-encoding" and b"chunked" in v.lower():
            chunked = True
    lines, first = 0, 0.0
    if chunked:
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            data = await reader.readexactly(size + 2)
            if size == 0:
                break
            n = data[:-2].count(b"\n")
            if n and not lines:
                first = time.perf_counter() - t0
            lines += n
    elif length:
        data = await reader.readexactly(length)
        first = time.perf_counter() - t0
        lines = data.count(b"\n")
    return status, lines, first


async def _client(host: str, port: int, stop_at: float, budget: list[int], out: dict[str, list]) -> None:
    req = f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while budget[0] > 0 and time.monotonic() < stop_at:
            budget[0] -= 1
            t0 = time.perf_counter()
            writer.write(req)
            status, lines, first = await _read_response(reader, t0)
            out["lat"].append(time.perf_counter() - t0)
            out["ttfc"].append(first)
            out["lines"].append(lines)
            if status != 200:
                out["errors"].append(str(status))
    except (OSError, asyncio.IncompleteReadError, ValueError) as e:
        out["errors"].append(repr(e))
    finally:
        writer.close()


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1000, 1) if xs else float("nan")


def _cpu_times() -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) of every process under this one (the server, its cluster,
    the proxy, the replica), by pid, with a short name."""
    import psutil

    out = {}
    for p in psutil.Process().children(recursive=True):
        try:
            t = p.cpu_times()
            cmd = " ".join(p.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        out[p.pid] = (_short_name(cmd), t.user + t.system)
    return out


def _short_name(cmd: str) -> str:
    for key, name in (("serve_proxy", "proxy"), ("serve-proxy", "proxy"), ("ServeReplica", "replica"),
                      ("ember_raylet", "raylet"), ("ember_gcs", "gcs"), ("ember_objmgr", "objmgr"),
                      ("default_worker", "worker"), ("ember._private.worker", "worker"),
                      ("worker_main", "worker"), ("-c", "driver")):
        if key in cmd:
            return name
    return cmd[:40]


def _cpu_per_chunk(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
                   chunks: int) -> dict[str, float]:
    """µs of CPU per chunk delivered, per process (busiest first; name:pid), and in all."""
    rows = []
    for pid, (name, t1) in after.items():
        d = t1 - before.get(pid, (name, 0.0))[1]
        if d > 0.01:
            rows.append((d, f"{name}:{pid}"))
    rows.sort(reverse=True)
    per = {k: round(d / max(chunks, 1) * 1e6, 1) for d, k in rows[:6]}
    per["total"] = round(sum(d for d, _ in rows) / max(chunks, 1) * 1e6, 1)
    return per


async def load(host: str, port: int, args: argparse.Namespace) -> dict:
    """Bounded in count (requests) and in time (duration)."""
    warm: dict[str, list] = {"lat": [], "ttfc": [], "lines": [], "errors": []}
    await asyncio.gather(*[_client(host, port, time.monotonic() + 5, [3], warm) for _ in range(args.concurrency)])
    out: dict[str, list] = {"lat": [], "ttfc": [], "lines": [], "errors": []}
    budget = [args.requests]
    cpu0, load0 = _cpu_times(), os.getloadavg()[0]
    t0 = time.perf_counter()
    await asyncio.gather(*[_client(host, port, time.monotonic() + args.duration, budget, out)
                           for _ in range(args.concurrency)])
    elapsed = time.perf_counter() - t0
    short = sum(1 for n in out["lines"] if n != args.chunks)
    return {"requests": len(out["lat"]), "seconds": round(elapsed, 2),
            "chunks_per_s": round(sum(out["lines"]) / elapsed, 1),
            "p50_ms": _pct(out["lat"], 0.5), "p99_ms": _pct(out["lat"], 0.99),
            "ttfc_p50_ms": _pct(out["ttfc"], 0.5), "ttfc_p99_ms": _pct(out["ttfc"], 0.99),
            "errors": len(out["errors"]) + short, "load_avg": round(load0, 1),
            "cpu_us_per_chunk": _cpu_per_chunk(cpu0, _cpu_times(), sum(out["lines"]))}


async def floor(args: argparse.Namespace) -> dict:
    """The same generator consumed in this process by CONCURRENCY tasks, no HTTP and no Serve:
    what this machine can do right now (the ideal under its current load) on the running loop."""
    async def gen():
        for i in range(args.chunks):
            yield f"tok {i:05d}\n"
            await asyncio.sleep(args.gap_ms / 1000)

    out: dict[str, list] = {"lat": [], "ttfc": [], "lines": [], "errors": []}
    budget = [args.requests]

    async def consumer(stop_at: float) -> None:
        while budget[0] > 0 and time.monotonic() < stop_at:
            budget[0] -= 1
            t0 = time.perf_counter()
            n, first = 0, 0.0
            async for chunk in gen():
                n += chunk.count("\n")
                first = first or time.perf_counter() - t0
            out["lat"].append(time.perf_counter() - t0)
            out["ttfc"].append(first)
            out["lines"].append(n)

    t0 = time.perf_counter()
    await asyncio.gather(*[consumer(time.monotonic() + args.duration) for _ in range(args.concurrency)])
    elapsed = time.perf_counter() - t0
    return {"requests": len(out["lat"]), "seconds": round(elapsed, 2),
            "chunks_per_s": round(sum(out["lines"]) / elapsed, 1),
            "p50_ms": _pct(out["lat"], 0.5), "p99_ms": _pct(out["lat"], 0.99),
            "ttfc_p50_ms": _pct(out["ttfc"], 0.5), "ttfc_p99_ms": _pct(out["ttfc"], 0.99), "errors": 0}


def run_system(python: str, server: str, args: argparse.Namespace) -> dict:
    with server_process(python, server, [str(args.chunks), str(args.gap_ms)]) as port:
        return asyncio.run(load("127.0.0.1", port, args))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--chunks", type=int, default=64)
    ap.add_argument("--gap-ms", type=float, default=5.0)
    ap.add_argument("--ray-python", default=".rayvenv/bin/python")
    ap.add_argument("--only", choices=["ember", "ray", "floor"], default=None)
    args = ap.parse_args()
    results = {}
    if args.only in (None, "floor"):
        results["in_process"] = asyncio.run(floor(args))
        print("floor", json.dumps(results["in_process"]), flush=True)
        from ember._private.execution import precise_loop

        loop = precise_loop.new_event_loop()
        try:
            results["in_process_precise"] = loop.run_until_complete(floor(args))
        finally:
            loop.close()
        print("floor", json.dumps(results["in_process_precise"]), flush=True)
    if args.only in (None, "ember"):
        results["ember"] = run_system(sys.executable, EMBER_SERVER, args)
        print("ember", json.dumps(results["ember"]), flush=True)
    if args.only in (None, "ray") and os.path.exists(args.ray_python):
        results["ray_serve_2.60"] = run_system(args.ray_python, RAY_SERVER, args)
        print("ray  ", json.dumps(results["ray_serve_2.60"]), flush=True)
    print(f"\nideal request: {args.chunks * args.gap_ms:.0f} ms ({args.chunks} chunks, {args.gap_ms} ms apart)")
    print(f"{'system':<20}{'chunks/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'ttfc50':>8}{'ttfc99':>8}{'errors':>8}")
    for name, v in results.items():
        print(f"{name:<20}{v['chunks_per_s']:>10}{v['p50_ms']:>9}{v['p99_ms']:>9}{v['ttfc_p50_ms']:>8}"
              f"{v['ttfc_p99_ms']:>8}{v['errors']:>8}")
    for name, v in results.items():
        if "cpu_us_per_chunk" in v:
            print(f"{name} CPU µs per chunk (load average {v['load_avg']}): {v['cpu_us_per_chunk']}")
    if "ember" in results and "in_process_precise" in results:
        e, f = results["ember"], results["in_process_precise"]
        print(f"\nember median over the floor on the same loop: {e['p50_ms'] / f['p50_ms'] - 1:+.1%}; "
              f"over the stock loop's: {e['p50_ms'] / results['in_process']['p50_ms'] - 1:+.1%}")
    if "ember" in results and "ray_serve_2.60" in results:
        e, r = results["ember"], results["ray_serve_2.60"]
        print(f"\nember/ray chunks/s: {e['chunks_per_s'] / max(r['chunks_per_s'], 1e-9):.2f}x; "
              f"median {e['p50_ms']} ms vs {r['p50_ms']} ms (ideal {args.chunks * args.gap_ms:.0f})")
        # Each client waits for its request's last chunk before the next request, so no system can
        # move more than CONCURRENCY chunks per GAP: the ratio over Ray is bounded by that ceiling.
        ceiling = args.concurrency * 1000.0 / args.gap_ms
        print(f"ceiling (every request at the ideal): {ceiling:.0f} chunks/s; ember at {e['chunks_per_s'] / ceiling:.0%} "
              f"of it; the most any system could be over this Ray run: {ceiling / max(r['chunks_per_s'], 1e-9):.2f}x")


if __name__ == "__main__":
    main()
