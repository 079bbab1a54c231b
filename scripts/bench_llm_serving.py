"""The LLM replica's serving work per token, without a model: what the replica's event loop
spends between the engine's per-step hand-off and the stream channel's send, in CPU µs per token
of the loop thread (time.thread_time: the figure that holds on a loaded machine).

A fake engine (TorchEngine's hand-off and bookkeeping, no forward pass: every step emits one
delta per running request, then sleeps --step-ms) drives CONCURRENCY streamed /v1/completions
requests of MAX_TOKENS tokens through LLMServer and Serve's StreamPump / StreamMux, and a pusher
loop encodes what each poll returns as the stream channel would (stream_channel.encode). Paths:

    push   LLMServer's SSEStream attached to the pump (what a replica runs now)
    pull   the generator path: engine.generate → LLMServer._run → the HTTP layer's generators
           (_relay, sse) → a pump task per stream, items made bytes as read (what it ran before)

    .venv/bin/python scripts/bench_llm_serving.py [--concurrency 16] [--max-tokens 64]
        [--rounds 20] [--step-ms 2] [--repeat 3]
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "client"))

from ember.serve._private import stream_channel as sc  # noqa: E402
from ember.serve._private.http_util import to_bytes  # noqa: E402
from ember.serve._private.streams import StreamMux, StreamPump  # noqa: E402
from ember.serve.llm._internal.engine import GenerationDelta  # noqa: E402
from ember.serve.llm._internal.ingress import _relay  # noqa: E402
from ember.serve.llm._internal.server import LLMServer  # noqa: E402
from ember.serve.llm._internal.torch_engine import TorchEngine  # noqa: E402


class FakeEngine(TorchEngine):
    """TorchEngine's request side and hand-off; the step emits " tok" per running sequence."""

    step_s = 0.002

    def __init__(self, config: Any) -> None:
        super().__init__(config.model_id, "", {})
        self._max_len = 1024

    def start(self) -> None:
        self._thread = threading.Thread(target=self._fake_run, daemon=True)
        self._thread.start()

    def encode(self, text: str) -> list[int]:
        return [1, 2, 3, 4]

    def _fake_run(self) -> None:
        active: dict[str, list[Any]] = {}
        while not self._stop:
            with self._cv:
                inbox, self._inbox = self._inbox, collections.deque()
            for kind, arg in inbox:
                if kind == "add":
                    for s in arg:
                        active[s.seq_id] = [s, 0]
                else:
                    for sid in [k for k, v in active.items() if v[0].request_id == arg]:
                        del active[sid]
            out = []
            for sid, st in list(active.items()):
                s = st[0]
                st[1] += 1
                reason = "length" if st[1] >= s.params.max_tokens else None
                out.append((s.request_id, GenerationDelta(s.index, " tok", st[1], reason, 4)))
                if reason is not None:
                    del active[sid]
            self._stats.generated_tokens += len(out)
            self._send(out)
            time.sleep(self.step_s)


def _pull(server: LLMServer, body: dict[str, Any]) -> Any:
    """The generator path as the replica ran it: LLMServer's generator under the HTTP layers."""
    rid, ids, params, stream, with_usage = server._prepare(body, False)
    inner = _relay(server._run(rid, ids, params, stream, with_usage, False))

    async def sse() -> Any:
        async for x in inner:
            yield x

    return sse()


async def run(server: LLMServer, path: str, args: argparse.Namespace) -> tuple[int, float]:
    """(tokens, loop-thread CPU seconds) of args.rounds waves of args.concurrency streams."""
    mux = StreamMux()
    body = {"model": "fake", "prompt": "x", "max_tokens": args.max_tokens, "stream": True}
    sent = 0
    t0 = time.thread_time()
    for r in range(args.rounds):
        for i in range(args.concurrency):
            if path == "push":
                s = server.completions(dict(body))
                s.as_bytes = True
                pump = StreamPump(s)
            else:
                pump = StreamPump(_pull(server, dict(body)), convert=to_bytes)  # as handle_http
            mux.add(f"{r}-{i}", pump)
        while len(mux):
            batch = await mux.poll(10)
            sent += len(sc.encode(batch))
    cpu = time.thread_time() - t0
    return args.rounds * args.concurrency * args.max_tokens, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--step-ms", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--metrics", action="store_true", help="LLMServer's Prometheus metrics on (as in a replica)")
    args = ap.parse_args()
    FakeEngine.step_s = args.step_ms / 1000
    server = LLMServer({"model_loading_config": {"model_id": "fake", "model_source": "/nonexistent"},
                        "llm_engine": "torch", "log_engine_metrics": args.metrics}, engine_cls=FakeEngine)
    results: dict[str, list[float]] = {"push": [], "pull": []}
    try:
        for _ in range(args.repeat):
            for path in ("pull", "push"):
                tokens, cpu = asyncio.run(run(server, path, args))
                results[path].append(cpu / tokens * 1e6)
    finally:
        server.engine.shutdown()
    load = os.getloadavg()[0]
    for path, xs in results.items():
        print(f"{path}: loop-thread CPU µs per token {[round(x, 1) for x in xs]} (median "
              f"{sorted(xs)[len(xs) // 2]:.1f}); {args.concurrency} streams x {args.max_tokens} tokens "
              f"x {args.rounds} rounds, step {args.step_ms} ms, load {load:.1f}")


if __name__ == "__main__":
    main()
