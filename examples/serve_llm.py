"""The seed article's section 4.2 Ray Serve example, on Ember, with a tiny stand-in for vLLM.

2 replicas with one (logical) GPU each, max_ongoing_requests=32, POST / with JSON:

    python examples/serve_llm.py            # starts an embedded cluster with 2 logical GPUs
    curl -X POST localhost:8000/ -d '{"prompt": "hello"}'
"""
from __future__ import annotations

import json
import sys
import urllib.request

import ember as ray
from ember import serve


class TinyLLM:
    """Stands in for vllm.LLM: 'generates' by reversing the prompt's words."""

    def __init__(self, model: str, tensor_parallel_size: int = 1) -> None:
        self.model = model

    def generate(self, prompts: list[str]) -> list:
        class Out:
            def __init__(self, text: str) -> None:
                self.text = text

        class Res:
            def __init__(self, text: str) -> None:
                self.outputs = [Out(text)]

        return [Res(" ".join(reversed(p.split()))) for p in prompts]


@serve.deployment(
    num_replicas=2,                       # 2 个副本
    ray_actor_options={"num_gpus": 1},    # 每个副本 1 块 GPU
    max_ongoing_requests=32,              # 最大并发请求数
)
class LLMService:
    def __init__(self):
        self.model = TinyLLM(model="meta-llama/Llama-3-8B-Instruct", tensor_parallel_size=1)
        self.gpu_ids = ray.get_gpu_ids()

    async def __call__(self, request):
        prompt = (await request.json())["prompt"]
        outputs = self.model.generate([prompt])
        return {"text": outputs[0].outputs[0].text, "gpu": self.gpu_ids}


def main(port: int = 8000) -> None:
    ray.init(num_cpus=2, num_gpus=2)
    app = LLMService.bind()
    serve.run(app, host="127.0.0.1", port=port)
    req = urllib.request.Request(f"http://127.0.0.1:{port}/", data=json.dumps({"prompt": "world hello"}).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        status, body = r.status, json.loads(r.read())
    print(status, body)
    app_status = serve.status().applications["default"].status
    print(app_status)
    if status != 200 or body["text"] != "hello world" or str(app_status) != "RUNNING":
        raise SystemExit(f"unexpected answer: {status} {body} {app_status}")
    serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
