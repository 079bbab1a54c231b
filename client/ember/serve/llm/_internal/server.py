"""LLMServer: the deployment that holds one model's engine (one per replica).

`chat(body)` and `completions(body)` take an OpenAI request body (a dict, or an object with
`model_dump()`) and return async iterators: with `"stream": true` they yield Server-Sent Event
strings (several events in one string when the engine produced several tokens since the
consumer's last read, so nothing queues behind a slow reader), else one response dict; a bad
request yields one error dict in OpenAI's shape (`{"error": {..., "code": 400}}`) and the
replica keeps serving. A streamed request on the torch engine is an SSEStream (sse_stream.py):
the engine's per-step hand-off formats and pushes its chunks, and Serve's stream pump attaches
to it, so a token costs no task wake-up or generator layer on the replica's loop.
Called through a DeploymentHandle with `stream=True` (the OpenAI ingress does that) or served
over HTTP on its own (`__call__`, used by build_llm_deployment's app).

Per request: a span `llm.request` (model, prompt and completion token counts, finish reason;
never text) when tracing is on, and the LLM metrics (metrics.py).
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any, AsyncIterator

from ..._private.core_loop import never_blocks
from . import openai_api as oa
from .config import LLMConfig, as_llm_config
from .engine import GenerationRequest, LLMEngine
from .metrics import LLMMetrics
from .params import SamplingParams
from .sse_stream import SSEStream

log = logging.getLogger(__name__)


def make_engine(config: LLMConfig) -> LLMEngine:
    kind = config.resolved_engine()
    if kind == "vLLM":
        from .vllm_engine import VLLMEngine

        return VLLMEngine(config)
    if config.engine_kwargs.get("engine_process", True):
        from .core_client import EngineCoreClient

        return EngineCoreClient(config.model_id, config.model_source, config.engine_kwargs)
    from .torch_engine import TorchEngine

    return TorchEngine(config.model_id, config.model_source, config.engine_kwargs)


def _never_blocks(server: LLMServer) -> bool:
    """Its replica may run on the worker's core loop (serve/_private/core_loop.py): only over
    Ember's engine-core client, whose loop side never blocks (the step loop is in another
    process); not with an engine class of the user's, nor vLLM's, nor the in-thread engine."""
    from .core_client import EngineCoreClient

    return not server._user_engine and type(server.engine) is EngineCoreClient


@never_blocks(when=_never_blocks)
class LLMServer:
    """One model's engine behind Serve."""

    def __init__(self, llm_config: LLMConfig | dict[str, Any], *, engine_cls: type | None = None) -> None:
        self._config = as_llm_config(llm_config)
        self._user_engine = engine_cls is not None
        self.engine: LLMEngine = engine_cls(self._config) if engine_cls is not None else make_engine(self._config)
        self.engine.start()
        self._created = int(time.time())
        self.metrics = LLMMetrics(self._config.model_id, self.engine, self._config.log_engine_metrics)

    @classmethod
    def get_deployment_options(cls, llm_config: LLMConfig | dict[str, Any]) -> dict[str, Any]:
        """The @serve.deployment options for this model (Ray's name)."""
        return as_llm_config(llm_config).get_serve_options()

    async def llm_config(self) -> LLMConfig:
        return self._config

    async def model_card(self) -> dict[str, Any]:
        return oa.model_card(self._config.model_id, self._created)

    async def metrics_address(self) -> str:
        """HOST:PORT of this replica's Prometheus endpoint ("" when off)."""
        return self.metrics.address

    async def check_health(self) -> None:
        await self.engine.check_health()

    async def engine_stats(self) -> dict[str, Any]:
        """The engine's running/waiting/KV-cache figures (for tests and dashboards)."""
        st = self.engine.stats()
        return {**vars(st), "core_pid": getattr(self.engine, "core_pid", None)}

    def __del__(self) -> None:
        try:
            self.engine.shutdown()
        except Exception:  # noqa: BLE001 - interpreter exit
            pass

    # -------------------------------------------------------------- OpenAI calls
    def chat(self, request: Any) -> AsyncIterator[Any]:
        return self._open(request, chat=True)

    def completions(self, request: Any) -> AsyncIterator[Any]:
        return self._open(request, chat=False)

    async def __call__(self, request: Any) -> Any:
        """Serves the OpenAI routes over HTTP when this deployment is the app's ingress."""
        from .ingress import serve_openai_http

        return await serve_openai_http(request, {self._config.model_id: self})

    def _open(self, request: Any, chat: bool) -> AsyncIterator[Any]:
        """The request's output: a streamed request on an engine with `submit` (TorchEngine) is
        an SSEStream (pushed from the engine's per-step hand-off, sse_stream.py); anything else
        (a bad request, a whole response, another engine) is the generator below."""
        body = request.model_dump(exclude_none=True) if hasattr(request, "model_dump") else request
        try:
            rid, prompt_ids, params, stream, with_usage = self._prepare(body, chat)
        except oa.OpenAIError as e:
            return _one(e.body())
        except ValueError as e:  # a sampling parameter's InvalidParameter names it
            return _one(oa.error_body(400, str(e), getattr(e, "param", None)))
        if stream and hasattr(self.engine, "submit"):
            return SSEStream(self.engine, GenerationRequest(rid, prompt_ids, params),
                             oa.ChunkWriter(rid, self._config.model_id, chat), self.metrics, with_usage)
        return self._run(rid, prompt_ids, params, stream, with_usage, chat)

    def _prepare(self, body: Any, chat: bool) -> tuple[str, list[int], SamplingParams, bool, bool]:
        if not isinstance(body, dict):
            raise oa.OpenAIError(400, f"the request must be a JSON object, got {type(body).__name__}")
        if chat:
            prompt = self.engine.apply_chat_template(oa.check_chat(body))
        else:
            prompt = oa.check_completion(body)
        ids = self.engine.encode(prompt)
        limit = self.engine.max_model_len
        if len(ids) >= limit:
            raise oa.OpenAIError(400, f"This model's maximum context length is {limit} tokens; the prompt "
                                      f"has {len(ids)} tokens", "messages" if chat else "prompt")
        room = limit - len(ids)
        params = SamplingParams.from_openai(body, default_max_tokens=room if chat else min(16, room))
        if params.max_tokens > room:
            params = SamplingParams(**{**params.__dict__, "max_tokens": room})
        return (oa.new_id("chatcmpl" if chat else "cmpl"), ids, params, bool(body.get("stream", False)),
                oa.include_usage(body))

    async def _run(self, rid: str, prompt_ids: list[int], params: SamplingParams, stream: bool,
                   with_usage: bool, chat: bool) -> AsyncIterator[Any]:
        model = self._config.model_id
        track = self.metrics.start(len(prompt_ids))
        span = self.metrics.span(rid)
        texts = [""] * params.n
        reasons: list[str | None] = [None] * params.n
        counts = [0] * params.n
        writer = oa.ChunkWriter(rid, model, chat) if stream else None
        gen = self.engine.generate(GenerationRequest(rid, prompt_ids, params))
        outcome = "aborted"
        try:
            async for deltas in gen:
                new = 0
                parts = []
                for d in deltas:
                    new += d.num_output_tokens - counts[d.index]
                    counts[d.index] = d.num_output_tokens
                    if d.finish_reason is not None:
                        reasons[d.index] = d.finish_reason
                    if writer is not None:
                        parts.append(writer.delta(d.index, d.text, d.finish_reason))
                    else:
                        texts[d.index] += d.text
                track.tokens(new)
                if parts:
                    yield "".join(parts)
            outcome = "ok"
            use = oa.usage(len(prompt_ids), sum(counts))
            if writer is not None:
                yield (writer.usage(use) if with_usage else "") + oa.DONE
            else:
                yield oa.completion(rid, model, int(time.time()), texts, reasons, use, chat)
        except ValueError as e:  # the engine refused the request (e.g. it can never fit the cache)
            outcome = "error"
            body = oa.error_body(400, str(e))
            yield ("data: " + _json(body) + "\n\n" + oa.DONE) if writer is not None else body
        except asyncio.CancelledError:
            raise
        except Exception as e:
            outcome = "error"
            log.exception("request %s failed", rid)
            body = oa.error_body(500, f"{type(e).__name__}: {e}")
            yield ("data: " + _json(body) + "\n\n" + oa.DONE) if writer is not None else body
        finally:
            await _aclose(gen)
            track.finish(outcome)
            self.metrics.end_span(span, len(prompt_ids), sum(counts), reasons, outcome)


async def _one(item: Any) -> AsyncIterator[Any]:
    yield item


def _json(obj: Any) -> str:
    import json

    return json.dumps(obj)


async def _aclose(gen: Any) -> None:
    try:
        await gen.aclose()
    except Exception as e:  # noqa: BLE001
        log.debug("closing a generation: %r", e)


def new_request_id() -> str:
    return uuid.uuid4().hex
