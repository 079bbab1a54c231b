"""The replica's side of Serve streaming alone, in one process: CPU per chunk that load cannot blur.

A real ServeReplica (no cluster) serves STREAMS concurrent HTTP streams, each CHUNKS chunks
GAP_MS apart (compare_serve_stream.py's generator), pushed on its stream channel over a real
loopback socket to a ChannelClient in the same process and loop, as the proxy's would be; each
finished stream starts the next until REQUESTS streams were served. Reports this process's CPU
time (user + system) per chunk — the replica's loop work plus the caller's receive and decode,
without uvicorn, gRPC or the client — the sends per chunk (how often chunks coalesced), how late
the generator's sleeps woke, and the stream duration p50 (wall time: noise on a loaded machine).

    .venv/bin/python scripts/bench_serve_stream_replica.py [--loop precise|stock] [--requests 160]
        [--streams 16] [--chunks 64] [--gap-ms 5]

--loop: the event loop Ember's async actors run on (ember/_private/execution/precise_loop.py: timers wake
when due), or asyncio's stock one (epoll: timers wake up to 1 ms late).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time

import cloudpickle

from ember.serve._private import stream_channel as sc
from ember.serve._private.replica import ServeReplica

_SCOPE = {"type": "http", "method": "GET", "path": "/", "raw_path": b"/", "root_path": "",
          "query_string": b"", "headers": [], "http_version": "1.1", "scheme": "http"}


class Tokens:
    """compare_serve_stream's deployment, plus a record of each sleep's lateness."""

    def __init__(self, chunks: int, gap_s: float) -> None:
        self.chunks, self.gap_s = chunks, gap_s
        self.late: list[float] = []  # how late each sleep woke (s)

    async def __call__(self, request):
        from starlette.responses import StreamingResponse

        async def gen():
            for i in range(self.chunks):
                yield f"tok {i:05d}\n"
                t = time.monotonic()
                await asyncio.sleep(self.gap_s)
                self.late.append(time.monotonic() - t - self.gap_s)
        return StreamingResponse(gen(), media_type="text/plain")


async def run(args: argparse.Namespace) -> dict:
    rep = ServeReplica("app", "Tokens", "r1", cloudpickle.dumps(Tokens), (args.chunks, args.gap_ms / 1000), {}, None)
    done: dict[str, asyncio.Future[None]] = {}
    lines = [0]

    def deliver(entries: list[sc.Entry]) -> None:
        for sid, data, finished, err in entries:
            lines[0] += data.count(b"\n")
            if (finished or err) and sid in done and not done[sid].done():
                done[sid].set_result(None)

    host, port, secret = await rep.stream_channel()
    conn = await sc.connect(host, port, secret, "bench", deliver, lambda exc: None)
    await asyncio.sleep(0.05)
    ids = iter(range(args.requests))
    durations: list[float] = []

    async def client(i: int) -> None:
        await asyncio.sleep(i * args.gap_ms / 1000 / args.streams)  # phases spread, as clients' are
        for n in ids:
            sid = f"s{n}"
            done[sid] = asyncio.get_running_loop().create_future()
            t0 = time.perf_counter()
            reply = await rep.handle_http(sid, _SCOPE, b"", "bench")
            lines[0] += reply[3].count(b"\n")
            if not reply[4]:
                await asyncio.wait_for(done[sid], 60)
            durations.append(time.perf_counter() - t0)

    cpu0, wall0, load0 = time.process_time(), time.perf_counter(), os.getloadavg()[0]
    pushes0 = rep.stream_stats()["channel_pushes"]
    await asyncio.gather(*[client(i) for i in range(args.streams)])
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    pushes = rep.stream_stats()["channel_pushes"] - pushes0
    conn.close()
    await rep._channel.aclose()  # type: ignore[union-attr]
    return {"loop": args.loop, "streams": args.requests, "chunks": lines[0], "seconds": round(wall, 2),
            "cpu_us_per_chunk": round(cpu / max(lines[0], 1) * 1e6, 1),
            "sends_per_chunk": round(pushes / max(lines[0], 1), 3),
            "sleep_late_us_mean": round(statistics.mean(rep.user.late) * 1e6),
            "stream_p50_ms": round(statistics.median(durations) * 1000, 1), "load_avg": round(load0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loop", choices=["precise", "stock"], default="precise")
    ap.add_argument("--requests", type=int, default=160)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--chunks", type=int, default=64)
    ap.add_argument("--gap-ms", type=float, default=5.0)
    args = ap.parse_args()
    if args.loop == "precise":
        from ember._private.execution import precise_loop

        loop = precise_loop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    try:
        print(json.dumps(loop.run_until_complete(run(args))))
    finally:
        loop.close()


if __name__ == "__main__":
    main()
