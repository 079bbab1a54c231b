"""Where one LLM request's first token goes: timestamps along the path, one request at a time.

    .venv/bin/python scripts/_llm_ttft_probe.py [--systems direct,direct_core,ember,ember_thread]
        [--requests 40] [--pause-ms 20] [--rounds 1] [--before DIR] [--json PATH]

Every stage is stamped with `time.perf_counter()` (CLOCK_MONOTONIC on Linux: one clock for every
process of the machine), in the process where it happens, by wrapping the engine's own methods
(no change to the code measured; the wrappers cost a few µs each):

    direct        the in-thread engine (TorchEngine) in a child process, driven by generate()
    direct_core   the same driver on the engine-core process (EngineCoreClient)
    ember         LLMServer as the app's ingress (what compare_llm's `ember` serves), a deployment
                  subclass that installs the wrappers in the replica; its engine core is started
                  with a boot that installs the core's; the client is one raw HTTP/1.1 connection
    ember_thread  the same with the engine in a thread of the replica (engine_process false)

Requests: greedy, 8 tokens, compare_llm's prompt, one at a time, PAUSE apart. Stages (the time
since the request was sent, ms, p50 over the requests; NAME2: the stage's second time, i.e.
the second step):

    client side      sent → first (the first token with text read: the HTTP client's, or the
                     generate() consumer's)
    replica          call (LLMServer.__call__), body (the JSON parsed), prepared (tokenized),
                     submit, flushed (the ops frame written), readable (the reader callback),
                     deliver (any batch), delivered (the first with a delta), pushed (the first
                     SSE chunk handed to the proxy's channel)
    core / thread    woke (poll returned with the request's frame), ops (taken off the wire),
                     take (admitted), sched, forward (prefill done; fwd_cpu its thread CPU),
                     sampled, emitted (detokenized, stop checks), printed (the first step with
                     a delta), written (any frame), sent (the first frame with a delta, stamped
                     before its write); in-thread: handed (call_soon_threadsafe)

(prepare_cpu: the thread CPU of LLMServer._prepare), the CPU µs per request of each process kind
of the Ember run and its voluntary context switches per request, by process kind and thread
(from /proc: every process whose environment carries this run's PROBE_TTFT_OUT), and the
thread the replica runs on (`ember-core`, or `ember-actor-loop` for a tree from before),
and per-request segments (p50 of the differences): to_core, to_step, prefill_step, step2,
back (core's frame → the replica's deliver), back_thread (the printing step's end → deliver),
replica_out, after_push, before_call, call_body, body_submit. On a loaded machine read the
segments, not the stage medians, and alternate trees (`--rounds`).

`--before DIR` runs every system from another tree too (its interpreter, its engine files),
alternating with this one.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)
sys.path.insert(0, HERE)
INTERNAL = os.path.join("client", "ember", "serve", "llm", "_internal")

# The stamps and the wrappers, as source text: exec'd here and by the core's boot. A process's
# Stamps keeps one dict per request (start() opens it); patch_engine wraps the step loop's
# methods in the engine modules `mods` so that each stage stamps it.
PATCH = r'''
import time as _t

class Stamps:
    def __init__(self):
        self.cur = None
        self.done = []

    def start(self, name, t=None):
        if self.cur:
            self.done.append(self.cur)
        self.cur = {name: t if t is not None else _t.perf_counter()}

    def at(self, name, t=None):
        """The first and second time a stage is reached in this request (NAME, NAME2)."""
        cur = self.cur
        if cur is not None:
            if name in cur:
                name += "2"
            if name not in cur:
                cur[name] = t if t is not None else _t.perf_counter()

    def all(self):
        return self.done + ([self.cur] if self.cur else [])


def wrap(cls, meth, before=None, after=None):
    orig = getattr(cls, meth, None)
    if orig is None:
        return
    def w(self, *a, **k):
        if before:
            before(self, *a)
        r = orig(self, *a, **k)
        if after:
            after(self, *a)
        return r
    setattr(cls, meth, w)


def wrap_fn(mod, name, after):
    orig = getattr(mod, name)
    def w(*a, **k):
        r = orig(*a, **k)
        after()
        return r
    setattr(mod, name, w)


def patch_engine(S, mods, prefix):
    """The step loop's stages (TorchEngine's methods: in the core process and in-thread alike)."""
    te, kv, sched, sampling = mods["torch_engine"], mods["kv_batch"], mods["scheduler"], mods["sampling"]
    wrap(te.TorchEngine, "_take", after=lambda s, *a: S.at(prefix + "take"))
    wrap(sched.BatchScheduler, "schedule", after=lambda s, *a: S.at(prefix + "sched"))
    cpu = [0.0]
    wrap(kv.KVBatch, "prefill", before=lambda s, *a: cpu.__setitem__(0, _t.thread_time()),
         after=lambda s, *a: (S.at(prefix + "forward"), S.at(prefix + "fwd_cpu", (_t.thread_time() - cpu[0]) * 1e3)))
    wrap(kv.KVBatch, "mixed", after=lambda s, *a: S.at(prefix + "forward"))
    wrap_fn(sampling, "sample", lambda: S.at(prefix + "sampled"))
    wrap(te.TorchEngine, "_emit", after=lambda s, *a: S.at(prefix + "emitted"))
    orig_emit = te.TorchEngine._emit
    def emit(self, *a):
        out = orig_emit(self, *a)
        if out:
            S.at(prefix + "printed")  # the first step with a delta
        return out
    te.TorchEngine._emit = emit
'''


# The core's boot: engine_core.BOOT plus the wrappers; the stamps go to $PROBE_TTFT_OUT (one JSON
# list, rewritten each time the core goes idle).
CORE_BOOT = r"""
import sys, types, os, json, select as _select
pkg = types.ModuleType("ember_llm_engine"); pkg.__path__ = [sys.argv[1]]
sys.modules["ember_llm_engine"] = pkg
from ember_llm_engine import engine_core, torch_engine, kv_batch, scheduler, sampling
ns = {}
exec(os.environ["PROBE_TTFT_PATCH"], ns)
S = ns["Stamps"]()
ns["patch_engine"](S, {"torch_engine": torch_engine, "kv_batch": kv_batch, "scheduler": scheduler,
                        "sampling": sampling}, "core_")
