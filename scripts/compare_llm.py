"""LLM serving, side by side on this machine: the same torch engine class (Ember's TorchEngine,
continuous batching) driven directly in one process (the limit), served by Ember, and served by
Ray Serve 2.60, with CONCURRENCY streaming clients.

Systems:
    direct        the engine alone in a fresh process, CONCURRENCY asyncio consumers (no HTTP)
    direct_core   the same consumers on the engine-core process (EngineCoreClient): what the
                  core process itself costs or gains, without Serve (not in the default --only)
    ember         Ember's OpenAI app: build_openai_app (OpenAiIngress → LLMServer), POST
                  /v1/completions with "stream": true, through Ember's proxy
    ember_plain   one Ember Serve deployment around the engine answering SSE itself
    ray_plain     the same deployment code on Ray Serve 2.60 (Ray Serve LLM's LLMServer runs
                  vLLM only, so Ray gets the engine in a plain deployment)

The engine is what LLMServer runs (`engine_kwargs["engine_process"]`, true by default): its step
loop in an engine-core child process of the replica (core_client.py, engine_core.py), for the
Ember servers and for Ray's alike (the same engine code); `--engine-kwargs
'{"engine_process": false}'` puts it back in a thread of the replica. The direct run always
drives the in-thread engine in its one process.

Every request streams MAX_TOKENS tokens (ignore_eos, greedy) from a short prompt; each SSE event
that carries text counts as one token (the engine sends one per token, except where a token
ends mid-character and waits for the next, the same for every system). Clients are raw asyncio HTTP/1.1 keep-alive connections,
bounded by REQUESTS and DURATION. Reported: tokens/s (all clients), time to first token p50/p99,
request latency p50, and the CPU time per token of each process under the server (user + system:
the load-independent figure; the engine core is "core"). Then the same with one client (time to first token at 1 stream).

The Ray side needs transformers in Ray's interpreter: --ray-pythonpath names a directory with it
(e.g. `pip install --no-deps --target DIR transformers tokenizers huggingface_hub safetensors
regex tqdm typer hf-xet httpx2 httpcore2 click shellingham rich truststore annotated-doc` with
Ray's pip), prepended to PYTHONPATH; the engine's module files are loaded from this tree.

    .venv/bin/python scripts/compare_llm.py [--concurrency 16] [--max-tokens 64] [--requests 160]
        [--duration 30] [--hidden 128 --layers 4] [--ray-python /work/rayvenv/bin/python]
        [--ray-pythonpath /tmp/rayllm] [--only direct,direct_core,ember,ember_plain,ray_plain]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time

from _server_proc import server_process
from compare_serve_stream import _cpu_per_chunk, _short_name

HERE = os.path.dirname(os.path.abspath(__file__))
INTERNAL = os.path.join(HERE, "..", "client", "ember", "serve", "llm", "_internal")

# The engine as a package of its own, so that Ray's interpreter loads the same files without
# importing ember.
_LOAD_ENGINE = r"""
def load_engine(internal_dir):
    import sys, types
    if "ember_llm_engine" not in sys.modules:
        pkg = types.ModuleType("ember_llm_engine"); pkg.__path__ = [internal_dir]
        sys.modules["ember_llm_engine"] = pkg
    from ember_llm_engine import core_client, torch_engine, engine, params

    def make(model_id, path, kwargs):
        # what LLMServer's make_engine picks: the engine-core process unless engine_process is false
        cls = core_client.EngineCoreClient if kwargs.get("engine_process", True) else torch_engine.TorchEngine
        return cls(model_id, path, kwargs)
    return make, engine.GenerationRequest, params.SamplingParams
"""

_PLAIN_DEPLOYMENT = r"""
import itertools, json
from starlette.responses import StreamingResponse

@serve.deployment(num_replicas=1, max_ongoing_requests=256)
class Engine:
    def __init__(self, path, internal_dir, kwargs):
        make, self.Request, self.Params = load_engine(internal_dir)
        self.engine = make("tiny", path, kwargs)
        self.engine.start()
        self.ids = itertools.count()

    async def __call__(self, request):
        body = await request.json()
        params = self.Params(max_tokens=body["max_tokens"], temperature=0.0, ignore_eos=True)
        req = self.Request(f"r{next(self.ids)}", self.engine.encode(body["prompt"]), params)

        async def sse():
            async for deltas in self.engine.generate(req):
                yield "".join('data: {"choices":[{"index":%d,"text":%s}]}\n\n' % (d.index, json.dumps(d.text))
                              for d in deltas)
            yield "data: [DONE]\n\n"
        return StreamingResponse(sse(), media_type="text/event-stream")

    async def engine_stats(self):
        return dict(vars(self.engine.stats()))
