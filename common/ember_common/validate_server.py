"""The validation layer of every gRPC server: `rpc.build_server` hands the generated
`add_*Servicer_to_server` functions a `Registrar`, which wraps each method handler
(`wrap_handler`) so that, before the servicer runs, the request is

1. parsed leniently: bytes that are not a valid message of the method's request type (broken
   wire format, invalid UTF-8 in a string field) answer INVALID_ARGUMENT instead of the gRPC
   library's generic failure;
2. checked against the rules of its message type (`validate_rules.RULES`, see `validate`):
   the first problem answers INVALID_ARGUMENT naming the field, e.g.
   ``/ember.Raylet/ReturnWorker: lease_id must be 16 bytes, got 3``.

A request's size is bounded before it gets here: the server's receive limit (gRPC refuses a
longer message from its length prefix; bigger data requests arrive in pieces, see chunked.py).
A unary request of OFF_LOOP_BYTES or more is parsed and checked on a worker thread, so a big one (a placement-group
round of 200,000 bundles) does not hold off the server's other calls.

The servicer then sees only well-formed requests; the error goes through the kit's one error
table (`rpc.InvalidArgument`). Messages without rules pass after parsing.

Request streams (`WriteObject`, `TaskStream`) get the same two steps for every message: the
servicer iterates a checked stream, and the first bad message raises `invalid(text)` out of
its iteration (``/ember.ObjectManager/WriteObject: message 2: offset must be >= 0, got -8``),
which ends the call INVALID_ARGUMENT whether or not the servicer catches it (it may clean up
first: a failed write drops its unsealed object). Checks that need the stream's earlier
messages, or that fail one item of a message rather than the stream (TaskStream's specs: a bad
spec fails its task, see `validate_rules.task_spec_problem`), stay with the servicer.
"""
from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable

import grpc

from .validate import Rule, first


class _Malformed:
    """What the lenient deserializer returns for bytes that do not parse."""

    def __init__(self, type_name: str, error: Exception) -> None:
        self.text = f"the request is not a valid {type_name} message ({type(error).__name__}: {error})"


# A request at least this long is parsed and checked on a worker thread, not the event loop: a
# message of many items (a placement-group round of 200,000 bundles: ~0.7 s of rule checks)
# must not hold off the server's other calls. The GIL still lets the loop run between switches.
OFF_LOOP_BYTES = 256 * 1024


class _Deferred:
    """What the lenient deserializer returns for a request of at least OFF_LOOP_BYTES: its bytes,
    parsed and checked off the event loop by the wrapper."""

    def __init__(self, data: bytes) -> None:
        self.data = data


