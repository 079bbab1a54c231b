"""The vLLM engine behind the OpenAI app (GPU machines with vllm installed), including
tensor_parallel_size=2 with vLLM's workers as Ember actors (two or more GPUs)."""
from __future__ import annotations

import importlib.util

import pytest


def _gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vllm is not installed (the vLLM engine needs vllm and a CUDA GPU; the torch "
                              "engine is tested in test_llm_openai.py)"),
    pytest.mark.skipif(_gpus() == 0, reason="no CUDA GPU on this machine (vLLM needs one)"),
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from ember.serve.llm.testing import build_tiny_model

    # head_dim 64: what vLLM's attention kernels expect
    return build_tiny_model(str(tmp_path_factory.mktemp("tiny") / "llama"), hidden_size=256, num_heads=4)


@pytest.fixture(scope="module")
def gpu_cluster():
    import ember
    from ember import serve
    from ember.serve import api as serve_api

    ember.init(num_cpus=4, num_gpus=_gpus())
    serve.start(http_options={"host": "127.0.0.1", "port": 0})
    host, port = serve_api.proxy_address()
    yield f"http://{host}:{port}"
    serve.shutdown()
    ember.shutdown()


def _run(model_dir, url, tp):
    import openai

    from ember import serve
    from ember.serve.llm import LLMConfig, build_openai_app

    cfg = LLMConfig(model_loading_config={"model_id": "tiny", "model_source": model_dir}, llm_engine="vLLM",
                    engine_kwargs={"tensor_parallel_size": tp, "max_model_len": 512, "gpu_memory_utilization": 0.3,
                                   "enforce_eager": True})
    serve.run(build_openai_app({"llm_configs": [cfg]}), name=f"vllm{tp}", route_prefix="/")
    try:
        with openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=120) as c:
            r = c.completions.create(model="tiny", prompt="Hello world", max_tokens=8, temperature=0)
            assert r.usage.completion_tokens == 8
            chunks = list(c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                                    max_tokens=8, temperature=0, stream=True))
            assert chunks[-1].choices[0].finish_reason == "length"
            with pytest.raises(openai.BadRequestError):
                c.completions.create(model="tiny", prompt="x " * 2000)
    finally:
        serve.delete(f"vllm{tp}")


def test_vllm_engine_one_gpu(model_dir, gpu_cluster):
    _run(model_dir, gpu_cluster, 1)


@pytest.mark.skipif(_gpus() < 2, reason="tensor_parallel_size=2 needs two GPUs")
def test_vllm_tensor_parallel_workers_are_ember_actors(model_dir, gpu_cluster):
    _run(model_dir, gpu_cluster, 2)
