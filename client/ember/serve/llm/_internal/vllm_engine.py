"""The vLLM engine behind LLMServer: vLLM's AsyncLLM, where `vllm` imports and GPUs exist.

`engine_kwargs` go to vLLM's AsyncEngineArgs (tensor_parallel_size, max_model_len,
gpu_memory_utilization, dtype, ...). With tensor_parallel_size > 1 the engine's workers run as
Ember actors through EmberDistributedExecutor (vllm_executor.py), one GPU each. Requests stream
with RequestOutputKind.DELTA, so each RequestOutput carries only the new text; `abort` is vLLM's
own. Prompts are tokenized (and chat templates applied) with the model's Hugging Face tokenizer,
as for the torch engine, so both engines see the same token ids.
"""
from __future__ import annotations

import os
from typing import Any, AsyncIterator

from .config import LLMConfig
from .engine import EngineStats, GenerationDelta, GenerationRequest, LLMEngine
from .frontend import TokenizerSide


class VLLMEngine(TokenizerSide, LLMEngine):
    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self.model_id = config.model_id
        self._stats = EngineStats()
        self._engine: Any = None

    def start(self) -> None:
        from transformers import AutoTokenizer
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        import ember

        kw = dict(self.config.engine_kwargs)
        if ember.is_initialized():  # vLLM's engine core subprocess joins the same cluster
            os.environ.setdefault("EMBER_ADDRESS", ember.get_runtime_context().gcs_address)
        if int(kw.get("tensor_parallel_size", 1)) > 1 and "distributed_executor_backend" not in kw:
            from .vllm_executor import EmberDistributedExecutor

            kw["distributed_executor_backend"] = EmberDistributedExecutor
        args = AsyncEngineArgs(model=self.config.model_source, served_model_name=[self.model_id], **kw)
        self._engine = AsyncLLM.from_engine_args(args)
        self.tokenizer = AutoTokenizer.from_pretrained(self.config.model_source,
                                                       trust_remote_code=bool(kw.get("trust_remote_code")))
        self._max_len = int(self._engine.model_config.max_model_len)

    async def generate(self, request: GenerationRequest) -> AsyncIterator[list[GenerationDelta]]:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        p = request.params
        sp = SamplingParams(n=p.n, max_tokens=p.max_tokens, temperature=p.temperature, top_p=p.top_p,
                            top_k=p.top_k if p.top_k > 0 else -1, stop=list(p.stop) or None,
                            stop_token_ids=list(p.stop_token_ids) or None, seed=p.seed, ignore_eos=p.ignore_eos,
                            output_kind=RequestOutputKind.DELTA)
        counts = [0] * p.n
        self._stats.running += 1
        done = False
        try:
            async for out in self._engine.generate({"prompt_token_ids": request.prompt_token_ids}, sp,
                                                   request.request_id):
                deltas = []
                for o in out.outputs:
                    counts[o.index] += len(o.token_ids)
                    deltas.append(GenerationDelta(o.index, o.text, counts[o.index], o.finish_reason,
                                                  len(request.prompt_token_ids)))
                self._stats.generated_tokens += sum(len(o.token_ids) for o in out.outputs)
                yield deltas
            done = True
        finally:
            self._stats.running -= 1
            if not done:
                await self._engine.abort(request.request_id)

    async def abort(self, request_id: str) -> None:
        await self._engine.abort(request_id)

    def stats(self) -> EngineStats:
        return self._stats

    async def check_health(self) -> None:
        await self._engine.check_health()

    def shutdown(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None
