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
    NAME@before   any of the above (but ray_plain) run from another tree (--before DIR: its
                  .venv's Python, its client/common/services on PYTHONPATH, its engine files), to
                  alternate a change with the tree before it under the same load

The engine is what LLMServer runs (`engine_kwargs["engine_process"]`, true by default): its step
loop in an engine-core child process of the replica (core_client.py, engine_core.py), for the
Ember servers and for Ray's alike (the same engine code); `--engine-kwargs
'{"engine_process": false}'` puts it back in a thread of the replica. The direct run always
drives the in-thread engine in its one process.

Every request streams MAX_TOKENS tokens (ignore_eos, greedy) from a short prompt; each SSE event
that carries text counts as one token. Clients are raw asyncio HTTP/1.1 keep-alive connections,
bounded by REQUESTS and DURATION (_llm_load.py). Reported: tokens/s (all clients), time to first
token p50/p99, request latency p50, the CPU time per token of each process under the server
(user + system: the load-independent figure; the engine core is "core"), the engine's batch
fill; then the same with one client (time to first token at 1 stream).

`--rounds N` runs the systems N times, alternating (ABBA: the order reverses every round, so a
drift of the machine's speed hits every system alike), and reports each round's figures, the
median tokens/s and 1-stream TTFT of each system, the ratio of the medians to the reference
(direct when it runs, else the first system) and the ratio within each round. On a shared machine
one run's ratio swings with the load; the median of the per-round ratios is the robust figure.

The Ray side needs transformers in Ray's interpreter: --ray-pythonpath names a directory with it
(e.g. `pip install --no-deps --target DIR transformers tokenizers huggingface_hub safetensors
regex tqdm typer hf-xet httpx2 httpcore2 click shellingham rich truststore annotated-doc` with
Ray's pip), prepended to PYTHONPATH; the engine's module files are loaded from this tree.

    .venv/bin/python scripts/compare_llm.py [--concurrency 16] [--max-tokens 64] [--requests 160]
        [--duration 30] [--hidden 128 --layers 4] [--ray-python .rayvenv/bin/python]
        [--ray-pythonpath .rayllm] [--only direct,direct_core,ember,ember_plain,ray_plain]
        [--rounds 1] [--before DIR] [--json PATH]
"""
from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

from _llm_load import _batch_fill, _summary, http_load
from _llm_servers import DIRECT, EMBER_PLAIN_SERVER, EMBER_SERVER, RAY_SERVER
from _server_proc import server_process

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)
INTERNAL = os.path.join("client", "ember", "serve", "llm", "_internal")
SERVERS = {"ember": EMBER_SERVER, "ember_plain": EMBER_PLAIN_SERVER, "ray_plain": RAY_SERVER}


def tree_runtime(tree: str) -> tuple[str, dict[str, str]]:
    """(python, environment) that runs Ember from the tree at `tree`: its .venv's interpreter with
    its client, common and services on PYTHONPATH (this process's interpreter for this tree)."""
    if os.path.abspath(tree) == os.path.abspath(TREE):
        return sys.executable, {}
    python = os.path.join(tree, ".venv", "bin", "python")
    if not os.path.exists(python):
        raise SystemExit(f"--before {tree}: no {python}")
    paths = [os.path.join(tree, "client"), os.path.join(tree, "common")]
    paths += sorted(glob.glob(os.path.join(tree, "services", "*")))
    return python, {"PYTHONPATH": os.pathsep.join(paths)}


def run_direct(path, args, tree: str, core: bool = False) -> dict:
    python, env = tree_runtime(tree)
    cmd = [python, "-c", DIRECT, path, os.path.join(os.path.abspath(tree), INTERNAL), args.engine_kwargs,
           str(args.max_tokens), str(args.concurrency), str(args.requests), str(args.single_requests),
           str(args.duration), "1" if core else "0"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ, **env))
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


def run_server(python, server, model, args, tree: str, env_extra=None) -> dict:
    env = dict(os.environ, **(env_extra or {}))
    stats = tempfile.mktemp(prefix="compare-llm-stats-")
    try:
        with server_process(python, server, [model, os.path.join(os.path.abspath(tree), INTERNAL),
                                             args.engine_kwargs, stats], start_timeout_s=300, env=env) as port:
            path = "/v1/completions" if server is EMBER_SERVER else "/"
            return {"many": asyncio.run(http_load(port, args, path, args.concurrency, args.requests, stats)),
                    "one": asyncio.run(http_load(port, args, path, 1, args.single_requests, stats))}
    finally:
        if os.path.exists(stats):
            os.unlink(stats)


def run_system(name: str, model: str, args) -> dict | None:
    """One run of a system (None: skipped)."""
    base, _, where = name.partition("@")
    if where and where != "before":
        raise SystemExit(f"unknown system {name!r}: the only tree suffix is @before")
    if where and not args.before:
        raise SystemExit(f"{name} needs --before DIR (the tree to compare with)")
    tree = args.before if where else TREE
    if base in ("direct", "direct_core"):
        return run_direct(model, args, tree, core=base == "direct_core")
    if base == "ray_plain":
        if where:
            raise SystemExit("ray_plain@before: Ray runs this tree's engine files only")
        if not os.path.exists(args.ray_python):
            print(f"skipping ray_plain: no {args.ray_python}")
            return None
        return run_server(args.ray_python, RAY_SERVER, model, args, tree,
                          {"PYTHONPATH": args.ray_pythonpath} if args.ray_pythonpath else None)
    if base not in SERVERS:
        raise SystemExit(f"unknown system {name!r} (known: direct, direct_core, {', '.join(SERVERS)})")
    python, env = tree_runtime(tree)
    return run_server(python, SERVERS[base], model, args, tree, env)


def _cpu(r: dict) -> str:
    c = r["many"].get("cpu_us_per_token", {})
    core = next((v for k, v in c.items() if k.startswith("core")), None)
    return f"{c.get('total', '')}" + (f" (core {core})" if core is not None else "")


def report(rounds: list[dict[str, dict]], args) -> dict:
    """Prints every round's figures, then medians and ratios; returns the summary."""
    names = list(dict.fromkeys(n for r in rounds for n in r))
    print(f"\nmodel: llama hidden={args.hidden} layers={args.layers}; {args.concurrency} streams x "
          f"{args.max_tokens} tokens; engine_kwargs {args.engine_kwargs}; {len(rounds)} round(s)")
    print(f"{'round':<6}{'system':<18}{'tok/s':>9}{'ttft50':>8}{'ttft99':>8}{'p50 ms':>8}{'err':>5} |"
          f"{' 1 stream ttft50':>17}{'rows/step':>10}{'load':>6}  CPU µs/token")
    for i, r in enumerate(rounds, 1):
        for name, res in r.items():
            m, o = res["many"], res["one"]
            print(f"{i:<6}{name:<18}{m['tokens_per_s']:>9}{m['ttft_p50_ms']:>8}{m['ttft_p99_ms']:>8}"
                  f"{m['p50_ms']:>8}{m['errors']:>5} |{o['ttft_p50_ms']:>17}{m.get('rows_per_step', ''):>10}"
                  f"{res['load_avg']:>6}  {_cpu(res)}")
    ref = "direct" if "direct" in names else names[0]
    summary: dict = {"reference": ref, "systems": {}}
    for name in names:
        runs = [r[name] for r in rounds if name in r]
        tps = [x["many"]["tokens_per_s"] for x in runs]
        ttft1 = [x["one"]["ttft_p50_ms"] for x in runs]
        s = summary["systems"][name] = {"tokens_per_s": tps, "median_tokens_per_s": statistics.median(tps),
                                        "ttft1_p50_ms": ttft1, "median_ttft1_p50_ms": statistics.median(ttft1),
                                        "loads": [x["load_avg"] for x in runs]}
        if name != ref:
            pairs = [(r[name], r[ref]) for r in rounds if name in r and ref in r]
            s["round_ratios"] = [round(a["many"]["tokens_per_s"] / b["many"]["tokens_per_s"], 3) for a, b in pairs]
            s["round_ttft1_diff_ms"] = [round(a["one"]["ttft_p50_ms"] - b["one"]["ttft_p50_ms"], 1) for a, b in pairs]
    for name, s in summary["systems"].items():
        line = (f"{name}: median {s['median_tokens_per_s']:.1f} tok/s of {s['tokens_per_s']}; 1-stream TTFT p50 "
                f"median {s['median_ttft1_p50_ms']} ms; loads {s['loads']}")
        if name != ref:
            med_ref = summary["systems"][ref]
            s["ratio_of_medians"] = round(s["median_tokens_per_s"] / med_ref["median_tokens_per_s"], 3)
            s["median_round_ratio"] = statistics.median(s["round_ratios"]) if s["round_ratios"] else None
            s["median_ttft1_diff_ms"] = (statistics.median(s["round_ttft1_diff_ms"])
                                         if s["round_ttft1_diff_ms"] else None)
            line += (f"\n    / {ref}: ratio of medians {s['ratio_of_medians']}, per round {s['round_ratios']} "
                     f"(median {s['median_round_ratio']}); 1-stream TTFT minus {ref}'s per round "
                     f"{s['round_ttft1_diff_ms']} ms (median {s['median_ttft1_diff_ms']})")
        print(line)
    last = rounds[-1]
    for name, r in last.items():
        m = r["many"]
        if "rows_per_step" in m:
            print(f"{name} batch fill (last round): {m['rows_per_step']} rows per decode step, "
                  f"{m['prefills_per_request']} prefill passes per request"
                  + (f", {m['mixed_share']} mixed, {m['rows_per_prefill']} newcomers per prefill; ms per step "
                     f"{m['ms_per_step']}; idle {m['idle_s']} s; a freed slot waits {m['slot_wait_ms']} ms"
                     if "mixed_share" in m else ""))
        if "cpu_us_per_token" in m:
            print(f"{name} CPU µs per token (last round): {m['cpu_us_per_token']}")
    if "ray_plain" in summary["systems"]:
        ray = summary["systems"]["ray_plain"]["median_tokens_per_s"]
        for name in ("ember", "ember_plain"):
            if name in summary["systems"]:
                print(f"{name}/ray_plain tokens/s (medians): {summary['systems'][name]['median_tokens_per_s'] / ray:.2f}x")
    return summary


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
    ap.add_argument("--ray-python", default=".rayvenv/bin/python")
    ap.add_argument("--ray-pythonpath", default=".rayllm")
    ap.add_argument("--only", default="direct,ember,ember_plain,ray_plain")
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds of every system (ABBA order)")
    ap.add_argument("--before", default="", help="another tree, for the NAME@before systems")
    ap.add_argument("--json", default="", help="write every round's results and the summary here")
    args = ap.parse_args()
    if args.rounds < 1:
        raise SystemExit("--rounds must be >= 1")
    sys.path.insert(0, os.path.join(TREE, "client"))
    from ember.serve.llm.testing import build_tiny_model

    model = build_tiny_model(args.model_dir, hidden_size=args.hidden, num_layers=args.layers, num_heads=4)
    only = args.only.split(",")
    rounds: list[dict[str, dict]] = []
    for i in range(args.rounds):
        this: dict[str, dict] = {}
        for name in (only if i % 2 == 0 else only[::-1]):
            load0 = round(os.getloadavg()[0], 1)
            res = run_system(name, model, args)
            if res is None:
                continue
            res["load_avg"] = load0
            this[name] = res
            print(f"round {i + 1} {name}", json.dumps(res), flush=True)
        rounds.append({n: this[n] for n in only if n in this})
    summary = report(rounds, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rounds": rounds, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
