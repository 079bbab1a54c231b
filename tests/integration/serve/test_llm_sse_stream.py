"""LLMServer's pushed SSE streams (sse_stream.py) in one process on the tiny model: the same
bytes as the generator path, through Serve's StreamPump and StreamMux; a pump closed mid-stream
aborts the sequence; the engine's refusal and failure become OpenAI error events (no cluster).

In the integration tier for its weight (torch and a model), like test_llm_engine.py."""
from __future__ import annotations

import asyncio
import re

import pytest

pytest.importorskip("torch", reason="the llm extra (torch, transformers) is not installed")

from ember.serve._private.streams import StreamMux, StreamPump  # noqa: E402
from ember.serve.llm._internal import openai_api as oa  # noqa: E402
from ember.serve.llm._internal.engine import GenerationRequest  # noqa: E402
from ember.serve.llm._internal.server import LLMServer  # noqa: E402
from ember.serve.llm._internal.sse_stream import SSEStream  # noqa: E402
from ember.serve.llm.testing import build_tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = build_tiny_model(str(tmp_path_factory.mktemp("tiny") / "llama"))
    s = LLMServer({"model_loading_config": {"model_id": "tiny", "model_source": path}, "llm_engine": "torch",
                   "engine_kwargs": {"max_num_seqs": 16}, "log_engine_metrics": False})
    yield s
    s.engine.shutdown()


def _norm(text: str) -> str:
    """Request ids and timestamps differ between two requests; the rest must be equal."""
    return re.sub(r'"(chat)?cmpl-[0-9a-f]+"', '"ID"', re.sub(r'"created":\d+', '"created":0', text))


async def _pulled(server: LLMServer, body: dict, chat: bool) -> str:
    """The generator path (what every engine without `submit` takes), joined."""
    rid, ids, params, stream, with_usage = server._prepare(body, chat)
    return "".join([x async for x in server._run(rid, ids, params, stream, with_usage, chat)])


BODIES = [
    ({"model": "tiny", "prompt": "Hello world", "max_tokens": 12, "temperature": 0, "stream": True}, False),
    ({"model": "tiny", "prompt": "Hi", "max_tokens": 9, "temperature": 1.0, "seed": 7, "n": 2, "stream": True,
      "ignore_eos": True, "stream_options": {"include_usage": True}}, False),
    ({"model": "tiny", "messages": [{"role": "user", "content": "count"}], "max_tokens": 10, "temperature": 0,
      "stream": True, "stream_options": {"include_usage": True}}, True),
]


@pytest.mark.parametrize("body,chat", BODIES)
def test_pushed_stream_has_the_generator_paths_bytes(server, body, chat):
    async def go():
        out = server.chat(body) if chat else server.completions(body)
        assert isinstance(out, SSEStream)
        pushed = "".join([x async for x in out])
        return pushed, await _pulled(server, body, chat)

    pushed, pulled = asyncio.run(go())
    assert pushed.endswith(oa.DONE) and pushed.count(oa.DONE) == 1
    assert _norm(pushed) == _norm(pulled)


def test_sixteen_streams_through_pumps_and_a_mux_as_bytes(server):
    body = {"model": "tiny", "prompt": "Tell me a story", "max_tokens": 20, "temperature": 0, "stream": True,
            "ignore_eos": True}

    async def go():
        mux = StreamMux()
        streams = []
        for i in range(16):
            s = server.completions(dict(body))
            s.as_bytes = True
            mux.add(f"s{i}", StreamPump(s))
            streams.append(s)
        got: dict[str, bytes] = {}
        polls = 0
        while len(mux) and polls < 1000:
            polls += 1
            for sid, data, _done, err in await mux.poll(10):
                assert err is None
                got[sid] = got.get(sid, b"") + data
        return got, polls, await _pulled(server, body, False)

    got, polls, pulled = asyncio.run(go())
    assert len(got) == 16
    for data in got.values():
        assert _norm(data.decode()) == _norm(pulled)
    assert polls <= 16 * 21 // 4  # streams coalesce: a step's hand-off fills many at once
    assert not server.engine._outputs


def test_closing_the_pump_aborts_the_sequence(server):
    body = {"model": "tiny", "prompt": "forever", "max_tokens": 500, "stream": True, "ignore_eos": True}

    async def go():
        s = server.completions(body)
        pump = StreamPump(s)
        items, done = await pump.take(30)
        assert items and not done
        for _ in range(100):
            if server.engine.stats().running == 1:
                break
            await asyncio.sleep(0.01)
        pump.close()  # the HTTP client went away
        for _ in range(500):
            if server.engine.stats().running == 0 and not server.engine._outputs:
                return True
            await asyncio.sleep(0.01)
        return False

    assert asyncio.run(go())


def test_refusal_and_engine_failure_become_error_events(server):
    async def go():
        eng = server.engine
        w = oa.ChunkWriter("cmpl-x", "tiny", False)
        ids = eng.encode("hi")
        from ember.serve.llm._internal.params import SamplingParams

        params = SamplingParams(max_tokens=800, ignore_eos=True)
        blocker = SSEStream(eng, GenerationRequest("dup", ids, params), w, server.metrics, False)
        first = await blocker.__anext__()
        assert "dup" in eng._outputs
        dup = SSEStream(eng, GenerationRequest("dup", ids, params), w, server.metrics, False)
        refused = "".join([x async for x in dup])  # the same id while the first runs: refused
        await blocker.aclose()
        assert "dup" not in eng._outputs and blocker._finished
        failing = SSEStream(eng, GenerationRequest("f", ids, params), w, server.metrics, False)
        failing._put, failing._end = failing._buffer, failing._wake
        failing._start()
        eng.cancel("f")
        failing._on(RuntimeError("the engine failed: boom"))
        failed = "".join([x async for x in failing])
        return first, refused, failed

    first, refused, failed = asyncio.run(go())
    assert first.startswith('data: {"id":"cmpl-x"')
    assert refused.startswith("data: {\"error\"") and '"code": 400' in refused and "already running" in refused
    assert refused.endswith(oa.DONE)
    assert '"code": 500' in failed and "RuntimeError: the engine failed: boom" in failed and failed.endswith(oa.DONE)