out = os.environ["PROBE_TTFT_OUT"]
woke = [0.0]

class Poller:
    def __init__(self):
        self.p = _select.poll()
    def register(self, *a):
        self.p.register(*a)
    def poll(self, timeout=None):
        if timeout is None:  # idle: save what we have, then block
            with open(out + ".tmp", "w") as f:
                json.dump(S.all(), f)
            os.replace(out + ".tmp", out)
        r = self.p.poll(timeout)
        woke[0] = ns["_t"].perf_counter()
        return r

class _Sel:
    POLLIN = _select.POLLIN
    poll = Poller
engine_core.select = _Sel

orig_ops = engine_core.EngineCore._ops
def _ops(self, ops, inbox):
    if any(op[0] == "add" for op in ops):
        S.start("core_woke", woke[0])
    r = orig_ops(self, ops, inbox)
    S.at("core_ops")
    return r
engine_core.EngineCore._ops = _ops
ns["wrap"](engine_core.EngineCore, "_write", after=lambda s, *a: S.at("core_written"))
ns["wrap"](engine_core.EngineCore, "_write", before=lambda s, obj: obj[0] and S.at("core_sent"))
sys.exit(engine_core.main(sys.argv[2:]))
"""


_P: dict = {}
exec(PATCH, _P)  # Stamps, wrap, wrap_fn, patch_engine, for the driver's and the replica's side


def patch_client(S, mods: dict, core: bool) -> None:
    """The replica's (or driver's) side of the engine: submit, the ops frame, the reader; with
    the in-thread engine its step loop's stages too (prefix core_, as in the core process)."""
    wrap, fe = _P["wrap"], mods["frontend"]
    if core:
        cc = mods["core_client"]
        cc.BOOT = CORE_BOOT
        os.environ["PROBE_TTFT_PATCH"] = PATCH
        wrap(cc.EngineCoreClient, "_flush", after=lambda s, *a: S.at("flushed"))
        wrap(cc.EngineCoreClient, "_on_readable", before=lambda s, *a: S.at("readable"))
    else:
        _P["patch_engine"](S, mods, "core_")
        wrap(mods["torch_engine"].TorchEngine, "_send", after=lambda s, *a: S.at("handed"))
    wrap(fe.EngineFrontend, "submit", before=lambda s, *a: S.at("submit"))
    wrap(fe.EngineFrontend, "_deliver", before=lambda s, *a: S.at("deliver"))
    wrap(fe.EngineFrontend, "_deliver", before=lambda s, batch: batch and S.at("delivered"))


