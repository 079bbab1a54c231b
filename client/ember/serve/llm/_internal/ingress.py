"""The OpenAI-compatible HTTP surface: OpenAiIngress routes requests to LLMServer deployments.

    GET  /v1/models                  the served models
    GET  /v1/models/{model_id}
    POST /v1/completions             {"model", "prompt", ...sampling, "stream"}
    POST /v1/chat/completions        {"model", "messages", ...sampling, "stream"}

The ingress parses the body (malformed JSON: 400), finds the model (unknown: 404) and streams the
LLMServer's output through a DeploymentHandle (`stream=True`): the first item decides the reply
(an error dict becomes a JSON error with its status; SSE strings become a `text/event-stream`
StreamingResponse; a response dict becomes JSON). When the HTTP client goes away the proxy
cancels this request, which closes the handle stream, which aborts the sequence in the engine
and frees its batch slot. `serve_openai_http` is the same routing over local LLMServer objects,
used when an LLMServer deployment is itself the ingress (build_llm_deployment).
"""
from __future__ import annotations

import json
from typing import Any, AsyncGenerator, AsyncIterator

from starlette.responses import Response, StreamingResponse

from . import openai_api as oa

_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_ROUTES = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}


def _json(status: int, obj: Any) -> Response:
    return Response(json.dumps(obj), status_code=status, media_type="application/json")


def _error(e: oa.OpenAIError) -> Response:
    return _json(e.status, e.body())


class _Relayed:
    """The SSE body of a request streamed from an LLMServer deployment: its first chunk (already
    taken), then the rest of the handle stream. For Serve's stream pump it is a push source
    (`_ember_attach`, serve/_private/streams.py): the handle stream's batches go straight into
    the pump, with no generator layer or task step per chunk in this replica; anything else
    iterates it."""

    def __init__(self, first: Any, gen: Any) -> None:
        self._first = first
        self._gen = gen

    def _ember_attach(self, put: Any, end: Any) -> None:
        put(self._first)  # (the pump turns the items into bytes)
        self._gen._ember_attach(put, end)

    def _ember_detach(self) -> None:
        self._gen.cancel()

    async def __aiter__(self) -> AsyncIterator[Any]:
        try:
            yield self._first
            async for x in self._gen:
                yield x
        finally:
            self._gen.cancel()


async def _relay(gen: Any) -> AsyncGenerator[Any, None]:
    """The items of a local LLMServer's generator."""
    try:
        async for x in gen:
            yield x
    finally:
        await gen.aclose()


async def serve_openai_http(request: Any, servers: dict[str, Any], cards: list[dict[str, Any]] | None = None) -> Response:
    """Answers one HTTP request of the OpenAI API. servers: model_id → LLMServer or handle."""
    from ember.serve.handle import DeploymentHandle

    path = request.scope["path"]
    root = request.scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root):] or "/"
    path = path.rstrip("/") or "/"
    method = request.method
    try:
        if path == "/v1/models" or path.startswith("/v1/models/"):
            if method != "GET":
                raise oa.OpenAIError(405, f"{method} is not allowed on {path}; use GET")
            cards = cards if cards is not None else [await s.model_card() for s in servers.values()]
            if path == "/v1/models":
                return _json(200, oa.models_list(cards))
            mid = path[len("/v1/models/"):]
            for c in cards:
                if c["id"] == mid:
                    return _json(200, c)
            raise oa.OpenAIError(404, f"The model `{mid}` does not exist.", "model")
        kind = _ROUTES.get(path)
        if kind is None:
            raise oa.OpenAIError(404, f"no route {path}; this server answers /v1/models, /v1/completions "
                                      "and /v1/chat/completions")
        if method != "POST":
            raise oa.OpenAIError(405, f"{method} is not allowed on {path}; use POST")
        body = oa.parse_json(await request.body())
        model = body.get("model")
        if not isinstance(model, str):
            raise oa.OpenAIError(400, "model must be a string naming a served model", "model")
        target = servers.get(model)
        if target is None:
            raise oa.OpenAIError(404, f"The model `{model}` does not exist. Served: {sorted(servers)}", "model")
    except oa.OpenAIError as e:
        return _error(e)
    if isinstance(target, DeploymentHandle):
        return await _over_handle(target, kind, body)
    out = getattr(target, kind)(body)
    if hasattr(out, "_ember_attach"):  # an SSEStream: its chunks are the body, as they come
        out.as_bytes = True
        return StreamingResponse(out, media_type="text/event-stream", headers=_SSE_HEADERS)
    it = _relay(out)
    try:
        first = await it.__anext__()
    except StopAsyncIteration:
        return _json(500, oa.error_body(500, "the model server returned nothing"))
    except BaseException:
        await it.aclose()
        raise
    if oa.is_error(first):
        await it.aclose()
        return _json(int(first["error"].get("code") or 500), first)
    if isinstance(first, dict):
        await it.aclose()
        return _json(200, first)

    async def sse() -> AsyncIterator[str]:
        try:
            yield first
            async for x in it:
                yield x
        finally:
            await it.aclose()

    return StreamingResponse(sse(), media_type="text/event-stream", headers=_SSE_HEADERS)


async def _over_handle(target: Any, kind: str, body: dict[str, Any]) -> Response:
    """The reply to a request served by an LLMServer deployment, streamed through its handle:
    the first item decides it (see the module docstring); a stream's rest is relayed as it
    comes (_Relayed)."""
    gen = getattr(target.options(stream=True), kind).remote(body)
    try:
        first = await gen.__anext__()
    except StopAsyncIteration:
        return _json(500, oa.error_body(500, "the model server returned nothing"))
    except BaseException:
        gen.cancel()
        raise
    if isinstance(first, dict):
        gen.cancel()
        return _json(int(first["error"].get("code") or 500) if oa.is_error(first) else 200, first)
    return StreamingResponse(_Relayed(first, gen), media_type="text/event-stream", headers=_SSE_HEADERS)


class OpenAiIngress:
    """The app's ingress deployment: holds a handle per model's LLMServer deployment."""

    def __init__(self, llm_deployments: list[Any]) -> None:
        self._handles = list(llm_deployments)
        self._servers: dict[str, Any] | None = None
        self._cards: list[dict[str, Any]] = []

    async def _routes(self) -> dict[str, Any]:
        if self._servers is None:
            servers, cards = {}, []
            for h in self._handles:
                card = await h.model_card.remote()
                servers[card["id"]] = h
                cards.append(card)
            self._servers, self._cards = servers, cards
        return self._servers

    async def models(self) -> dict[str, Any]:
        await self._routes()
        return oa.models_list(self._cards)

    async def __call__(self, request: Any) -> Response:
        servers = await self._routes()
        return await serve_openai_http(request, servers, self._cards)
