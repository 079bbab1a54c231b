"""Channels that send the auth header on every call (used by `rpc.aio_channel`/`sync_channel`).

The asyncio side wraps the channel rather than using a grpc.aio client interceptor: an
intercepted aio call runs in an extra task per call, measurable on the task hot path, while this
wrapper only merges one cached metadata tuple into the call's arguments (no allocation when the
caller passes no metadata of its own). The blocking side (CLI, sync GCS client: not hot) uses
`grpc.intercept_channel`. Both send a big request to a data-carrying control method in chunks
(`chunked`), whether or not auth is on.
"""
from __future__ import annotations

from typing import Any, Callable

import grpc
from grpc.aio import Metadata

from . import chunked

MetadataArg = Any  # None, a sequence of (key, value) pairs or a grpc.aio.Metadata


def _merge(extra: tuple[tuple[str, str], ...], metadata: MetadataArg) -> MetadataArg:
    if metadata is None:
        return extra
    if isinstance(metadata, Metadata):
        if extra and extra[0][0] not in metadata:  # type: ignore[comparison-overlap]  # by key
            metadata.add(*extra[0])
        return metadata
    return (*metadata, *extra)


class _UnaryCall:
    """A unary-request multicallable that adds the auth metadata."""

    __slots__ = ("_inner", "_md")

    def __init__(self, inner: Any, md: tuple[tuple[str, str], ...]) -> None:
        self._inner, self._md = inner, md

    def __call__(self, request: Any, *, timeout: float | None = None, metadata: MetadataArg = None,
                 credentials: Any = None, wait_for_ready: bool | None = None,
                 compression: Any = None) -> Any:
        return self._inner(request, timeout=timeout, metadata=_merge(self._md, metadata),
                           credentials=credentials, wait_for_ready=wait_for_ready,
                           compression=compression)


class _StreamCall:
    """A streamed-request multicallable that adds the auth metadata."""

    __slots__ = ("_inner", "_md")

    def __init__(self, inner: Any, md: tuple[tuple[str, str], ...]) -> None:
        self._inner, self._md = inner, md

    def __call__(self, request_iterator: Any = None, timeout: float | None = None,
                 metadata: MetadataArg = None, credentials: Any = None,
                 wait_for_ready: bool | None = None, compression: Any = None) -> Any:
        return self._inner(request_iterator, timeout=timeout, metadata=_merge(self._md, metadata),
                           credentials=credentials, wait_for_ready=wait_for_ready,
                           compression=compression)


class AioAuthChannel(grpc.aio.Channel):
    """A grpc.aio.Channel whose calls all carry `md` (the cached auth metadata; () with auth
    off) and whose data-carrying control methods chunk big requests (`chunked.AioCall`)."""

    def __init__(self, inner: grpc.aio.Channel, md: tuple[tuple[str, str], ...]) -> None:
        self._inner, self._md = inner, md

    async def __aenter__(self) -> AioAuthChannel:
        return self

    async def __aexit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        await self._inner.close(None)

    async def close(self, grace: float | None = None) -> None:
        """Closes the underlying channel."""
        await self._inner.close(grace)

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        """The underlying channel's connectivity."""
        return self._inner.get_state(try_to_connect)

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        """Waits for the underlying channel's state to change."""
        await self._inner.wait_for_state_change(last_observed_state)

    async def channel_ready(self) -> None:
        """Waits until the underlying channel is READY."""
        await self._inner.channel_ready()

    def unary_unary(self, method: str, request_serializer: Callable[..., Any] | None = None,
                    response_deserializer: Callable[..., Any] | None = None,
                    _registered_method: bool | None = False) -> Any:
        """A unary-unary multicallable that sends the auth metadata; for a method of
        `chunked.LARGE_METHODS`, one that sends a request over the control limit in chunks."""
        if method in chunked.LARGE_METHODS:
            return chunked.AioCall(
                method, request_serializer,
                _UnaryCall(self._inner.unary_unary(method, None, response_deserializer), self._md),
                _StreamCall(self._inner.stream_unary(chunked.METHOD, None, response_deserializer), self._md))
        return _UnaryCall(self._inner.unary_unary(method, request_serializer, response_deserializer,  # type: ignore[call-arg]
                                                  _registered_method), self._md)

    def unary_stream(self, method: str, request_serializer: Callable[..., Any] | None = None,
                     response_deserializer: Callable[..., Any] | None = None,
                     _registered_method: bool | None = False) -> Any:
        """A unary-stream multicallable that sends the auth metadata."""
        return _UnaryCall(self._inner.unary_stream(method, request_serializer, response_deserializer,  # type: ignore[call-arg]
                                                   _registered_method), self._md)

    def stream_unary(self, method: str, request_serializer: Callable[..., Any] | None = None,
                     response_deserializer: Callable[..., Any] | None = None,
                     _registered_method: bool | None = False) -> Any:
        """A stream-unary multicallable that sends the auth metadata."""
        return _StreamCall(self._inner.stream_unary(method, request_serializer, response_deserializer,  # type: ignore[call-arg]
                                                    _registered_method), self._md)

    def stream_stream(self, method: str, request_serializer: Callable[..., Any] | None = None,
                      response_deserializer: Callable[..., Any] | None = None,
                      _registered_method: bool | None = False) -> Any:
        """A stream-stream multicallable that sends the auth metadata."""
        return _StreamCall(self._inner.stream_stream(method, request_serializer, response_deserializer,  # type: ignore[call-arg]
                                                     _registered_method), self._md)


class _Details(grpc.ClientCallDetails):
    def __init__(self, base: Any, metadata: tuple[tuple[str, str | bytes], ...]) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class SyncAuthInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                          grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds the auth metadata to every call of a blocking channel."""

    def __init__(self, md: tuple[tuple[str, str], ...]) -> None:
        self._md = md

    def _details(self, d: Any) -> _Details:
        return _Details(d, (*(d.metadata or ()), *self._md))

    def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        """Adds the header."""
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        """Adds the header."""
        return continuation(self._details(client_call_details), request)

    def intercept_stream_unary(self, continuation: Any, client_call_details: Any,
                               request_iterator: Any) -> Any:
        """Adds the header."""
        return continuation(self._details(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation: Any, client_call_details: Any,
                                request_iterator: Any) -> Any:
        """Adds the header."""
        return continuation(self._details(client_call_details), request_iterator)