def wrap_handler(handler: Any, method: str, rules_by_type: dict[str, list[Rule]],
                 invalid: Callable[[str], Exception]) -> Any:
    """handler (a grpc RpcMethodHandler) with lenient parsing and the rules of its request type
    checked first, for the request or each message of a request stream; a handler without a
    protobuf request type is returned as it is. A bad request aborts the call with the status
    code of `invalid(text)` (rpc.InvalidArgument: the kit's error table says INVALID_ARGUMENT)."""
    if handler is None:
        return handler
    parse = handler.request_deserializer
    msg_cls = getattr(parse, "__self__", None)
    if parse is None or msg_cls is None or not hasattr(msg_cls, "DESCRIPTOR"):
        return handler
    type_name = msg_cls.DESCRIPTOR.full_name
    rules = rules_by_type.get(type_name, [])

    def lenient(data: bytes) -> Any:
        return _Deferred(data) if len(data) >= OFF_LOOP_BYTES and not handler.request_streaming else parsed(data)

    def parsed(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as exc:  # DecodeError, UnicodeDecodeError ...: the caller's fault
            return _Malformed(type_name, exc)

    def parsed_and_checked(data: bytes) -> tuple[Any, str | None]:
        request = parsed(data)
        return request, problem_of(request)

    async def checked(request: Any) -> tuple[Any, str | None]:
        if isinstance(request, _Deferred):
            return await asyncio.to_thread(parsed_and_checked, request.data)
        return request, problem_of(request)

    def problem_of(request: Any) -> str | None:
        if isinstance(request, _Malformed):
            return request.text
        return first(request, rules) if rules else None

    def refusal(request: Any, text: str) -> Exception:
        return invalid(text)

    async def refuse(context: Any, request: Any, problem: str) -> None:
        await _abort(context, refusal(request, f"{method}: {problem}"))

    if handler.request_streaming:
        return _wrap_request_stream(handler, lenient, problem_of, method, refusal)
    inner = handler.unary_stream if handler.response_streaming else handler.unary_unary
    if handler.response_streaming and inspect.isasyncgenfunction(inner):
        async def stream(request: Any, context: Any) -> Any:
            request, problem = await checked(request)
            if problem is not None:
                await refuse(context, request, problem)
            async for item in inner(request, context):
                yield item
        behavior: Any = stream
    else:
        async def unary(request: Any, context: Any) -> Any:
            request, problem = await checked(request)
            if problem is not None:
                await refuse(context, request, problem)
            result = inner(request, context)
            return (await result) if inspect.isawaitable(result) else result
        behavior = unary
    make = grpc.unary_stream_rpc_method_handler if handler.response_streaming else grpc.unary_unary_rpc_method_handler
    return make(behavior, request_deserializer=lenient, response_serializer=handler.response_serializer)


async def _abort(context: Any, err: Exception) -> None:
    await context.abort(getattr(err, "code", grpc.StatusCode.INVALID_ARGUMENT), str(err))


async def _checked(requests: Any, problem_of: Callable[[Any], "str | None"], method: str,
                   refusal: Callable[[Any, str], Exception], raised: list[Exception]) -> Any:
    """The messages of a request stream, each checked; the first bad one raises (and is noted
    in `raised`, so the wrapper knows the error is the stream's, not the servicer's)."""
    n = 0
    async for request in requests:
        problem = problem_of(request)
        if problem is not None:
            err = refusal(request, f"{method}: message {n}: {problem}")
            raised.append(err)
            raise err
        n += 1
        yield request


def _wrap_request_stream(handler: Any, lenient: Callable[[bytes], Any],
                         problem_of: Callable[[Any], "str | None"], method: str,
                         refusal: Callable[[Any, str], Exception]) -> Any:
    """A stream-unary or stream-stream handler whose servicer iterates a checked stream."""
    if handler.response_streaming:
        inner = handler.stream_stream
        if not inspect.isasyncgenfunction(inner):
            return handler

        async def stream(requests: Any, context: Any) -> Any:
            raised: list[Exception] = []
            try:
                async for item in inner(_checked(requests, problem_of, method, refusal, raised), context):
                    yield item
            except Exception as e:
                if raised and e is raised[0]:
                    await _abort(context, e)
                raise
        return grpc.stream_stream_rpc_method_handler(
            stream, request_deserializer=lenient, response_serializer=handler.response_serializer)
    inner = handler.stream_unary

    async def unary(requests: Any, context: Any) -> Any:
        raised: list[Exception] = []
        try:
            result = inner(_checked(requests, problem_of, method, refusal, raised), context)
            return (await result) if inspect.isawaitable(result) else result
        except Exception as e:
            if raised and e is raised[0]:
                await _abort(context, e)
            raise
    return grpc.stream_unary_rpc_method_handler(
        unary, request_deserializer=lenient, response_serializer=handler.response_serializer)


class Registrar:
    """What `rpc.build_server` hands to the generated `add_*Servicer_to_server` functions: the
    server, except that method handlers get `wrap_handler` on their way in (the per-service
    registered handlers and generic ones alike)."""

    def __init__(self, server: Any, rules: dict[str, list[Rule]], invalid: Callable[[str], Exception]) -> None:
        self._server = server
        self._rules = rules
        self._invalid = invalid
        self.handlers: dict[str, Any] = {}  # full method name -> its wrapped registered handler

    def wrap(self, handler: Any, method: str) -> Any:
        """handler wrapped for method (a full name, /package.Service/Method)."""
        return wrap_handler(handler, method, self._rules, self._invalid)

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        """Registers the handlers of `service`, each wrapped (and kept in `handlers`)."""
        wrapped = {name: self.wrap(h, f"/{service}/{name}") for name, h in handlers.items()}
        self.handlers.update((f"/{service}/{name}", h) for name, h in wrapped.items())
        self._server.add_registered_method_handlers(service, wrapped)

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        """Registers generic handlers whose method handlers are wrapped on first use."""
        self._server.add_generic_rpc_handlers(tuple(_Generic(h, self.wrap) for h in handlers))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


class _Generic(grpc.GenericRpcHandler):
    def __init__(self, inner: Any, wrap: Callable[[Any, str], Any]) -> None:
        self._inner, self._wrap = inner, wrap
        self._wrapped: dict[str, Any] = {}

    def service(self, handler_call_details: Any) -> Any:
        method = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            handler = self._inner.service(handler_call_details)
            if handler is None:
                return None  # not this handler's method (not cached: names come from callers)
            wrapped = self._wrapped[method] = self._wrap(handler, method)
        return wrapped
