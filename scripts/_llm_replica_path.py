"""The LLM replica's per-token path with the real classes, no threads, no engine, no sockets:
the core's frames (built beforehand) → EngineCoreClient's reader side → SSEStream → StreamPump
(converting as handle_http does) → StreamMux → a flush that encodes as the stream channel does,
16 streams x 64 tokens per round. Prints the process CPU per token; for a figure that holds on
a loaded machine count instructions and take the difference of two round counts:

    PYTHONPATH=TREE/client valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        .venv/bin/python scripts/_llm_replica_path.py ROUNDS [METRICS 0/1]   (12 and 2 rounds:
        (Ir(12) - Ir(2)) / (10 * 16 * 64) instructions per token)
"""
from __future__ import annotations

import asyncio
import logging
import sys
import time

logging.basicConfig()
from ember.serve._private import stream_channel as sc  # noqa: E402
from ember.serve._private.http_util import to_bytes  # noqa: E402
from ember.serve._private.streams import StreamMux, StreamPump  # noqa: E402
from ember.serve.llm._internal import openai_api as oa  # noqa: E402
from ember.serve.llm._internal.core_client import EngineCoreClient  # noqa: E402
from ember.serve.llm._internal.engine import EngineStats, GenerationRequest  # noqa: E402
from ember.serve.llm._internal.engine_core import FrameReader, frame  # noqa: E402
from ember.serve.llm._internal.metrics import LLMMetrics  # noqa: E402
from ember.serve.llm._internal.params import SamplingParams  # noqa: E402
from ember.serve.llm._internal.sse_stream import SSEStream  # noqa: E402

STREAMS, TOKENS = 16, 64


class _Client(EngineCoreClient):
    """EngineCoreClient's reader and delivery side without a core process."""

    def __init__(self) -> None:  # noqa: D107 - no core: nothing of EngineCoreClient's start
        self._init_frontend()
        self._max_len = 1024
        self._reader = FrameReader()
        self._stats = EngineStats()
        self._sock = None
        self._loop = None

    def _post_add(self, request: GenerationRequest) -> None:
        pass

    def _post_abort(self, request_id: str) -> None:
        pass

    def _bind(self) -> None:
        pass


async def run(rounds: int, with_metrics: bool) -> None:
    """rounds waves of STREAMS streams of TOKENS tokens; prints bytes sent and CPU per token."""
    eng = _Client()
    metrics = LLMMetrics("tiny", eng, with_metrics)
    mux = StreamMux()
    loop = asyncio.get_running_loop()
    sent, queued = [0], [False]

    def flush() -> None:  # what the channel's _Pusher does
        queued[0] = False
        batch = mux.take_ready()
        if batch:
            sent[0] += len(sc.encode(batch))

    def schedule() -> None:
        if not queued[0]:
            queued[0] = True
            loop.call_soon(flush)

    mux.notify = schedule
    stats = tuple(vars(EngineStats()).values())
    t0 = time.process_time()
    for r in range(rounds):
        rids = [f"cmpl-{r}-{i:032d}" for i in range(STREAMS)]
        frames = [frame(([(rid, 0, " tok", t + 1, "length" if t == TOKENS - 1 else None, 4) for rid in rids], stats))
                  for t in range(TOKENS)]
        for rid in rids:
            params = SamplingParams(max_tokens=TOKENS, temperature=0.0, ignore_eos=True)
            s = SSEStream(eng, GenerationRequest(rid, [1, 2, 3, 4], params), oa.ChunkWriter(rid, "tiny", False),
                          metrics, False, as_bytes=True)
            mux.add(rid, StreamPump(s, convert=to_bytes))
        for data in frames:
            eng._deliver(eng._frames(eng._reader.feed(data)))
            await asyncio.sleep(0)
        await asyncio.sleep(0)
    dt = time.process_time() - t0
    print(f"rounds {rounds} bytes {sent[0]} cpu µs/token {dt / (rounds * STREAMS * TOKENS) * 1e6:.2f}")


if __name__ == "__main__":
    asyncio.run(run(int(sys.argv[1]), sys.argv[2] == "1" if len(sys.argv) > 2 else True))
