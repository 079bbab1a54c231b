"""Big requests to the GCS and raylets, sent as a stream of small messages.

A control server (the GCS, a raylet) receives messages of at most EMBER_MAX_CONTROL_REQUEST_BYTES
(`rpc.receive_limit(True)`, 4 MiB): gRPC refuses a longer one from its length prefix, before it
buffers any of it. The few methods whose requests carry data (LARGE_METHODS: a user's KV value,
an actor's creation spec with its inline arguments, batches of task events and log lines,
placement-group rounds, the heartbeat of a node holding many bundles) may take up to EMBER_MAX_CONTROL_MESSAGE_BYTES (`rpc.data_limit()`,
64 MiB). A request to one of them over the control limit travels as one client-streaming call,

    /ember.Chunked/Call   metadata  ember-chunked-method: /ember.Raylet/PrepareBundleResources
                          messages  the serialized request in pieces of at most CHUNK_BYTES
                          reply     the method's serialized reply

which the server joins and hands to the method's own handler (rules, gate and servicer as for a
unary call), so a caller never sends one message over the control limit. The channels of
`rpc.aio_channel` and `rpc.sync_channel` choose the way per call (`AioCall`, `SyncChannel`):
every caller of those methods works unchanged. A stream without the token is refused on its
metadata before any message is read (auth.py), a stream for any other method before its first
message, and one that passes the data limit as soon as the pieces received pass it.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Iterator, Mapping

import grpc

from . import limits

METHOD = "/ember.Chunked/Call"
TARGET_KEY = "ember-chunked-method"
CHUNK_BYTES = 2 * 1024 * 1024  # a piece; never more than the control limit (`chunk_bytes`)

# Control methods whose requests carry data: they take up to the data limit, in chunks.
LARGE_METHODS = frozenset({
    "/ember.InternalKVGcsService/InternalKVPut",  # a user's value (functions, packages: 1 MiB parts)
    "/ember.ActorInfoGcsService/RegisterActor",  # the creation spec, its inline args included
    "/ember.TaskInfoGcsService/AddTaskEventData",  # a batch of task events
    "/ember.InternalPubSubGcsService/PublishLogs",  # a raylet's batch of worker output
    "/ember.PlacementGroupInfoGcsService/CreatePlacementGroups",  # a driver's batch of groups
    # a raylet's resources, each committed bundle's named ones included (two names a bundle)
    "/ember.NodeInfoGcsService/ReportHeartbeat",
    # a round's groups on one raylet, up to validate_rules.MAX_BUNDLES_PER_GROUP bundles each
    "/ember.Raylet/PrepareBundleResources",
    "/ember.Raylet/CommitBundleResources",
    "/ember.Raylet/CancelResourceReserve",
})


def _limits() -> tuple[int, int]:
    return limits.receive_limit(control=True), limits.data_limit()


def chunk_bytes(control_limit: int) -> int:
    """The size of a piece: CHUNK_BYTES, or the control limit when that is smaller."""
    return max(1, min(CHUNK_BYTES, control_limit))


def pieces(data: bytes, size: int) -> Iterator[bytes]:
    """data in slices of at most size bytes (one copy each, made as the stream sends it)."""
    view = memoryview(data)
    for start in range(0, len(data), size):
        yield bytes(view[start:start + size])


def _with_target(metadata: Any, method: str) -> tuple[tuple[str, str], ...]:
    return (*(tuple(metadata) if metadata is not None else ()), (TARGET_KEY, method))


class AioCall:
    """An asyncio unary multicallable for a LARGE_METHODS method: a request within the control
    limit goes as one message, a bigger one as a chunked stream. `unary` and `stream` are the
    channel's multicallables (the auth channel's: they add the token)."""

    __slots__ = ("_method", "_serialize", "_unary", "_stream", "_limit", "_piece")

    def __init__(self, method: str, serialize: Callable[[Any], bytes] | None, unary: Any, stream: Any) -> None:
        self._method, self._serialize = method, serialize
        self._unary, self._stream = unary, stream
        self._limit, _ = _limits()
        self._piece = chunk_bytes(self._limit)

    def __call__(self, request: Any, *, timeout: float | None = None, metadata: Any = None,
                 credentials: Any = None, wait_for_ready: bool | None = None, compression: Any = None) -> Any:
        data = self._serialize(request) if self._serialize is not None else request
        if len(data) <= self._limit:
            return self._unary(data, timeout=timeout, metadata=metadata, credentials=credentials,
                               wait_for_ready=wait_for_ready, compression=compression)
        return self._stream(pieces(data, self._piece), timeout=timeout,
                            metadata=_with_target(metadata, self._method), credentials=credentials,
                            wait_for_ready=wait_for_ready, compression=compression)


class _SyncCall:
    """The blocking counterpart of AioCall (`__call__`, `with_call`, `future`)."""

    def __init__(self, channel: grpc.Channel, method: str, serialize: Callable[[Any], bytes] | None,
                 deserialize: Callable[[bytes], Any] | None) -> None:
        self._method, self._serialize = method, serialize
        self._unary: Any = channel.unary_unary(method, None, deserialize)
        self._stream: Any = channel.stream_unary(METHOD, None, deserialize)
        self._limit, _ = _limits()
        self._piece = chunk_bytes(self._limit)

    def _pick(self, request: Any, metadata: Any) -> tuple[Any, Any, Any]:
        data = self._serialize(request) if self._serialize is not None else request
        if len(data) <= self._limit:
            return self._unary, data, metadata
        return self._stream, pieces(data, self._piece), _with_target(metadata, self._method)

    def __call__(self, request: Any, timeout: float | None = None, metadata: Any = None, **kw: Any) -> Any:
        call, arg, md = self._pick(request, metadata)
        return call(arg, timeout=timeout, metadata=md, **kw)

    def with_call(self, request: Any, timeout: float | None = None, metadata: Any = None, **kw: Any) -> Any:
        call, arg, md = self._pick(request, metadata)
        return call.with_call(arg, timeout=timeout, metadata=md, **kw)

    def future(self, request: Any, timeout: float | None = None, metadata: Any = None, **kw: Any) -> Any:
        call, arg, md = self._pick(request, metadata)
        return call.future(arg, timeout=timeout, metadata=md, **kw)


class SyncChannel(grpc.Channel):
    """A blocking channel whose LARGE_METHODS calls go chunked when big (`_SyncCall`); every
    other call is the inner channel's."""

    def __init__(self, inner: grpc.Channel) -> None:
        self._inner = inner

    def subscribe(self, callback: Any, try_to_connect: bool = False) -> None:
        """The inner channel's."""
        self._inner.subscribe(callback, try_to_connect)

    def unsubscribe(self, callback: Any) -> None:
        """The inner channel's."""
        self._inner.unsubscribe(callback)

    def unary_unary(self, method: str, request_serializer: Any = None, response_deserializer: Any = None,
                    _registered_method: bool | None = False) -> Any:
        """Chunked when big for LARGE_METHODS; else the inner channel's."""
        if method in LARGE_METHODS:
            return _SyncCall(self._inner, method, request_serializer, response_deserializer)
        return self._inner.unary_unary(method, request_serializer, response_deserializer)

    def unary_stream(self, method: str, request_serializer: Any = None, response_deserializer: Any = None,
                     _registered_method: bool | None = False) -> Any:
        """The inner channel's."""
        return self._inner.unary_stream(method, request_serializer, response_deserializer)

    def stream_unary(self, method: str, request_serializer: Any = None, response_deserializer: Any = None,
                     _registered_method: bool | None = False) -> Any:
        """The inner channel's."""
        return self._inner.stream_unary(method, request_serializer, response_deserializer)

    def stream_stream(self, method: str, request_serializer: Any = None, response_deserializer: Any = None,
                      _registered_method: bool | None = False) -> Any:
        """The inner channel's."""
        return self._inner.stream_stream(method, request_serializer, response_deserializer)

    def close(self) -> None:
        """Closes the inner channel."""
        self._inner.close()

    def __enter__(self) -> SyncChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.close()


