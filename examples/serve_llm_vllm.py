"""The seed article's LLM service in its vLLM form: an OpenAI-compatible app on GPUs.

Where `vllm` is installed and the cluster has GPUs, `build_openai_app` serves each model with
vLLM's engine; `tensor_parallel_size > 1` runs vLLM's workers as Ember actors (one GPU each)
through Ember's distributed executor. Elsewhere (`llm_engine="auto"`) the same app runs Ember's
torch engine, so this script also works on a CPU machine with the local tiny model.

    python examples/serve_llm_vllm.py [MODEL_DIR_OR_NAME] [TP]
    # then, from anywhere that reaches the proxy:
    from openai import OpenAI
    c = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")
    c.chat.completions.create(model="llm", messages=[{"role": "user", "content": "Hello!"}])
"""
from __future__ import annotations

import os
import sys
import tempfile

import ember
from ember import serve
from ember.serve.llm import LLMConfig, build_openai_app


def main() -> None:
    source = sys.argv[1] if len(sys.argv) > 1 else None
    tp = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    if source is None:  # no model can be downloaded here: a locally built one
        from ember.serve.llm.testing import build_tiny_model

        source = build_tiny_model(os.path.join(tempfile.gettempdir(), "ember-examples", "tiny-llama-256"),
                                  hidden_size=256, num_heads=4)
    ember.init()
    config = LLMConfig(
        model_loading_config={"model_id": "llm", "model_source": source},
        llm_engine="auto",                                   # vLLM with GPUs, else the torch engine
        engine_kwargs={"tensor_parallel_size": tp, "max_model_len": 1024} if tp > 1 else {"max_model_len": 1024},
        deployment_config={"autoscaling_config": {"min_replicas": 1, "max_replicas": 2,
                                                  "target_ongoing_requests": 16},
                           "max_ongoing_requests": 64},
    )
    print("engine:", config.resolved_engine())
    serve.run(build_openai_app({"llm_configs": [config]}), host="127.0.0.1", port=8000)
    from openai import OpenAI

    with OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused", max_retries=0) as c:
        r = c.chat.completions.create(model="llm", messages=[{"role": "user", "content": "Hello!"}], max_tokens=16)
        print(r.choices[0].message.content, r.usage)
        for chunk in c.completions.create(model="llm", prompt="Once upon a time", max_tokens=16, stream=True):
            print(chunk.choices[0].text, end="", flush=True)
        print()
    serve.shutdown()
    ember.shutdown()


if __name__ == "__main__":
    main()
