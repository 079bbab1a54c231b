"""The torch engine in one process on a tiny local model: the KV batch, sampling, continuous
batching, cancellation, preemption and stop strings (no cluster, no sockets).

In the integration tier for its weight, not for processes: importing torch and transformers and
writing and loading a model take most of a unit-tier budget on their own (~6 s of CPU)."""
from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

torch = pytest.importorskip("torch", reason="the llm extra (torch, transformers) is not installed")

from llm_streams import stream_request as _run  # noqa: E402

from ember.serve.llm._internal.engine import GenerationRequest  # noqa: E402
from ember.serve.llm._internal.params import SamplingParams  # noqa: E402
from ember.serve.llm._internal.sampling import filter_logits, make_generator, sample  # noqa: E402
from ember.serve.llm._internal.torch_engine import TorchEngine  # noqa: E402
from ember.serve.llm.testing import build_tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(str(tmp_path_factory.mktemp("tiny") / "llama"))


def _greedy_alone(model, ids, n):
    """Reference: one sequence, no batch, no padding."""
    from transformers import DynamicCache

    from ember.serve.llm._internal.kv_batch import cache_arg

    kw = cache_arg(model)
    cache = DynamicCache()
    out = []
    with torch.inference_mode():
        r = model(input_ids=torch.tensor([ids]), use_cache=True, **{kw: cache})
        for _ in range(n):
            t = int(r.logits[0, -1].argmax())
            out.append(t)
            r = model(input_ids=torch.tensor([[t]]), use_cache=True, **{kw: cache})
    return out


def test_kv_batch_rows_join_and_leave_without_changing_outputs(model_dir):
    from transformers import AutoModelForCausalLM

    from ember.serve.llm._internal.kv_batch import KVBatch

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    prompts = {"a": [5, 6, 7], "b": [30, 31, 32, 33, 34, 35, 36], "c": [40, 41]}
    want = {k: _greedy_alone(model, v, 8) for k, v in prompts.items()}
    assert len(set(want["b"])) > 2  # the tiny model does not just repeat one token
    got: dict[str, list[int]] = {k: [] for k in prompts}
    with torch.inference_mode():
        batch = KVBatch(model, torch.device("cpu"))

        def join(keys):
            rows, logits = batch.prefill(keys, [prompts[k] for k in keys])
            rows.pending = logits.argmax(-1).tolist()
            for k, t in zip(keys, rows.pending, strict=True):
                got[k].append(t)
            batch.merge(rows)

        def step():
            batch.pending = batch.decode().argmax(-1).tolist()
            for k, t in zip(batch.seq_ids, batch.pending, strict=True):
                got[k].append(t)

        join(["a"])
        step()
        join(["b"])  # longer than a: a's rows get padded on the left
        step()
        step()
        join(["c"])
        step()
        batch.remove({"a"})  # a leaves; b and c carry on
        step()
        step()
        step()
    assert got["a"] == want["a"][:5]
    assert got["b"] == want["b"][:7]
    assert got["c"] == want["c"][:5]
    assert batch.width <= max(len(p) for p in prompts.values()) + 6  # padding trimmed


def test_kv_batch_mixed_steps_keep_outputs(model_dir):
    """Newcomers of different lengths prefilled in the running rows' decode forward (mixed
    steps), one longer than the batch's width: every row's tokens are those of a run alone."""
    from transformers import AutoModelForCausalLM

    from ember.serve.llm._internal.kv_batch import KVBatch

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    prompts = {"a": [5, 6, 7], "b": list(range(30, 42)), "c": [40, 41], "d": list(range(50, 80)), "e": [9]}
    want = {k: _greedy_alone(model, v, 10) for k, v in prompts.items()}
    got: dict[str, list[int]] = {k: [] for k in prompts}
    with torch.inference_mode():
        batch = KVBatch(model, torch.device("cpu"))
        rows, logits = batch.prefill(["a"], [prompts["a"]])
        rows.pending = logits.argmax(-1).tolist()
        got["a"] += rows.pending
        batch.merge(rows)

        def note():
            for k, t in zip(batch.seq_ids, batch.pending, strict=True):
                got[k].append(t)

        def mixed(keys):
            batch.pending = batch.mixed(keys, [prompts[k] for k in keys]).argmax(-1).tolist()
            note()

        def step():
            batch.pending = batch.decode().argmax(-1).tolist()
            note()

        step()
        mixed(["b"])  # longer than a's row
        step()
        mixed(["c", "d"])  # two at once, d longer than the whole batch so far
        assert batch.seq_ids == ["a", "b", "c", "d"]
        step()
        holes = batch.width
        batch.remove({"d"})
        # realigned: each row's real tokens right-aligned, no column that is padding in every row
        assert batch.width == int(batch.mask.sum(-1).max()) < holes
        assert all(bool(r[int(r.nonzero()[0]):].all()) for r in batch.mask)
        mixed(["e"])
        step()
        step()
    for k in prompts:
        assert len(got[k]) >= 2 and got[k] == want[k][:len(got[k])], k


