"""One streamed request to an LLM engine (the in-thread TorchEngine or the engine-core client),
collected for the engine tests."""
from __future__ import annotations

import asyncio
import time
from typing import Any

from ember.serve.llm._internal.engine import GenerationRequest
from ember.serve.llm._internal.params import SamplingParams


async def stream_request(engine: Any, rid: str, ids: Any, started: asyncio.Event | None = None,
                         **params: Any) -> dict[str, Any]:
    """One request's text, output tokens, finish reason, seconds and time to its first deltas;
    `started` is set once it has two tokens out (it is then in the running batch, with the rest
    to go), and at its end whatever happens (an early end or an error never holds the next one
    back)."""
    t0 = time.perf_counter()
    text, n, reason, first = "", 0, None, None
    try:
        async for deltas in engine.generate(GenerationRequest(rid, ids, SamplingParams(**params))):
            first = first or time.perf_counter() - t0
            for d in deltas:
                text += d.text
                n = d.num_output_tokens
                reason = d.finish_reason or reason
            if started is not None and n >= 2:
                started.set()
    finally:
        if started is not None:
            started.set()
    return {"text": text, "tokens": n, "reason": reason, "seconds": time.perf_counter() - t0, "ttft": first}