"""

# The engine's counters (steps, prefills, tokens), written to the file named by argv[5] every
# 0.5 s by the server, so that the benchmark can tell the batch fill of its load phase.
_STATS_WRITER = r"""
import threading, os, time

def write_stats(handle, path):
    def run():
        while True:
            try:
                st = handle.engine_stats.remote().result()
                with open(path + ".tmp", "w") as f:
                    json.dump(st, f)
                os.replace(path + ".tmp", path)
            except Exception:
                pass
            time.sleep(0.5)
    threading.Thread(target=run, daemon=True).start()
"""

RAY_SERVER = r"""
import sys, json, ray
from ray import serve
""" + _LOAD_ENGINE + _STATS_WRITER + r"""
ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never another session's cluster
""" + _PLAIN_DEPLOYMENT + r"""
serve.start(http_options={"host": "127.0.0.1", "port": int(sys.argv[1])})
h = serve.run(Engine.bind(sys.argv[2], sys.argv[3], json.loads(sys.argv[4])), route_prefix="/")
write_stats(h, sys.argv[5])
print("READY", flush=True)
sys.stdin.read()
serve.shutdown()
ray.shutdown()
"""

EMBER_PLAIN_SERVER = r"""
import sys, json
import ember
from ember import serve
""" + _LOAD_ENGINE + _STATS_WRITER + r"""
ember.init(num_cpus=2, log_to_driver=False)
""" + _PLAIN_DEPLOYMENT + r"""
h = serve.run(Engine.bind(sys.argv[2], sys.argv[3], json.loads(sys.argv[4])), route_prefix="/", host="127.0.0.1",
              port=int(sys.argv[1]))
write_stats(h, sys.argv[5])
print("READY", flush=True)
sys.stdin.read()
serve.shutdown()
ember.shutdown()
"""

EMBER_SERVER = r"""
import sys, json
import ember
from ember import serve
from ember.serve.llm import LLMConfig, build_openai_app
""" + _STATS_WRITER + r"""
ember.init(num_cpus=2, log_to_driver=False)
cfg = LLMConfig(model_loading_config={"model_id": "tiny", "model_source": sys.argv[2]}, llm_engine="torch",
                engine_kwargs=json.loads(sys.argv[4]), deployment_config={"max_ongoing_requests": 256})
serve.run(build_openai_app({"llm_configs": [cfg]}), route_prefix="/", host="127.0.0.1", port=int(sys.argv[1]))
write_stats(serve.get_deployment_handle("LLMServer:tiny", "default"), sys.argv[5])
print("READY", flush=True)
sys.stdin.read()
serve.shutdown()
ember.shutdown()
"""


async def _request(reader, writer, path: str, body: bytes, host: str) -> tuple[int, float]:
    """(tokens, seconds to the first token) of one streamed response."""
    t0 = time.perf_counter()
    writer.write(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    head = await reader.readuntil(b"\r\n\r\n")
    if int(head.split(b" ", 2)[1]) != 200:
        raise RuntimeError(head.decode(errors="replace"))
    tokens, first, buf = 0, 0.0, b""
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        data = await reader.readexactly(size + 2)
        if size == 0:
            break
        buf += data[:-2]
        *events, buf = buf.split(b"\n\n")
        for e in events:
            if e.startswith(b"data: {") and b'"text":""' not in e and b'"content":""' not in e and b'"choices":[]' not in e:
                tokens += 1
                if not first:
                    first = time.perf_counter() - t0
    return tokens, first


async def _client(port, args, path, stop_at, budget, out) -> None:
    host = f"127.0.0.1:{port}"
    body = json.dumps({"model": "tiny", "prompt": "Tell me a story", "max_tokens": args.max_tokens,
                       "temperature": 0.0, "stream": True, "ignore_eos": True}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while budget[0] > 0 and time.monotonic() < stop_at:
            budget[0] -= 1
            t0 = time.perf_counter()
            n, first = await _request(reader, writer, path, body, host)
            out["tokens"] += n
            out["ttft"].append(first)
            out["lat"].append(time.perf_counter() - t0)
    except (OSError, asyncio.IncompleteReadError, RuntimeError, ValueError) as e:
        out["errors"] += 1
        out["last_error"] = repr(e)[:200]
    finally:
        writer.close()


CORE_MARKER = "--ember-llm-engine-core"  # engine_core.MARKER, on the engine-core process's command line


def _cpu_times() -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) of every process under this one, by pid, with a short name
    (the engine-core child of a replica is "core")."""
    import psutil

    out, parents = {}, set()
    for p in psutil.Process().children(recursive=True):
        try:
            t = p.cpu_times()
            cmd = " ".join(p.cmdline())
            if CORE_MARKER in cmd:
                parents.add(p.ppid())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        out[p.pid] = ("core" if CORE_MARKER in cmd else _short_name(cmd), t.user + t.system)
    for pid in parents & set(out):
        out[pid] = ("llm_replica", out[pid][1])
    return out


