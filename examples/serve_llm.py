"""The seed article's section 4.2 Ray Serve example, on Ember, serving a real causal LM.

2 replicas with one (logical) GPU each, max_ongoing_requests=32. Each replica holds Ember's
continuous-batching torch engine (`ember.serve.llm.LLM`, shaped like vLLM's `LLM`) over a small
Llama built locally (no model can be downloaded here: `build_tiny_model` trains a tokenizer and
saves a randomly initialised model with save_pretrained; the replicas load it from disk as they
would any Hugging Face checkpoint). POST / with JSON; `"stream": true` answers with Server-Sent
Events, one token per event:

    python examples/serve_llm.py [PORT]     # an embedded cluster with 2 logical GPUs (CPU is fine)
    curl -X POST localhost:8000/ -d '{"prompt": "hello", "max_tokens": 16}'
    curl -N -X POST localhost:8000/ -d '{"prompt": "hello", "stream": true}'

On GPUs with vLLM, `from vllm import LLM` in place of `ember.serve.llm.LLM` is the seed's code
as written; examples/serve_llm_vllm.py shows the OpenAI-compatible vLLM form.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import urllib.request

from starlette.responses import StreamingResponse

import ember as ray
from ember import serve
from ember.serve.llm.testing import build_tiny_model

MODEL_DIR = os.path.join(tempfile.gettempdir(), "ember-examples", "tiny-llama")


@serve.deployment(
    num_replicas=2,                       # 2 个副本
    ray_actor_options={"num_gpus": 1},    # 每个副本 1 块 GPU
    max_ongoing_requests=32,              # 最大并发请求数
)
class LLMService:
    def __init__(self, model_dir: str = MODEL_DIR):
        from ember.serve.llm import LLM  # on GPUs with vLLM: from vllm import LLM

        self.model = LLM(model=model_dir, tensor_parallel_size=1)
        self.gpu_ids = ray.get_gpu_ids()

    async def __call__(self, request):
        body = await request.json()
        prompt, max_tokens = body["prompt"], int(body.get("max_tokens", 16))
        if body.get("stream"):
            async def events():
                async for text in self.model.stream(prompt, max_tokens=max_tokens, temperature=0.0):
                    yield f"data: {json.dumps({'text': text})}\n\n"
                yield "data: [DONE]\n\n"
            return StreamingResponse(events(), media_type="text/event-stream")
        outputs = await self.model.generate([prompt], max_tokens=max_tokens, temperature=0.0)
        out = outputs[0].outputs[0]
        return {"text": out.text, "tokens": out.num_tokens, "gpu": self.gpu_ids}


def _post(port: int, body: dict) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status, r.read()


def main(port: int = 8000) -> None:
    build_tiny_model(MODEL_DIR)
    ray.init(num_cpus=2, num_gpus=2)
    app = LLMService.bind(MODEL_DIR)
    serve.run(app, host="127.0.0.1", port=port)
    status, raw = _post(port, {"prompt": "Hello world", "max_tokens": 12})
    body = json.loads(raw)
    print(f"4.2 serve: POST / -> HTTP {status}, {body['tokens']} tokens from the replica on logical GPU "
          f"{body['gpu']}; text (random weights, so noise): {ascii(body['text'][:40])}")
    status2, raw2 = _post(port, {"prompt": "Hello world", "max_tokens": 12, "stream": True})
    events = [e for e in raw2.decode().split("\n\n") if e]
    streamed = "".join(json.loads(e[6:])["text"] for e in events[:-1])
    print(f"4.2 serve: POST / with stream=true -> HTTP {status2}, {len(events) - 1} server-sent events, "
          f"the same text as the whole answer: {streamed == body['text']}")
    app_status = serve.status().applications["default"].status
    print(f"4.2 serve: application 'default' is {app_status}")
    if (status != 200 or body["tokens"] != 12 or len(body["gpu"]) != 1 or status2 != 200
            or events[-1] != "data: [DONE]" or streamed != body["text"] or str(app_status) != "RUNNING"):
        raise SystemExit(f"unexpected answer: {status} {body} {events[-2:]} {app_status}")
    serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
