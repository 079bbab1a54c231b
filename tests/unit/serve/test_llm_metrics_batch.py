"""The LLM replica's per-token metrics: noted per token, applied to the Prometheus series once
per event-loop iteration, with the same resulting series as one observe/inc per token."""
from __future__ import annotations

import asyncio
import json

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from ember.serve.llm._internal import metrics as m
from ember.serve.llm._internal import openai_api as oa

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5)


def _samples(reg: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in reg.collect() for s in fam.samples if not s.name.endswith("_created")}


def test_observe_many_gives_the_series_of_one_observe_per_value():
    values = [0.0, 0.0005, 0.0004, 0.0031, 0.0031, 0.7, 2.5, 3.0, 1e9, 0.02, 0.0200001]
    regs = []
    for batch in (False, True):
        reg = CollectorRegistry()
        h = Histogram("itl_seconds", "x", ["model_id"], registry=reg, buckets=BUCKETS).labels("tiny")
        if batch:
            m.observe_many(h, values[:4])
            m.observe_many(h, values[4:])
        else:
            for v in values:
                h.observe(v)
        regs.append(_samples(reg))
    assert regs[0] == pytest.approx(regs[1], rel=1e-12)  # (the sum: float addition order)
    assert regs[0][("itl_seconds_count", (("model_id", "tiny"),))] == len(values)


def test_observe_many_on_anything_else_calls_observe_and_noop_is_free():
    seen: list[float] = []

    class Plain:
        def observe(self, v: float) -> None:
            seen.append(v)

    m.observe_many(Plain(), [1.0, 2.0])
    assert seen == [1.0, 2.0]
    m.observe_many(m._Noop(), [1.0])  # nothing to do, no error


class _Engine:
    def stats(self):  # pragma: no cover - not read here
        raise AssertionError


def _metrics_on(reg: CollectorRegistry) -> m.LLMMetrics:
    lm = m.LLMMetrics("tiny", _Engine(), False)
    lm.ttft = Histogram("ttft", "x", ["model_id"], registry=reg, buckets=BUCKETS).labels("tiny")
    lm.itl = Histogram("itl", "x", ["model_id"], registry=reg, buckets=BUCKETS).labels("tiny")
    lm.gen_tokens = Counter("gen", "x", ["model_id"], registry=reg).labels("tiny")
    return lm


def test_a_loop_iterations_tokens_reach_the_series_once_after_it():
    reg = CollectorRegistry()
    lm = _metrics_on(reg)
    key = ("gen_total", (("model_id", "tiny"),))

    async def main() -> list[float]:
        tracks = [lm.start(4) for _ in range(3)]
        got = []
        for step in range(4):  # four engine steps, three streams each; the last one gives 2 tokens
            for t in tracks:
                t.tokens(2 if step == 3 else 1)
            got.append(_samples(reg)[key])  # not applied yet: the flush runs after this iteration
            await asyncio.sleep(0)
            got.append(_samples(reg)[key])
        return got

    got = asyncio.run(main())
    assert got == [0.0, 3.0, 3.0, 6.0, 6.0, 9.0, 9.0, 15.0]
    s = _samples(reg)
    assert s[("ttft_count", (("model_id", "tiny"),))] == 3
    assert s[("itl_count", (("model_id", "tiny"),))] == 9  # one per token after the first, per stream
    assert sum(n for _, n in lm.window) == 15 and len(lm.window) == 4  # one window entry per iteration
    assert not lm.flush_queued and not lm.itl_pending and lm.new_tokens == 0


def test_tokens_outside_a_loop_are_applied_at_once():
    reg = CollectorRegistry()
    lm = _metrics_on(reg)
    t = lm.start(4)
    t.tokens(1)
    t.tokens(3)
    assert _samples(reg)[("gen_total", (("model_id", "tiny"),))] == 4.0
    assert _samples(reg)[("itl_count", (("model_id", "tiny"),))] == 1


def test_chunk_writer_text_is_json_of_any_text():
    w = oa.ChunkWriter("cmpl-1", "tiny", chat=False)
    c = oa.ChunkWriter("chatcmpl-1", "tiny", chat=True)
    for text in ["", " tok", 'q"uote\\', "new\nline\x00", "é€😀\u2028"]:
        for reason in (None, "length"):
            for writer in (w, c):
                chunk = writer.delta(0, text, reason)
                assert chunk.startswith("data: ") and chunk.endswith("\n\n")
                choice = json.loads(chunk[len("data: "):])["choices"][0]
                assert (choice["delta"]["content"] if writer.chat else choice["text"]) == text
                assert choice["finish_reason"] == reason