def test_decode_mask_built_in_one_op_gives_the_same_logits(model_dir):
    """A padded batch's decode gets its 4D boolean mask from KVBatch (transformers' mask
    creation skipped): the logits are exactly those of the 2D mask that the model expands
    itself, and a batch without padding keeps the 2D mask."""
    from transformers import AutoModelForCausalLM, DynamicCache

    from ember.serve.llm._internal.kv_batch import KVBatch

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with torch.inference_mode():
        batch = KVBatch(model, torch.device("cpu"))
        rows, logits = batch.prefill(["a", "b", "c"], [[5, 6, 7], [30, 31, 32, 33, 34, 35], [40]])
        rows.pending = logits.argmax(-1).tolist()
        batch.merge(rows)
        assert batch._mask4d  # this transformers takes a prepared 4D mask
        for _ in range(3):
            saved = (batch.mask.clone(), batch.pos.clone(), list(batch.pending),
                     [(layer.keys.clone(), layer.values.clone()) for layer in batch.cache.layers])
            four = batch.decode()
            assert batch._decode_mask().dim() == 4  # padded rows: the 4D mask was used
            batch.mask, batch.pos, batch.pending = saved[0], saved[1], saved[2]
            batch.cache = DynamicCache()
            for i, (k, v) in enumerate(saved[3]):
                batch.cache.update(k, v, i)
            batch._mask4d = False
            two = batch.decode()
            batch._mask4d = True
            assert torch.equal(four, two)
            batch.pending = two.argmax(-1).tolist()
        alone = KVBatch(model, torch.device("cpu"))
        rows, _ = alone.prefill(["x"], [[5, 6, 7]])
        alone.merge(rows)
        assert alone._decode_mask().dim() == 2  # no padding: the model drops the mask itself


def test_sampling_filters_and_seeds():
    logits = torch.tensor([1.0, 5.0, 3.0, 2.0])
    x = filter_logits(logits, 1.0, 2, 1.0)
    assert torch.isinf(x[[0, 3]]).all() and not torch.isinf(x[[1, 2]]).any()
    x = filter_logits(logits, 1.0, -1, 0.5)  # the top token alone has > 0.5 of the mass
    assert not torch.isinf(x[1]) and torch.isinf(x[[0, 2, 3]]).all()
    p = SamplingParams(temperature=1.0, seed=7)
    rows = torch.randn(3, 50)
    a = sample(rows, [p] * 3, [make_generator(p, i) for i in range(3)])
    b = sample(rows, [p] * 3, [make_generator(p, i) for i in range(3)])
    assert a == b
    g = SamplingParams(temperature=0)
    assert sample(rows, [g] * 3, [None] * 3) == rows.argmax(-1).tolist()  # all greedy: one argmax
    mixed = sample(rows, [g, p, g], [None, make_generator(p, 0), None])
    assert [mixed[0], mixed[2]] == [rows[0].argmax().item(), rows[2].argmax().item()]


@pytest.fixture(scope="module")
def engine(model_dir):
    e = TorchEngine("tiny", model_dir, {"max_num_seqs": 16})
    e.start()
    yield e
    e.shutdown()


def test_engine_generates_and_counts(engine):
    ids = engine.encode("Hello world")
    r = asyncio.run(_run(engine, "one", ids, max_tokens=12, temperature=0))
    assert r["tokens"] == 12 and r["reason"] == "length"
    expected = engine.tokenizer.decode(_greedy_alone(engine.model, ids, 12), skip_special_tokens=True)
    assert r["text"] == expected
    s1 = asyncio.run(_run(engine, "s1", ids, max_tokens=12, temperature=1.0, seed=3))
    s2 = asyncio.run(_run(engine, "s2", ids, max_tokens=12, temperature=1.0, seed=3))
    assert s1["text"] == s2["text"]