def engine_modules(internal: str) -> dict:
    """The engine's modules loaded from `internal` as the package ember_llm_engine."""
    import importlib
    import types

    if "ember_llm_engine" not in sys.modules:
        pkg = types.ModuleType("ember_llm_engine")
        pkg.__path__ = [internal]
        sys.modules["ember_llm_engine"] = pkg
    return {n: importlib.import_module(f"ember_llm_engine.{n}")
            for n in ("core_client", "frontend", "torch_engine", "kv_batch", "scheduler", "sampling", "engine",
                      "params")}


def direct_child(model: str, internal: str, core: bool, requests: int, pause_s: float, out: str) -> None:
    """(In a child process) one request at a time on the engine driven by generate()."""
    import asyncio
    import time

    mods = engine_modules(internal)
    S = _P["Stamps"]()
    patch_client(S, mods, core)
    os.environ["PROBE_TTFT_OUT"] = out + ".core"
    cls = mods["core_client"].EngineCoreClient if core else mods["torch_engine"].TorchEngine
    engine = cls("tiny", model, {"max_num_seqs": 16})
    engine.start()
    import torch

    ids = engine.encode("Tell me a story")
    Request, Params = mods["engine"].GenerationRequest, mods["params"].SamplingParams

    async def run() -> None:
        for i in range(requests):
            S.start("sent")
            req = Request(f"p{i}", ids, Params(max_tokens=8, temperature=0.0, ignore_eos=True))
            async for deltas in engine.generate(req):
                if any(d.text for d in deltas):
                    S.at("first")
            await asyncio.sleep(pause_s)

    asyncio.run(run())
    engine.shutdown()
    time.sleep(0.2)
    with open(out, "w") as f:
        json.dump({"client": S.all(), "torch_threads": torch.get_num_threads()}, f)


PROBE_SERVER = r"""
import sys, json, os
sys.path.insert(0, os.environ["PROBE_TTFT_SCRIPTS"])
import ember
from ember import serve
from ember.serve.llm import LLMConfig, LLMServer, build_llm_deployment

class ProbeLLM(LLMServer):
    def __init__(self, cfg):
        import _llm_ttft_probe as P
        import ember.serve.llm._internal as I
        from ember.serve.llm._internal import core_client, frontend, torch_engine, kv_batch, scheduler, sampling, sse_stream
        mods = {"core_client": core_client, "frontend": frontend, "torch_engine": torch_engine,
                "kv_batch": kv_batch, "scheduler": scheduler, "sampling": sampling}
        self._S = S = P._P["Stamps"]()
        core = cfg.engine_kwargs.get("engine_process", True)
        P.patch_client(S, mods, core)
        import time
        cpu = [0.0]
        P._P["wrap"](LLMServer, "_prepare", before=lambda s, *a: cpu.__setitem__(0, time.thread_time()),
                     after=lambda s, *a: (S.at("prepared"), S.at("prepare_cpu", (time.thread_time() - cpu[0]) * 1e3)))
        from ember.serve.llm._internal import openai_api
        P._P["wrap_fn"](openai_api, "parse_json", lambda: S.at("body"))
        P._P["wrap"](sse_stream.SSEStream, "_emit", after=lambda s, *a: S.at("pushed"))
        super().__init__(cfg)
        try:  # this subclass is Ember's probe of LLMServer: its replica runs where LLMServer's does
            from ember.serve._private.core_loop import never_blocks
            from ember.serve.llm._internal.server import _never_blocks
            never_blocks(when=_never_blocks)(type(self))
        except ImportError:  # a tree from before the core-loop replicas
            pass

    async def __call__(self, request):
        self._S.start("call")
        return await super().__call__(request)

    async def probe_stamps(self):
        import threading, torch
        return {"replica": self._S.all(), "torch_threads": torch.get_num_threads(),
                "replica_thread": threading.current_thread().name}

ember.init(num_cpus=2, log_to_driver=False)
cfg = LLMConfig(model_loading_config={"model_id": "tiny", "model_source": sys.argv[2]}, llm_engine="torch",
                engine_kwargs=json.loads(sys.argv[3]), deployment_config={"max_ongoing_requests": 256})
serve.run(build_llm_deployment(cfg, deployment_cls=ProbeLLM), route_prefix="/", host="127.0.0.1", port=int(sys.argv[1]))
h = serve.get_deployment_handle("LLMServer:tiny", "default")
print("READY", flush=True)
sys.stdin.read()
with open(sys.argv[4], "w") as f:
    json.dump(h.probe_stamps.remote().result(), f)
serve.shutdown()
ember.shutdown()
"""


