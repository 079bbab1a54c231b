"""A typed asyncio client of the GCS's AutoscalerStateService (proto/autoscaler.proto): raylets
report their load; the autoscaler and `ember status` read the cluster's demand.

Also the internal-KV keys the autoscaler's parts share: where `request_resources()` stores its
bundles and where the autoscaler publishes its state (pending launches, recent failures) for
`ember status`.
"""
from __future__ import annotations

from typing import Any

import grpc

from . import backoff, rpc
from .proto import autoscaler_pb2, autoscaler_pb2_grpc

KV_NAMESPACE = "autoscaler"
# JSON: a list of resource dicts, the latest request_resources() call's bundles.
RESOURCE_REQUEST_KEY = b"resource_request"
# JSON: the autoscaler's last round (ember.autoscaler._private.status).
STATUS_KEY = b"status"


class AutoscalerStateClient:
    """AutoscalerStateService behind one asyncio object (use it from one event loop)."""

    def __init__(self, address: str, *, retry: backoff.Backoff = backoff.SERVICE_RESTART,
                 timeout_s: float = 10.0) -> None:
        self.address = address
        self.retry = retry
        self.timeout_s = timeout_s
        self._channel = rpc.aio_channel(address)
        self._stub = autoscaler_pb2_grpc.AutoscalerStateServiceStub(self._channel)

    async def close(self) -> None:
        """Closes the channel."""
        await self._channel.close()

    async def _call(self, method: Any, request: Any, retry: backoff.Backoff | None) -> Any:
        async def once() -> Any:
            try:
                return await method(request, timeout=self.timeout_s)
            except grpc.aio.AioRpcError as e:
                raise rpc.status_to_exception(e) from None

        return await backoff.retry_async(once, retry or self.retry, retry_on=rpc.is_transient)

    async def report_resource_load(self, request: autoscaler_pb2.ReportResourceLoadRequest) -> None:
        """One load report (one try: the next period is the retry)."""
        await self._call(self._stub.ReportResourceLoad, request, backoff.NO_RETRY)

    async def get_cluster_resource_state(
            self, *, retry: backoff.Backoff | None = None) -> autoscaler_pb2.GetClusterResourceStateReply:
        """The alive nodes with their load, pending placement groups and requested resources."""
        reply: autoscaler_pb2.GetClusterResourceStateReply = await self._call(
            self._stub.GetClusterResourceState, autoscaler_pb2.GetClusterResourceStateRequest(), retry)
        return reply


def fetch_cluster_resource_state(address: str, *, timeout_s: float = 10.0) -> autoscaler_pb2.GetClusterResourceStateReply:
    """GetClusterResourceState, blocking (the CLI, the autoscaler's loop, tests); one try, the
    rpc exception of the status on failure."""
    with rpc.sync_channel(address) as channel:
        stub = autoscaler_pb2_grpc.AutoscalerStateServiceStub(channel)
        try:
            reply: autoscaler_pb2.GetClusterResourceStateReply = stub.GetClusterResourceState(
                autoscaler_pb2.GetClusterResourceStateRequest(), timeout=timeout_s)
        except grpc.RpcError as e:
            raise rpc.status_to_exception(e) from None
        return reply
