"""The programs compare_llm.py runs, as source text: each server (Ember's OpenAI app, one Ember
deployment, the same deployment on Ray Serve 2.60) is `python -c SERVER PORT MODEL INTERNAL_DIR
ENGINE_KWARGS STATS_PATH`, and the direct engine is `python -c DIRECT ...` (see run_direct). The
engine's files are loaded as a package of their own (`ember_llm_engine`), so Ray's interpreter, or
another tree's, runs exactly the files of the directory it is given."""
from __future__ import annotations

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


