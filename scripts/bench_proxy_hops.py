"""Where a streamed HTTP request's first chunk spends its time in the Serve proxy, hop by hop.

Starts an embedded cluster (this process is the driver), deploys a streaming deployment whose
generator yields its first item at once and a second 2 ms later (each item carries the
replica's `perf_counter_ns()` when it was produced; CLOCK_MONOTONIC, so comparable across the
processes of this machine), and runs the standalone proxy (`ember_serve_proxy`) with the probe
of scripts/_proxy_hops_probe.py, which notes the time of each step of the proxy's path. A client
(in this process, on its own loop) sends REQUESTS requests one at a time, PAUSE_MS apart, on one
keep-alive connection. Prints the p50 of each step's time since the previous one, in µs, and
the thread each step ran on:

    client send → asgi (uvicorn parsed the request; HTTP loop) → remote → remote_ret (the
    actor call handed to the core loop) → core_submit (core loop) → replica produced the first
    item → core_reply (the reply on the core loop) → cf_done (the concurrent future set) →
    http_woken (the HTTP loop resumed) → send1 (the head and first chunk) → client got chunk 1;
    then the second item: replica → channel_in (HTTP loop) → send2 → client got chunk 2.

With `--llm MODEL_DIR` the app is compare_llm.py's `ember` system instead (build_openai_app with
one tiny model; 8-token streamed completions; the client's chunks are the first two SSE events
that carry text; no replica stamps). A proxy that serves on the core worker's loop (as
today's does) has no `cf_done` step and runs every step on `ember-core`. Also printed: the client's
time to the first chunk, and the proxy's CPU (user + system) and context switches (all its
threads) per request. Another tree's proxy: run this file with that tree's interpreter from
its root (`cd OTHER_TREE && .venv/bin/python /path/to/scripts/bench_proxy_hops.py`).

    .venv/bin/python scripts/bench_proxy_hops.py [--requests 300] [--pause-ms 20] [--llm DIR]

Wall-clock steps on a loaded machine are noise; run it quietly (or under `chrt -f 10`).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


LLM_BODY = json.dumps({"model": "tiny", "prompt": "Tell me a story", "max_tokens": 8, "temperature": 0.0,
                       "stream": True, "ignore_eos": True}).encode()


async def _client(port: int, n: int, pause_s: float, llm: bool = False) -> list[dict[str, int]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    req = f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    if llm:
        req = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(LLM_BODY)}\r\n\r\n").encode() + LLM_BODY
    out = []
    try:
        for _ in range(n):
            await asyncio.sleep(pause_s)
            t0 = time.perf_counter_ns()
            writer.write(req)
            await reader.readuntil(b"\r\n\r\n")
            got: list[tuple[int, bytes]] = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                data = await reader.readexactly(size + 2)
                if size == 0:
                    break
                got.append((time.perf_counter_ns(), data[:-2]))
            rec = {"client_send": t0}
            if llm:  # the first two SSE events that carry text
                toks = [t for t, d in got if b'"text"' in d]
                rec.update({f"client_chunk{i + 1}": t for i, t in enumerate(toks[:2])})
                out.append(rec)
                continue
            lines = [(t, ln) for t, d in got for ln in d.decode().split()]
            for i, (t, ln) in enumerate(lines[:2]):
                rec[f"replica_item{i + 1}"] = int(ln)
                rec[f"client_chunk{i + 1}"] = t
            out.append(rec)
    finally:
        writer.close()
    return out


def _switches(pid: int) -> tuple[int, int, dict[str, int]]:
    """(voluntary, involuntary) context switches of every thread of a process, and the
    voluntary ones by thread name."""
    v = n = 0
    by: dict[str, int] = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            name = open(f"/proc/{pid}/task/{t}/comm").read().strip()
            for line in open(f"/proc/{pid}/task/{t}/status"):
                if line.startswith("voluntary_ctxt_switches"):
                    v += int(line.split()[1])
                    by[name] = by.get(name, 0) + int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    n += int(line.split()[1])
        except OSError:  # the thread ended
            continue
    return v, n, by


def _per_request(events: list[list]) -> list[dict[str, tuple[int, str]]]:
    reqs: list[dict[str, tuple[int, str]]] = []
    for name, t, thread in events:
        if name == "asgi":
            reqs.append({})
        if reqs and name not in reqs[-1]:
            reqs[-1][name] = (t, thread)
    return reqs


ORDER = ["client_send", "asgi", "remote", "remote_ret", "core_submit", "replica_item1", "core_reply",
         "cf_done", "http_woken", "send_head", "send1", "sent1", "client_chunk1",
         "replica_item2", "channel_in", "send2", "sent2", "client_chunk2"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--pause-ms", type=float, default=20.0)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--llm", default="", help="a model dir (compare_llm.py's --model-dir): time the "
                    "OpenAI app (build_openai_app, one model, 8-token completions) instead")
    args = ap.parse_args()

    import ember
    from ember import serve

    ember.init(num_cpus=2, log_to_driver=False)
    serve.start(proxy_location="Disabled")

    @serve.deployment(max_ongoing_requests=64)
    class Stream:
        async def __call__(self, request):  # noqa: ANN001, ANN204
            from starlette.responses import StreamingResponse

            async def gen():  # noqa: ANN202
                yield f"{time.perf_counter_ns()}\n"
                await asyncio.sleep(0.002)
                yield f"{time.perf_counter_ns()}\n"
            return StreamingResponse(gen(), media_type="text/plain")

    if args.llm:
        from ember.serve.llm import LLMConfig, build_openai_app

        cfg = LLMConfig(model_loading_config={"model_id": "tiny", "model_source": args.llm}, llm_engine="torch",
                        engine_kwargs={"max_num_seqs": 16}, deployment_config={"max_ongoing_requests": 256})
        serve.run(build_openai_app({"llm_configs": [cfg]}), route_prefix="/")
    else:
        serve.run(Stream.bind(), route_prefix="/")
    gcs = ember.get_runtime_context().gcs_address
    tmp = tempfile.mkdtemp(prefix="proxy-hops-")
    port_file, out = os.path.join(tmp, "port"), os.path.join(tmp, "events.json")
    code = (f"import sys; sys.path.insert(0, {HERE!r}); import _proxy_hops_probe as p; "
            f"p.install({out!r}); sys.exit(p.run_proxy(sys.argv[1:]))")
    proxy = subprocess.Popen([sys.executable, "-c", code, "--gcs-address", gcs, "--host", "127.0.0.1",
                              "--port", "0", "--port-file", port_file])
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(port_file):
            if time.monotonic() > deadline or proxy.poll() is not None:
                raise RuntimeError("the proxy did not start")
            time.sleep(0.1)
        port = int(open(port_file).read())
        asyncio.run(_client(port, args.warmup, args.pause_ms / 1000, bool(args.llm)))
        import psutil

        pp = psutil.Process(proxy.pid)
        c0, x0 = pp.cpu_times(), _switches(proxy.pid)
        client = asyncio.run(_client(port, args.requests, args.pause_ms / 1000, bool(args.llm)))
        c1 = pp.cpu_times()
        proxy_cpu_us = ((c1.user + c1.system) - (c0.user + c0.system)) / args.requests * 1e6
        x1 = _switches(proxy.pid)
        ctx = ((x1[0] - x0[0]) / args.requests, (x1[1] - x0[1]) / args.requests)
        by_thread = {k: round((c - x0[2].get(k, 0)) / args.requests, 1) for k, c in x1[2].items()
                     if c - x0[2].get(k, 0) >= args.requests / 10}
    finally:
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(60)
    reqs = _per_request(json.load(open(out)))[args.warmup:]
    rows: dict[str, list[float]] = {}
    threads: dict[str, str] = {}
    for c, p in zip(client, reqs, strict=False):
        stamps = {k: (v, "client" if k.startswith("client") else "replica") for k, v in c.items()}
        stamps.update(p)
        prev = None
        for k in ORDER:
            if k not in stamps:
                continue
            t, th = stamps[k]
            threads[k] = th
            if prev is not None:
                rows.setdefault(k, []).append((t - prev) / 1000)
            prev = t
    load = open("/proc/loadavg").read().split()[:3]
    print(f"{'LLM app' if args.llm else 'stream'}: {len(reqs)} requests, load {' '.join(load)}; p50 µs since the previous step:")
    total = 0.0
    for k in ORDER[1:]:
        if k in rows:
            med = statistics.median(rows[k])
            total += med
            print(f"  {k:14s} {med:8.1f}   ({threads[k]})")
    print(f"  {'sum of p50s':14s} {total:8.1f}")
    out_us, back_us = [], []
    for c, p in zip(client, reqs, strict=False):  # the proxy's two crossings, per request
        if "core_submit" in p and "remote_ret" in p and "core_reply" in p and "sent1" in p:
            out_us.append((max(p["core_submit"][0], p["remote_ret"][0]) - c["client_send"]) / 1000)
            back_us.append((p["sent1"][0] - p["core_reply"][0]) / 1000)
    if out_us:
        print(f"proxy's crossings, p50 per request: client send → the call submitted on the core loop "
              f"{statistics.median(out_us):.1f} µs; the reply on the core loop → first chunk written "
              f"{statistics.median(back_us):.1f} µs")
    first = [(c["client_chunk1"] - c["client_send"]) / 1000 for c in client]
    print(f"client: first chunk p50 {statistics.median(first):.1f} µs; proxy CPU per request "
          f"{proxy_cpu_us:.1f} µs (user + system); proxy context switches per request: {ctx[0]:.1f} "
          f"voluntary, {ctx[1]:.1f} involuntary; voluntary by thread: {by_thread}")
    ember.shutdown()


if __name__ == "__main__":
    main()