def test_continuous_batching_16_streams_share_steps(engine):
    ids = engine.encode("Tell me a story")

    async def both():
        one = await _run(engine, "solo", ids, max_tokens=48, temperature=0, ignore_eos=True)
        t0 = time.perf_counter()
        many = await asyncio.gather(*[_run(engine, f"m{i}", ids, max_tokens=48, temperature=0.8, seed=i,
                                           ignore_eos=True) for i in range(16)])
        return one, many, time.perf_counter() - t0

    one, many, elapsed = asyncio.run(both())
    assert all(m["tokens"] == 48 for m in many)
    # 16 requests in one batch: far less than 16 times one request's time.
    assert elapsed < 16 * one["seconds"] / 3, (elapsed, one["seconds"])


def test_requests_joining_a_running_batch_keep_greedy_outputs(engine):
    """Concurrent greedy requests of different prompt lengths arriving one after another while
    the batch runs: they join through mixed steps, and each one's text is its text alone."""
    prompts = [engine.encode(t) for t in ("Tell me a story about a small robot that learned to paint",
                                          "Hello", "Ray is a unified framework for scaling AI and Python",
                                          "One two three", "The quick brown fox jumps over the lazy dog. One two")]
    # (the engine holds back a last token that ends mid-character; decode() shows it as U+FFFD)
    want = [engine.tokenizer.decode(_greedy_alone(engine.model, ids, 24), skip_special_tokens=True).rstrip("\ufffd")
            for ids in prompts]
    before = dataclasses.replace(engine.stats())

    async def staggered():
        # Each request joins once the one before it is running (two tokens out, 22 to go): a
        # newcomer meets a running batch however fast the steps are (not a fixed stagger).
        started = [asyncio.Event() for _ in range(2 * len(prompts))]

        async def one(i, ids):
            if i:
                await started[i - 1].wait()
            return await _run(engine, f"join{i}", ids, started[i], max_tokens=24, temperature=0, ignore_eos=True)
        return await asyncio.gather(*[one(i, ids) for i, ids in enumerate(prompts * 2)])

    outs = asyncio.run(staggered())
    assert [o["text"] for o in outs] == want * 2
    st = engine.stats()
    assert st.num_mixed > before.num_mixed  # some newcomers did ride in a decode forward
    assert st.prefill_rows - before.prefill_rows == 10
    assert st.decode_rows - before.decode_rows == 10 * 23  # every token after the first
    assert st.mixed_s > before.mixed_s and st.step_s > st.decode_s + st.prefill_s + st.mixed_s - 1e-9


def test_stop_string_cuts_the_output(engine):
    ids = engine.encode("Hello world")
    full = asyncio.run(_run(engine, "f", ids, max_tokens=20, temperature=0))["text"]
    assert len(full) > 4
    stop = full[2:4]
    r = asyncio.run(_run(engine, "st", ids, max_tokens=20, temperature=0, stop=(stop,)))
    assert r["reason"] == "stop" and r["text"] == full[:full.find(stop)]


def test_consumer_leaving_frees_the_slot(engine):
    ids = engine.encode("Hello world")

    async def go():
        gen = engine.generate(GenerationRequest("leave", ids, SamplingParams(max_tokens=10_000 // 20,
                                                                             ignore_eos=True)))
        await gen.__anext__()
        assert engine.stats().running == 1
        await gen.aclose()  # what a client disconnect does through LLMServer
        for _ in range(200):
            if engine.stats().running == 0:
                return True
            await asyncio.sleep(0.01)
        return False

    assert asyncio.run(go())


def test_preemption_keeps_greedy_outputs(model_dir):
    e = TorchEngine("tiny", model_dir, {"max_num_seqs": 8, "block_size": 4, "num_kv_blocks": 12})
    e.start()
    try:
        ids = e.encode("Hello world")

        async def go():
            return await asyncio.gather(*[_run(e, f"p{i}", ids, max_tokens=16, temperature=0, ignore_eos=True)
                                          for i in range(4)])

        outs = asyncio.run(go())
        want = e.tokenizer.decode(_greedy_alone(e.model, ids, 16), skip_special_tokens=True)
        assert e.stats().num_preemptions > 0  # 4 × (5 + 16) tokens do not fit 12 blocks of 4
        assert all(o["text"] == want and o["tokens"] == 16 for o in outs)
        assert e.stats().kv_cache_usage == 0.0
    finally:
        e.shutdown()


def test_bad_engine_kwargs_are_named(model_dir):
    with pytest.raises(ValueError, match="unknown engine_kwargs.*max_batch"):
        TorchEngine("tiny", model_dir, {"max_batch": 3})
