"""One streamed OpenAI request fed straight from the engine's per-step hand-off.

The pull path (engine.generate → LLMServer's async generator → the HTTP layer's generators →
Serve's stream pump) costs, per token and stream, a task wake-up on the replica's loop and one
await through each generator layer: with 16 streams that is 16 task steps per engine step, all
on the thread that competes with the engine thread for the GIL. A SSEStream instead registers
one callback with the engine (`TorchEngine.submit`): the engine's one `call_soon_threadsafe` per
step runs every stream's callback in turn, each formats its chunk (ChunkWriter: the constant
part of the JSON is built once) and hands it to its consumer:

    engine thread ── one hand-off per step ──► _deliver ─► SSEStream._on(delta) per stream
                                                            └► put(chunk)  (Serve's StreamPump)
                                                        ─► the pump's listener marks the stream
    the stream channel's pusher wakes once per step and sends every stream's chunks in one write

Consumers: Serve's StreamPump attaches with `_ember_attach(put, end)` (the push protocol of
serve/_private/streams.py) and stops it with `_ember_detach()` (the client went away: the engine
aborts the sequence); anything else iterates it as an async iterator (each item: every chunk
produced since the previous one, joined). Items are `str`, or `bytes` when `as_bytes` is set
(an HTTP body). The bytes are those of LLMServer's generator path: the same chunks, usage chunk,
error event and `data: [DONE]`.
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Callable

from . import openai_api as oa
from .engine import GenerationDelta, GenerationRequest

log = logging.getLogger(__name__)


class SSEStream:
    """A streamed completion or chat request on an engine that has `submit` (TorchEngine)."""

    def __init__(self, engine: Any, request: GenerationRequest, writer: oa.ChunkWriter, metrics: Any,
                 with_usage: bool, *, as_bytes: bool = False) -> None:
        self.as_bytes = as_bytes
        self._engine = engine
        self._request = request
        self._writer = writer
        self._metrics = metrics
        self._with_usage = with_usage
        n = request.params.n
        self._counts = [0] * n
        self._reasons: list[str | None] = [None] * n
        self._left = n
        self._track: Any = None
        self._span: Any = None
        self._put: Callable[[Any], None] | None = None
        self._end: Callable[[BaseException | None], None] | None = None
        self._started = False
        self._finished = False
        # the async-iterator side (when no pump attached)
        self._buf: list[Any] = []
        self._waiter: asyncio.Future[None] | None = None

    # ---------------------------------------------------------------- the push protocol
    def _ember_attach(self, put: Callable[[Any], None], end: Callable[[BaseException | None], None]) -> None:
        """Starts the request; put(item) per chunk (on the loop), end(None) after the last."""
        self._put, self._end = put, end
        self._start()

    def _ember_detach(self) -> None:
        """The consumer went away: abort the request (no more calls to put or end)."""
        if not self._finished:
            self._engine.cancel(self._request.request_id)
            self._finish("aborted", notify=False)

    # ---------------------------------------------------------------- async iterator side
    def __aiter__(self) -> SSEStream:
        return self

    async def __anext__(self) -> Any:
        if not self._started:
            self._put, self._end = self._buffer, self._wake
            self._start()
        while not self._buf:
            if self._finished:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        items, self._buf = self._buf, []
        return items[0] if len(items) == 1 else (b"" if self.as_bytes else "").join(items)

    async def aclose(self) -> None:
        self._ember_detach()

    def _buffer(self, item: Any) -> None:
        self._buf.append(item)
        self._wake()

    def _wake(self, _: BaseException | None = None) -> None:
        f, self._waiter = self._waiter, None
        if f is not None and not f.done():
            f.set_result(None)

    # ---------------------------------------------------------------- engine side
    def _start(self) -> None:
        self._started = True
        req = self._request
        self._track = self._metrics.start(len(req.prompt_token_ids))
        self._span = self._metrics.span(req.request_id)
        try:
            self._engine.submit(req, self._on)
        except ValueError as e:  # the engine refused it (e.g. a duplicate id)
            self._fail(400, str(e))
        except Exception as e:  # the engine failed earlier
            self._fail(500, f"{type(e).__name__}: {e}")

    def _on(self, item: GenerationDelta | BaseException) -> None:
        """One delta (or the request's failure), on the loop, inside the engine's hand-off."""
        if self._finished:
            return
        if isinstance(item, BaseException):
            if isinstance(item, ValueError):  # refused (e.g. it can never fit the cache)
                self._fail(400, str(item))
            else:
                log.error("request %s failed: %r", self._request.request_id, item)
                self._fail(500, f"{type(item).__name__}: {item}")
            return
        i = item.index
        new = item.num_output_tokens - self._counts[i]
        self._counts[i] = item.num_output_tokens
        chunk = self._writer.delta(i, item.text, item.finish_reason)
        self._track.tokens(new)
        if item.finish_reason is not None:
            self._reasons[i] = item.finish_reason
            self._left -= 1
            if self._left <= 0:
                use = oa.usage(len(self._request.prompt_token_ids), sum(self._counts))
                chunk += (self._writer.usage(use) if self._with_usage else "") + oa.DONE
                self._emit(chunk)
                self._finish("ok")
                return
        self._emit(chunk)

    def _emit(self, chunk: str) -> None:
        assert self._put is not None
        self._put(chunk.encode() if self.as_bytes else chunk)

    def _fail(self, status: int, message: str) -> None:
        self._emit("data: " + json.dumps(oa.error_body(status, message)) + "\n\n" + oa.DONE)
        self._finish("error")

    def _finish(self, outcome: str, *, notify: bool = True) -> None:
        if self._finished:
            return
        self._finished = True
        if self._track is not None:
            self._track.finish(outcome)
            self._metrics.end_span(self._span, len(self._request.prompt_token_ids), sum(self._counts),
                                   self._reasons, outcome)
        if notify and self._end is not None:
            self._end(None)
