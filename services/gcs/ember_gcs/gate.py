"""The gate in front of every GCS service: only the leader serves.

The gate opens once the GCS has loaded its tables (`open`), and for a replica of a replicated
GCS only while `Leadership.leading()` holds (it leads and surely still holds its lease). Closed,
every RPC of the GCS services is answered UNAVAILABLE (the caller retries) naming the leader, in the text and in the trailing metadata key
`ember_common.gcs_leader.LEADER_METADATA_KEY` (clients follow it: ember_common.gcs_client). The
health service is outside the gate: it says which replicas lead (`ember.Gcs` SERVING on the
leader only) and which are up (`ember.GcsReplica`).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

import grpc

from ember_common.gcs_leader import LEADER_METADATA_KEY, not_leader_message


class Gate:
    """Opens the GCS services when `serving()` is true; else refuses with the leader's address."""

    def __init__(self, address: str, serving: Callable[[], bool] = lambda: True,
                 leader: Callable[[], str] = lambda: "") -> None:
        self.address = address
        self.serving = serving
        self.leader = leader
        self.open = False  # set once the tables are loaded

    async def check(self, context: Any) -> None:
        """Returns when this GCS serves; else aborts the call UNAVAILABLE naming the leader."""
        if self.open and self.serving():
            return
        leader = self.leader()
        if leader == self.address:  # loading, or deposed and not yet exited: never name itself
            leader = ""
        message = (not_leader_message(self.address, leader) if self.open or leader
                   else f"GCS at {self.address} is starting (loading its tables)")
        await context.abort(grpc.StatusCode.UNAVAILABLE, message,
                            trailing_metadata=((LEADER_METADATA_KEY, leader),))

    def wrap(self, handler: Any) -> Any:
        """handler (a grpc RpcMethodHandler) with the check first."""
        if handler is None:
            return None
        check = self.check
        if handler.request_streaming:
            inner = handler.stream_stream if handler.response_streaming else handler.stream_unary
        else:
            inner = handler.unary_stream if handler.response_streaming else handler.unary_unary
        if handler.response_streaming:
            if not inspect.isasyncgenfunction(inner):
                raise TypeError(f"gated streaming handler {inner!r} is not an async generator")

            async def stream(request: Any, context: Any) -> Any:
                await check(context)
                async for item in inner(request, context):
                    yield item
            behavior: Any = stream
        else:
            async def unary(request: Any, context: Any) -> Any:
                await check(context)
                result = inner(request, context)
                return (await result) if inspect.isawaitable(result) else result
            behavior = unary
        field = ("stream_" if handler.request_streaming else "unary_") + \
                ("stream" if handler.response_streaming else "unary")
        return handler._replace(**{field: behavior})

    def registrar(self, server: Any) -> _Registrar:
        """What the generated add_*Servicer_to_server functions get instead of server."""
        return _Registrar(server, self)


class _Registrar:
    def __init__(self, server: Any, gate: Gate) -> None:
        self._server = server
        self._gate = gate

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self._server.add_registered_method_handlers(
            service, {name: self._gate.wrap(h) for name, h in handlers.items()})

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self._server.add_generic_rpc_handlers(tuple(_Generic(h, self._gate) for h in handlers))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


class _Generic(grpc.GenericRpcHandler):
    def __init__(self, inner: Any, gate: Gate) -> None:
        self._inner, self._gate = inner, gate
        self._wrapped: dict[str, Any] = {}

    def service(self, handler_call_details: Any) -> Any:
        method = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            handler = self._inner.service(handler_call_details)
            if handler is None:
                return None
            wrapped = self._wrapped[method] = self._gate.wrap(handler)
        return wrapped