def _pct(xs, q):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1000, 1) if xs else float("nan")


def _summary(out, elapsed):
    return {"requests": len(out["lat"]), "tokens_per_s": round(out["tokens"] / elapsed, 1),
            "ttft_p50_ms": _pct(out["ttft"], 0.5), "ttft_p99_ms": _pct(out["ttft"], 0.99),
            "p50_ms": _pct(out["lat"], 0.5), "errors": out["errors"],
            **({"last_error": out["last_error"]} if "last_error" in out else {})}


def _read_stats(path: str) -> dict | None:
    """The server's latest engine counters (written every 0.5 s): read after 0.6 s of quiet."""
    time.sleep(0.6)
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _batch_fill(before: dict | None, after: dict | None, requests: int) -> dict:
    """The engine's step counters over a load phase: rows per decode step, prefill passes per
    request, and (engines that count them) mixed steps, newcomers per prefill pass, ms per step
    of each kind and the share of the phase the step loop sat idle."""
    if not before or not after or "num_steps" not in after:
        return {}
    d = {k: after[k] - before[k] for k in after if isinstance(after[k], (int, float)) and k in before}
    steps = max(d["num_steps"], 1)
    out = {"rows_per_step": round((d["generated_tokens"] - requests) / steps, 2),
           "prefills_per_request": round(d["num_prefills"] / max(requests, 1), 2)}
    if "num_mixed" in d:
        prefills = max(d["num_prefills"], 1)
        separate = max(d["num_prefills"] - d["num_mixed"], 1)
        plain = max(d["num_steps"] - d["num_mixed"], 1)
        out.update({"mixed_share": round(d["num_mixed"] / prefills, 2),
                    "rows_per_prefill": round(d["prefill_rows"] / prefills, 2),
                    "ms_per_step": {"decode": round(1e3 * d["decode_s"] / plain, 2),
                                    "prefill": round(1e3 * d["prefill_s"] / separate, 2),
                                    "mixed": round(1e3 * d["mixed_s"] / max(d["num_mixed"], 1), 2),
                                    "whole_step": round(1e3 * d["step_s"] / steps, 2)},
                    "idle_s": round(d["idle_s"], 2),
                    "slot_wait_ms": round(1e3 * d["slot_wait_s"] / max(d["slot_refills"], 1), 2)})
    return out


async def http_load(port, args, path, concurrency, requests, stats_path="") -> dict:
    warm = {"tokens": 0, "ttft": [], "lat": [], "errors": 0}
    await asyncio.gather(*[_client(port, args, path, time.monotonic() + 30, [2], warm) for _ in range(concurrency)])
    out = {"tokens": 0, "ttft": [], "lat": [], "errors": 0}
    budget = [requests]
    st0 = _read_stats(stats_path) if stats_path else None
    cpu0 = _cpu_times()
    t0 = time.perf_counter()
    await asyncio.gather(*[_client(port, args, path, time.monotonic() + args.duration, budget, out)
                           for _ in range(concurrency)])
    res = _summary(out, time.perf_counter() - t0)
    res["cpu_us_per_token"] = _cpu_per_chunk(cpu0, _cpu_times(), out["tokens"])
    if stats_path:
        res.update(_batch_fill(st0, _read_stats(stats_path), len(out["lat"])))
    return res


