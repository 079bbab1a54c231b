"""The event-loop side of Ember's torch engine, shared by its two forms.

    TorchEngine      (torch_engine.py)  the step loop in a thread of the replica's process
    EngineCoreClient (core_client.py)   the step loop in an engine-core child process

Both take requests and hand out their output on the replica's event loop the same way:
`generate(request)` (an async iterator of delta lists), `submit(request, callback)` (the push
form: the callback runs inside the step's one hand-off, no task woken per token), `cancel` /
`abort`, and the tokenizer side (`encode`, `apply_chat_template`, `max_model_len`). What
differs is how a request reaches the step loop (`_post_add`, `_post_abort`) and how its
outputs come back: each form calls `_deliver(batch)` on the loop with a step's
`(request_id, GenerationDelta | exception)` pairs.
"""
from __future__ import annotations

import abc
import asyncio
import logging
from typing import Any, AsyncIterator, Callable

from .engine import GenerationDelta, GenerationRequest

log = logging.getLogger(__name__)


class _Output:
    """One request's deltas waiting for its consumer (event-loop side), or the consumer's
    callback (submit: called with each delta as the step's hand-off runs, no task woken)."""

    __slots__ = ("deltas", "waiter", "left", "callback")

    def __init__(self, n: int, callback: Callable[[Any], None] | None = None) -> None:
        self.deltas: list[GenerationDelta] = []
        self.waiter: asyncio.Future[None] | None = None
        self.left = n
        self.callback = callback


class TokenizerSide:
    """What every engine form answers from its tokenizer on the replica (no engine round trip):
    the context length, prompt encoding and the chat template."""

    tokenizer: Any
    _max_len: int

    @property
    def max_model_len(self) -> int:
        return self._max_len

    def encode(self, text: str) -> list[int]:
        fast = self.__dict__.get("_encode_fast")
        if fast is None:
            fast = self._encode_fast = fast_encoder(self.tokenizer)
        if fast is not False:
            return fast(text)  # type: ignore[no-any-return]
        return list(self.tokenizer(text, add_special_tokens=False).input_ids)

    def apply_chat_template(self, messages: list[dict[str, Any]]) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"the tokenizer of {getattr(self, 'model_id', '?')} has no chat template")
        return str(self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))


class EngineFrontend(TokenizerSide, abc.ABC):
    """Requests in, deltas out, on the replica's event loop (see the module docstring)."""

    def _init_frontend(self) -> None:
        self._outputs: dict[str, _Output] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._error: BaseException | None = None

    # -------------------------------------------------------------- what a form provides
    # Each form (TorchEngine in-thread, EngineCoreClient across a process) implements both.
    @abc.abstractmethod
    def _post_add(self, request: GenerationRequest) -> None:
        """Hands a new request to the step loop."""

    @abc.abstractmethod
    def _post_abort(self, request_id: str) -> None:
        """Hands an abort to the step loop."""

    # -------------------------------------------------------------- requests
    async def generate(self, request: GenerationRequest) -> AsyncIterator[list[GenerationDelta]]:
        self._admit(request)
        rid = request.request_id
        out = self._outputs[rid] = _Output(request.params.n)
        self._post_add(request)
        try:
            while out.left > 0:
                if not out.deltas:
                    assert self._loop is not None
                    out.waiter = self._loop.create_future()
                    await out.waiter
                deltas, out.deltas = out.deltas, []
                if deltas and isinstance(deltas[-1], BaseException):
                    out.left = 0  # failed: nothing to abort
                    raise deltas[-1]
                out.left -= sum(1 for d in deltas if d.finish_reason is not None)
                yield deltas
        finally:
            self._outputs.pop(rid, None)
            if out.left > 0:  # the consumer stopped early: free the batch slot
                self._post_abort(rid)

    def _admit(self, request: GenerationRequest) -> None:
        """Checks a new request on the event loop (no round trip to the step loop)."""
        if self._error is not None:
            raise RuntimeError(f"the engine failed: {self._error!r}")
        self._loop = asyncio.get_running_loop()
        rid = request.request_id
        if rid in self._outputs:
            raise ValueError(f"request id {rid} is already running")
        if len(request.prompt_token_ids) >= self._max_len:
            raise ValueError(f"the prompt has {len(request.prompt_token_ids)} tokens; this model's context "
                             f"is {self._max_len} tokens (prompt plus at least one generated token)")

    def submit(self, request: GenerationRequest, callback: Callable[[Any], None]) -> None:
        """Push mode (on the event loop): callback(delta) runs on this loop for each delta of
        the request, inside the step's one hand-off (no task is woken per token), and
        callback(exception) once if the request fails; after the last delta of every sequence
        (finish_reason set) or the exception it is not called again. `cancel(request_id)`
        stops it. The same work as generate(), one await layer and one task wake-up less per
        token and stream."""
        self._admit(request)
        self._outputs[request.request_id] = _Output(request.params.n, callback)
        self._post_add(request)

    def cancel(self, request_id: str) -> None:
        """Stops a submitted request (on the event loop): no more callbacks; its batch slot is
        freed before the next step."""
        if self._outputs.pop(request_id, None) is not None:
            self._post_abort(request_id)

    async def abort(self, request_id: str) -> None:
        self._post_abort(request_id)

    async def check_health(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"the engine failed: {self._error!r}")

    def _deliver(self, batch: list[tuple[str, Any]]) -> None:
        """A step's outputs, on the loop: each consumer's callback, or its buffer and waiter."""
        for rid, item in batch:
            out = self._outputs.get(rid)
            if out is None:
                continue
            cb = out.callback
            if cb is not None:
                if isinstance(item, BaseException) or item.finish_reason is not None:
                    out.left = 0 if isinstance(item, BaseException) else out.left - 1
                    if out.left <= 0:
                        del self._outputs[rid]
                try:
                    cb(item)
                except Exception:  # a consumer's bug must not stop the other requests' delivery
                    log.exception("the consumer of request %s failed", rid)
                    self.cancel(rid)
                continue
            if isinstance(item, BaseException):
                out.deltas.append(item)  # type: ignore[arg-type]
                out.left = 1
            else:
                out.deltas.append(item)
            w = out.waiter
            if w is not None and not w.done():
                w.set_result(None)


# Texts a fast tokenizer's backend must encode as the tokenizer does before it is used alone.
_CHECKS = ("Tell me a story", " leading and  double  spaces ", "Hello, world! 123.45",
           "two\nlines\ttab", "héllo wörld 世界 🙂", "")


def fast_encoder(tokenizer: Any) -> Any:
    """The prompt encoder of a replica: a fast tokenizer's Rust backend called directly (one
    call, no BatchEncoding: the tokenizer's Python layer is most of its cost, above all in a
    replica whose caches went cold between requests), when the backend has no truncation
    or padding set and encodes a few texts (and the special tokens) exactly as the tokenizer
    does; else False (the tokenizer's own call is used)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not getattr(tokenizer, "is_fast", False):
        return False
    try:
        if backend.truncation is not None or backend.padding is not None:
            return False
        specials = " ".join(str(t) for t in getattr(tokenizer, "all_special_tokens", [])[:8])
        for text in (*_CHECKS, f"{specials} x {specials}"):
            if backend.encode(text, add_special_tokens=False).ids != list(
                    tokenizer(text, add_special_tokens=False).input_ids):
                return False
    except Exception:  # noqa: BLE001 - anything unexpected: the tokenizer's own path
        return False

    def encode(text: str) -> list[int]:
        return list(backend.encode(text, add_special_tokens=False).ids)
    return encode
