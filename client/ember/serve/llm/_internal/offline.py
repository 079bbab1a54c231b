"""`LLM`: an engine in your own deployment, shaped like vLLM's `LLM` (the seed article's 4.2).

    llm = LLM(model="/models/tiny", tensor_parallel_size=1)
    outputs = await llm.generate(["Hello"], max_tokens=32)     # vLLM: llm.generate([...])
    print(outputs[0].outputs[0].text)
    async for text in llm.stream("Hello", max_tokens=32): ...

Ember's continuous-batching torch engine underneath, so concurrent `generate` calls from one
replica share decode steps. `generate` is a coroutine (vLLM's offline `LLM.generate` blocks the
event loop, which in an async deployment would serialize requests).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from .engine import GenerationRequest
from .params import SamplingParams
from .torch_engine import TorchEngine

_ids = itertools.count()


@dataclass
class CompletionOutput:
    index: int
    text: str
    finish_reason: str | None
    num_tokens: int


@dataclass
class RequestOutput:
    request_id: str
    prompt: str
    outputs: list[CompletionOutput] = field(default_factory=list)
    prompt_token_ids: list[int] = field(default_factory=list)


class LLM:
    def __init__(self, model: str, tensor_parallel_size: int = 1, **engine_kwargs: Any) -> None:
        if tensor_parallel_size != 1:
            raise ValueError("the torch engine runs on one device; tensor_parallel_size > 1 needs vLLM "
                             "(build_openai_app with llm_engine='vLLM')")
        self.engine = TorchEngine(model, model, engine_kwargs)
        self.engine.start()

    async def generate(self, prompts: list[str] | str, sampling_params: SamplingParams | None = None,
                       **params: Any) -> list[RequestOutput]:
        """One RequestOutput per prompt (keyword arguments are SamplingParams fields)."""
        import asyncio

        sp = sampling_params or SamplingParams(**params)
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        return list(await asyncio.gather(*[self._one(p, sp) for p in prompts]))

    def get_tokenizer(self) -> Any:
        """The model's Hugging Face tokenizer (vLLM's `LLM.get_tokenizer`)."""
        return self.engine.tokenizer

    async def _one(self, prompt: str, sp: SamplingParams) -> RequestOutput:
        rid = f"llm-{next(_ids)}"
        outs = {i: CompletionOutput(i, "", None, 0) for i in range(sp.n)}
        ids = self.engine.encode(prompt)
        async for deltas in self.engine.generate(GenerationRequest(rid, ids, sp)):
            for d in deltas:
                o = outs[d.index]
                o.text += d.text
                o.num_tokens = d.num_output_tokens
                o.finish_reason = d.finish_reason or o.finish_reason
        return RequestOutput(rid, prompt, [outs[i] for i in range(sp.n)], prompt_token_ids=ids)

    async def stream(self, prompt: str, sampling_params: SamplingParams | None = None,
                     **params: Any) -> AsyncIterator[str]:
        """The text of the first output as it is generated."""
        sp = sampling_params or SamplingParams(**params)
        rid = f"llm-{next(_ids)}"
        async for deltas in self.engine.generate(GenerationRequest(rid, self.engine.encode(prompt), sp)):
            text = "".join(d.text for d in deltas if d.index == 0)
            if text:
                yield text

    def shutdown(self) -> None:
        self.engine.shutdown()