# The limit: the engine alone in a fresh process (as each server's replica is), loaded from the
# engine's files like Ray's side (no ember imported), CONCURRENCY asyncio consumers on the loop the
# engine delivers to, each doing a server's per-token work (one SSE event string per delta). It
# used to run inside this benchmark process, after build_tiny_model had run torch here and with
# the benchmark's own state around, and came out below both servers.
DIRECT = r"""
import asyncio, itertools, json, sys, time
""" + _LOAD_ENGINE + r"""
path, internal, kwargs, max_tokens, conc, requests, single, duration, core = sys.argv[1:10]
max_tokens, conc, requests, single, duration = int(max_tokens), int(conc), int(requests), int(single), float(duration)
make, Request, Params = load_engine(internal)
# direct: one process, the limit; direct_core: the same consumers on the engine-core process
engine = make("tiny", path, {**json.loads(kwargs), "engine_process": core == "1"})
engine.start()
core_proc = None
if core == "1":
    import psutil
    core_proc = psutil.Process(engine.core_pid)

def core_cpu():
    return sum(core_proc.cpu_times()[:2]) if core_proc else 0.0
ids = engine.encode("Tell me a story")
counter = itertools.count()

async def consumer(stop_at, budget, out):
    while budget[0] > 0 and time.monotonic() < stop_at:
        budget[0] -= 1
        t0 = time.perf_counter()
        first, n = 0.0, 0
        req = Request(f"d{next(counter)}", ids, Params(max_tokens=max_tokens, temperature=0.0, ignore_eos=True))
        async for deltas in engine.generate(req):
            for d in deltas:
                if not d.text:
                    continue
                _ = 'data: {"choices":[{"index":%d,"text":%s}]}\n\n' % (d.index, json.dumps(d.text))
                n += 1
                if not first:
                    first = time.perf_counter() - t0
        out["tokens"] += n
        out["ttft"].append(first)
        out["lat"].append(time.perf_counter() - t0)

async def load(concurrency, n_requests):
    await asyncio.gather(*[consumer(time.monotonic() + 30, [2], {"tokens": 0, "ttft": [], "lat": []})
                           for _ in range(concurrency)])
    out = {"tokens": 0, "ttft": [], "lat": [], "errors": 0}
    budget = [n_requests]
    t0, c0, k0, s0 = time.perf_counter(), time.process_time(), core_cpu(), dict(vars(engine.stats()))
    await asyncio.gather(*[consumer(time.monotonic() + duration, budget, out) for _ in range(concurrency)])
    out["elapsed"] = time.perf_counter() - t0
    out["cpu_us"] = (time.process_time() - c0) * 1e6
    out["core_cpu_us"] = (core_cpu() - k0) * 1e6
    out["engine"] = [s0, dict(vars(engine.stats()))]
    return out

res = {"many": asyncio.run(load(conc, requests)), "one": asyncio.run(load(1, single))}
engine.shutdown()
print("RESULT " + json.dumps(res), flush=True)
"""


def run_direct(path, args, core: bool = False) -> dict:
    import subprocess

    cmd = [sys.executable, "-c", DIRECT, path, os.path.abspath(INTERNAL), args.engine_kwargs, str(args.max_tokens),
           str(args.concurrency), str(args.requests), str(args.single_requests), str(args.duration),
           "1" if core else "0"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"the direct engine run failed (rc {p.returncode}): {p.stderr[-2000:]}")
    res = json.loads(line[len("RESULT "):])
    out = {}
    for k, v in res.items():
        cpu, core_cpu = v.pop("cpu_us"), v.pop("core_cpu_us")
        st = v.pop("engine")
        out[k] = _summary(v, v.pop("elapsed"))
        out[k].update(_batch_fill(st[0], st[1], len(v["lat"])))
        per, per_core = round(cpu / max(v["tokens"], 1), 1), round(core_cpu / max(v["tokens"], 1), 1)
        out[k]["cpu_us_per_token"] = ({"core": per_core, "direct": per, "total": round(per + per_core, 1)} if core
                                      else {"direct": per, "total": per})
    return out


