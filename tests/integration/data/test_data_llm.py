"""`ember.data.llm` as Ray's `ray.data.llm`: a processor over a Dataset on an embedded cluster with
the tiny local model — chat rows through the tokenizer's template, per-row sampling params, the
input columns carried over, greedy answers equal to the engine's own, the older
`build_llm_processor` name, errors naming the problem and `should_continue_on_error`."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("torch", reason="the llm extra (torch, transformers) is not installed")

import ember  # noqa: E402
from ember.data.llm import (  # noqa: E402
    build_llm_processor,
    build_processor,
    vLLMEngineProcessorConfig,
)
from ember.serve.llm.testing import build_tiny_model  # noqa: E402

QUESTIONS = [f"question number {i}" for i in range(12)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(str(tmp_path_factory.mktemp("tiny") / "llama"))


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=2)
    yield
    ember.shutdown()


def _config(model_dir, **kw):
    kw.setdefault("engine_kwargs", {"max_num_seqs": 16})
    return vLLMEngineProcessorConfig(model_source=model_dir, batch_size=6, concurrency=1, **kw)


def _chat(row):
    return {"messages": [{"role": "user", "content": row["q"]}], "id": row["id"],
            "sampling_params": {"max_tokens": 6, "temperature": 0.0, "ignore_eos": True}}


def test_processor_answers_every_row_as_the_engine_does(cluster, model_dir):
    processor = build_processor(_config(model_dir), preprocess=_chat,
                                postprocess=lambda row: {"answer": row["generated_text"], **row})
    ds = ember.data.from_items([{"q": q, "id": i} for i, q in enumerate(QUESTIONS)])
    rows = sorted(processor(ds).take_all(), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == list(range(len(QUESTIONS)))
    for r in rows:
        assert r["answer"] == r["generated_text"] and r["num_generated_tokens"] == 6
        assert r["num_input_tokens"] > 0 and r["time_taken_llm"] > 0 and "question number" in r["prompt"]
        assert r["messages"][0]["content"] == QUESTIONS[r["id"]]  # carried over

    from ember.serve.llm import LLM, SamplingParams  # the reference: the same engine, directly

    llm = LLM(model=model_dir, max_num_seqs=16)
    try:
        outs = asyncio.run(llm.generate([r["prompt"] for r in rows],
                                        SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)))
    finally:
        llm.shutdown()
    assert [o.outputs[0].text for o in outs] == [r["generated_text"] for r in rows]


def test_prompt_rows_and_the_older_builder_name(cluster, model_dir):
    config = _config(model_dir, chat_template_stage=False)
    processor = build_llm_processor(config, preprocess=lambda row: {
        "prompt": row["q"], "sampling_params": {"max_tokens": 3, "temperature": 0.0, "ignore_eos": True}})
    rows = processor(ember.data.from_items([{"q": q} for q in QUESTIONS[:4]])).take_all()
    assert sorted(r["prompt"] for r in rows) == sorted(QUESTIONS[:4])
    assert all(r["num_generated_tokens"] == 3 for r in rows)


def test_bad_rows_fail_naming_the_problem_or_are_kept_with_their_error(cluster, model_dir):
    bad = ember.data.from_items([{"q": "fine"}, {"q": ""}])
    pre = lambda row: {"prompt": row["q"] or None,  # noqa: E731
                       "sampling_params": {"max_tokens": 2, "temperature": 0.0}}
    with pytest.raises(Exception, match="a row needs a string `prompt`"):
        build_processor(_config(model_dir, chat_template_stage=False), preprocess=pre)(bad).take_all()
    kept = build_processor(_config(model_dir, chat_template_stage=False, should_continue_on_error=True),
                           preprocess=pre)(bad).take_all()
    errors = sorted((r["__inference_error__"] or "") for r in kept)
    assert errors[0] == "" and "a row needs a string `prompt`" in errors[1], errors
    with pytest.raises(Exception, match="sampling_params: .*bogus"):
        build_processor(_config(model_dir, chat_template_stage=False), preprocess=lambda row: {
            "prompt": "x", "sampling_params": {"bogus": 1}})(ember.data.from_items([{"q": 1}])).take_all()


@pytest.mark.parametrize("kwargs, match", [
    ({"task_type": "embed"}, "task_type='embed' is not supported"),
    ({"dynamic_lora_loading_path": "/loras"}, "LoRA adapters are not implemented"),
    ({"has_image": True}, "multimodal"),
    ({"chat_template_stage": {"batch_size": 4}}, "per-stage configs are not implemented"),
    ({"batch_size": 0}, "batch_size must be a positive int"),
    ({"no_such_option": 1}, "unexpected parameter.*no_such_option"),
])
def test_unimplemented_or_bad_config_is_refused_by_name(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        vLLMEngineProcessorConfig(model_source="/models/x", **kwargs)
    with pytest.raises(ValueError, match="builder_kwargs"):
        build_processor(vLLMEngineProcessorConfig(model_source="/m"), builder_kwargs={"x": 1})