async def _http_one_at_a_time(port: int, requests: int, pause_s: float, S) -> None:
    import asyncio

    body = json.dumps({"model": "tiny", "prompt": "Tell me a story", "max_tokens": 8, "temperature": 0.0,
                       "stream": True, "ignore_eos": True}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    for _ in range(requests):
        S.start("sent")
        writer.write(head)
        await reader.readuntil(b"\r\n\r\n")
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            data = await reader.readexactly(size + 2)
            if size == 0:
                break
            if b'"text":"' in data and b'"text":""' not in data:
                S.at("first")
        await asyncio.sleep(pause_s)
    writer.close()


def run_ember(tree: str, model: str, kwargs: dict, requests: int, pause_s: float) -> dict:
    import asyncio

    from _server_proc import server_process
    from compare_llm import tree_runtime

    python, env = tree_runtime(tree)
    out = tempfile.mktemp(prefix="ttft-probe-")
    env = dict(os.environ, **env, PROBE_TTFT_SCRIPTS=HERE, PROBE_TTFT_OUT=out + ".core")
    S = _P["Stamps"]()
    try:
        with server_process(python, PROBE_SERVER, [model, json.dumps(kwargs), out], start_timeout_s=300,
                            env=env) as port:
            before = switches(out)
            asyncio.run(_http_one_at_a_time(port, requests, pause_s, S))
            after = switches(out)
        res = _results(out)
        res["client"] = S.all()
        res["switches"] = {k: round((after.get(k, 0) - v) / requests, 2) for k, v in before.items()}
        return res
    finally:
        _remove(out)


def switches(tag: str) -> dict[str, int]:
    """Voluntary context switches of every thread of every process of one run (those whose
    environment holds PROBE_TTFT_OUT=tag.core: the server, its cluster's services, workers and
    the engine core), summed by process kind and thread name ("total": all of them; Python's
    threads all show as "python": the kernel's name, which threading does not set); and each
    kind's CPU time in µs ("cpu_us:KIND", from the threads' schedstat)."""
    mark = f"PROBE_TTFT_OUT={tag}.core".encode()
    out: dict[str, int] = {"total": 0}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            kind = _kind(argv)
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    n = next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    cpu_ns = int(f.read().split()[0])
                key = f"{kind}/{name}"
                out[key] = out.get(key, 0) + n
                out["total"] += n
                out[f"cpu_us:{kind}"] = out.get(f"cpu_us:{kind}", 0) + cpu_ns // 1000
        except (OSError, StopIteration):
            continue  # gone meanwhile
    return out


def _kind(argv: list[bytes]) -> str:
    """A process's part of the run, from its command line."""
    text = b" ".join(argv)
    for needle, kind in ((b"worker_main", "worker"), (b"fork_server", "worker"), (b"ember_llm_engine", "core"), (b"ember_raylet", "raylet"), (b"ember_gcs", "gcs"),
                         (b"ember_objmgr", "objmgr"), (b"serve_proxy", "proxy"), (b"engine_core", "core"),
                         (b"ProbeLLM", "driver")):
        if needle in text:
            return kind
    return "other"


def run_direct(tree: str, model: str, core: bool, requests: int, pause_s: float) -> dict:
    from compare_llm import tree_runtime

    python, env = tree_runtime(tree)
    out = tempfile.mktemp(prefix="ttft-probe-")
    code = (f"import sys; sys.path.insert(0, {HERE!r}); import _llm_ttft_probe as P; "
            f"P.direct_child(*sys.argv[1:3], sys.argv[3] == '1', int(sys.argv[4]), float(sys.argv[5]), sys.argv[6])")
    try:
        subprocess.run([python, "-c", code, model, os.path.join(os.path.abspath(tree), INTERNAL), "1" if core else "0",
                        str(requests), str(pause_s), out], check=True, timeout=600, env=dict(os.environ, **env))
        return _results(out)
    finally:
        _remove(out)


def _results(out: str) -> dict:
    """A run's results (the file `out`) with the core's stamps (`out`.core) under "core"."""
    with open(out) as f:
        res = json.load(f)
    res["core"] = _read(out + ".core")
    return res


def _remove(out: str) -> None:
    for p in (out, out + ".core"):
        if os.path.exists(p):
            os.unlink(p)


def _read(path: str) -> list:
    try:
        with open(path) as f:
            return list(json.load(f))
    except (OSError, ValueError):
        return []


ORDER = ["sent", "call", "body", "prepared", "submit", "flushed", "core_woke", "core_ops", "core_take", "core_sched",
         "core_forward", "core_sampled", "core_emitted", "handed", "core_written", "readable", "deliver",
         "core_sched2", "core_forward2", "core_sampled2", "core_emitted2", "handed2", "core_written2", "readable2",
         "deliver2", "core_printed", "core_sent", "delivered", "pushed", "first"]
# Per-request durations (ms, p50 of the differences), from stage a (or `sent` where the system has
# no a: the direct runs submit when they send) to stage b.
SEGMENTS = {"to_core": ("submit", "core_ops"), "to_step": ("submit", "core_take"), "prefill_step": ("core_sched", "core_emitted"),
            "step2": ("core_sched2", "core_emitted2"), "back": ("core_sent", "delivered"),
            "back_thread": ("core_printed", "delivered"), "replica_out": ("delivered", "pushed"),
            "after_push": ("pushed", "first"), "before_call": ("sent", "call"), "call_body": ("call", "body"),
            "body_submit": ("body", "submit")}
# thread CPU ms (not a time since `sent`): the prefill forward, the replica's _prepare (parse the
# OpenAI fields, tokenize, sampling parameters)
CPU = ["core_fwd_cpu", "prepare_cpu"]


def merge(res: dict, skip: int) -> dict[str, float]:
    """p50 of each stage's time since `sent` (ms), over the requests after the first `skip`; each
    client record gets the replica's and the core's record that started inside it."""
    rows = []
    others = [r for k in ("replica", "core") for r in res.get(k, [])]
    for rec in res["client"][skip:]:
        if "first" not in rec:
            continue
        t0, t1 = rec["sent"], rec["first"]
        row = dict(rec)
        for o in others:
            start = min(v for k, v in o.items() if k not in CPU)
            if t0 <= start <= t1:
                for k, v in o.items():
                    row.setdefault(k, v)
        rows.append({k: v if k in CPU else (v - t0) * 1e3 for k, v in row.items()})
    out: dict[str, float] = {"n": len(rows)}
    for k in ORDER + CPU:
        vals = [r[k] for r in rows if k in r]
        if vals:
            out[k] = round(statistics.median(vals), 3)
    for name, (a, b) in SEGMENTS.items():
        vals = [r[b] - r[a if a in r else "sent"] for r in rows if b in r]
        if vals:
            out[name] = round(statistics.median(vals), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default="direct,direct_core,ember")
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--pause-ms", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--before", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(TREE, "client"))
    from ember.serve.llm.testing import build_tiny_model

    model = build_tiny_model(os.path.join(tempfile.gettempdir(), "ember-compare-llm"), hidden_size=128,
                             num_layers=4, num_heads=4)
    trees = [("", TREE)] + ([("@before", args.before)] if args.before else [])
    results = []
    for rnd in range(args.rounds):
        for name in args.systems.split(","):
            for suffix, tree in (trees if rnd % 2 == 0 else trees[::-1]):
                load = os.getloadavg()[0]
                if name in ("direct", "direct_core"):
                    res = run_direct(tree, model, name == "direct_core", args.requests, args.pause_ms / 1e3)
                else:
                    kw = {"max_num_seqs": 16, **({"engine_process": False} if name == "ember_thread" else {})}
                    res = run_ember(tree, model, kw, args.requests, args.pause_ms / 1e3)
                m = merge(res, skip=3)
                results.append({"system": name + suffix, "round": rnd + 1, "load": round(load, 1),
                                "torch_threads": res.get("torch_threads"), "p50_ms": m,
                                "replica_thread": res.get("replica_thread"),
                                "switches_per_request": {k: v for k, v in sorted(
                                    res.get("switches", {}).items(), key=lambda kv: -kv[1])
                                    if v >= 0.3 and not k.startswith("cpu_us:")},
                                "cpu_us_per_request": {k[7:]: v for k, v in res.get("switches", {}).items()
                                                       if k.startswith("cpu_us:")}})
                print(json.dumps(results[-1]), flush=True)
    print(f"\n{'stage':<14}" + "".join(f"{r['system'][:13]:>14}" for r in results))
    for k in ["n"] + ORDER + CPU + list(SEGMENTS):
        if any(k in r["p50_ms"] for r in results):
            print(f"{k:<14}" + "".join(f"{r['p50_ms'].get(k, ''):>14}" for r in results))
    print(f"{'load':<14}" + "".join(f"{r['load']:>14}" for r in results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