def run_server(python, server, model, args, env_extra=None) -> dict:
    env = dict(os.environ, **(env_extra or {}))
    stats = tempfile.mktemp(prefix="compare-llm-stats-")
    try:
        with server_process(python, server, [model, os.path.abspath(INTERNAL), args.engine_kwargs, stats],
                            start_timeout_s=300, env=env) as port:
            path = "/v1/completions" if server is EMBER_SERVER else "/"
            return {"many": asyncio.run(http_load(port, args, path, args.concurrency, args.requests, stats)),
                    "one": asyncio.run(http_load(port, args, path, 1, args.single_requests, stats))}
    finally:
        if os.path.exists(stats):
            os.unlink(stats)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--requests", type=int, default=160)
    ap.add_argument("--single-requests", type=int, default=20)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--engine-kwargs", default='{"max_num_seqs": 16}')
    ap.add_argument("--model-dir", default=os.path.join(tempfile.gettempdir(), "ember-compare-llm"))
    ap.add_argument("--ray-python", default="/work/rayvenv/bin/python")
    ap.add_argument("--ray-pythonpath", default="/tmp/rayllm")
    ap.add_argument("--only", default="direct,ember,ember_plain,ray_plain")
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(HERE, "..", "client"))
    from ember.serve.llm.testing import build_tiny_model

    model = build_tiny_model(args.model_dir, hidden_size=args.hidden, num_layers=args.layers, num_heads=4)
    only = args.only.split(",")
    results = {}
    for name in only:
        load0 = round(os.getloadavg()[0], 1)
        if name in ("direct", "direct_core"):
            results[name] = run_direct(model, args, core=name == "direct_core")
        elif name == "ember":
            results[name] = run_server(sys.executable, EMBER_SERVER, model, args)
        elif name == "ember_plain":
            results[name] = run_server(sys.executable, EMBER_PLAIN_SERVER, model, args)
        elif name == "ray_plain":
            if not os.path.exists(args.ray_python):
                print(f"skipping ray_plain: no {args.ray_python}")
                continue
            results[name] = run_server(args.ray_python, RAY_SERVER, model, args,
                                       {"PYTHONPATH": args.ray_pythonpath} if args.ray_pythonpath else None)
        results[name]["load_avg"] = load0
        print(name, json.dumps(results[name]), flush=True)
    print(f"\nmodel: llama hidden={args.hidden} layers={args.layers}; {args.concurrency} streams x "
          f"{args.max_tokens} tokens; engine_kwargs {args.engine_kwargs}")
    print(f"{'system':<13}{'tok/s':>9}{'ttft50':>8}{'ttft99':>8}{'p50 ms':>8}{'err':>5} |"
          f"{' 1 stream: tok/s':>17}{'ttft50':>8}{'ttft99':>8}{'load':>6}")
    for name, r in results.items():
        m, o = r["many"], r["one"]
        print(f"{name:<13}{m['tokens_per_s']:>9}{m['ttft_p50_ms']:>8}{m['ttft_p99_ms']:>8}{m['p50_ms']:>8}"
              f"{m['errors']:>5} |{o['tokens_per_s']:>17}{o['ttft_p50_ms']:>8}{o['ttft_p99_ms']:>8}{r['load_avg']:>6}")
    if "direct" in results:
        d = results["direct"]["many"]["tokens_per_s"]
        for name in ("direct_core", "ember", "ember_plain", "ray_plain"):
            if name in results:
                print(f"{name}: {results[name]['many']['tokens_per_s'] / d:.2f} of the direct engine's tokens/s; "
                      f"1-stream TTFT p50 {results[name]['one']['ttft_p50_ms']} ms vs direct "
                      f"{results['direct']['one']['ttft_p50_ms']} ms")
    for name, r in results.items():
        if "rows_per_step" in r["many"]:
            m = r["many"]
            print(f"{name} batch fill, {args.concurrency} streams: {m['rows_per_step']} rows per decode "
                  f"step, {m['prefills_per_request']} prefill passes per request"
                  + (f", {m['mixed_share']} of them mixed into a decode, {m['rows_per_prefill']} newcomers per "
                     f"prefill; ms per step {m['ms_per_step']}; idle {m['idle_s']} s; a freed slot waits "
                     f"{m['slot_wait_ms']} ms for a newcomer" if "mixed_share" in m else ""))
    for name, r in results.items():
        if "cpu_us_per_token" in r["many"]:
            print(f"{name} CPU µs per token, {args.concurrency} streams: {r['many']['cpu_us_per_token']}")
    for name in ("ember", "ember_plain"):
        if name in results and "ray_plain" in results:
            print(f"{name}/ray_plain tokens/s: "
                  f"{results[name]['many']['tokens_per_s'] / results['ray_plain']['many']['tokens_per_s']:.2f}x")


if __name__ == "__main__":
    main()