class ServerHandler(grpc.GenericRpcHandler):
    """Serves METHOD on a control server: joins the pieces (at most `limit` bytes in all) and
    answers with the target method's handler from `handlers` (full name -> the registered,
    validating RpcMethodHandler; `validate_server.Registrar.handlers`)."""

    def __init__(self, handlers: Mapping[str, Any], limit: int) -> None:
        self._handlers, self._limit = handlers, limit
        self._handler: Any = grpc.stream_unary_rpc_method_handler(self._call)

    def service(self, handler_call_details: Any) -> Any:
        """The handler of METHOD; None for any other method."""
        return self._handler if handler_call_details.method == METHOD else None

    async def _call(self, requests: Any, context: Any) -> bytes:
        target = next((v for k, v in context.invocation_metadata() or () if k == TARGET_KEY), "")
        handler: Any = self._handlers.get(target) if target in LARGE_METHODS else None
        if handler is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"{METHOD}: {target!r} does not take a chunked request (these do: "
                                f"{', '.join(sorted(LARGE_METHODS))})")
        parts: list[bytes] = []
        size = 0
        async for piece in requests:
            size += len(piece)
            if size > self._limit:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                    f"{target}: the request is over this method's limit of {self._limit} "
                                    "bytes (EMBER_MAX_CONTROL_MESSAGE_BYTES, at most EMBER_MAX_MESSAGE_BYTES; "
                                    "big values belong in the object store, e.g. ember.put)")
            parts.append(piece)
        data = b"".join(parts)
        parts.clear()
        result = handler.unary_unary(handler.request_deserializer(data), context)
        if inspect.isawaitable(result):
            result = await result
        return bytes(handler.response_serializer(result))
