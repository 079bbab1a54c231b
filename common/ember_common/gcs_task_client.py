"""A blocking client of the GCS's TaskInfoGcsService (proto/gcs_task.proto), one method per RPC.

Blocking on purpose: its callers are a reporter's background thread (`ember._private.telemetry.task_events`)
and the state door, neither of which runs on an event loop. Errors are the kit's `rpc`
exceptions; the reads are retried under the given backoff policy, AddTaskEventData never (the
reporter counts a failed batch as dropped).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from . import backoff, rpc
from .gcs_leader import Channels, Replicas, Service, call_sync, parse_addresses
from .proto import gcs_task_pb2, gcs_task_pb2_grpc


class TaskEventsClient:
    """TaskInfoGcsService over blocking channels (one per GCS replica; gcs_client's rules)."""

    def __init__(self, address: str, *, retry: backoff.Backoff = backoff.NO_RETRY,
                 timeout_s: float = 10.0) -> None:
        self.address = address
        self.retry = retry
        self.timeout_s = timeout_s
        self.replicas = Replicas(parse_addresses(address))
        self._channels = Channels(rpc.sync_channel, self.replicas)
        self._stub = Service(self._channels, self.replicas, gcs_task_pb2_grpc.TaskInfoGcsServiceStub)

    def close(self) -> None:
        """Closes the channels."""
        for channel in list(self._channels.by_address.values()):
            channel.close()

    def _call(self, method: Any, request: Any, idempotent: bool) -> Any:
        def once() -> Any:
            return call_sync(self.replicas, method, request, idempotent=idempotent, timeout=self.timeout_s)

        return backoff.retry_sync(once, self.retry if idempotent else backoff.NO_RETRY,
                                  retry_on=rpc.is_transient)

    def add_task_event_data(self, batch: bytes, records_by_job: Mapping[str, int],
                            dropped_by_job: Mapping[str, int]) -> None:
        """Sends one serialized TaskEventBatch, its records per job (hex) and the events the
        sender dropped (never retried)."""
        req = gcs_task_pb2.AddTaskEventDataRequest(batch=batch, records_by_job=records_by_job,
                                                   dropped_by_job=dropped_by_job)
        self._call(self._stub.AddTaskEventData, req, False)

    def get_task_events(self, filters: Sequence[tuple[str, str, str]] = (),
                        limit: int = 0) -> gcs_task_pb2.GetTaskEventsReply:
        """Attempts matching every filter, newest first (limit 0: all). InvalidArgument names a
        bad filter."""
        req = gcs_task_pb2.GetTaskEventsRequest(limit=limit, filters=[
            gcs_task_pb2.TaskFilter(column=c, predicate=p, value=str(v)) for c, p, v in filters])
        reply: gcs_task_pb2.GetTaskEventsReply = self._call(self._stub.GetTaskEvents, req, True)
        return reply

    def get_task_summary(self, filters: Sequence[tuple[str, str, str]] = ()) -> gcs_task_pb2.GetTaskSummaryReply:
        """Attempts counted per function and state."""
        req = gcs_task_pb2.GetTaskSummaryRequest(filters=[
            gcs_task_pb2.TaskFilter(column=c, predicate=p, value=str(v)) for c, p, v in filters])
        reply: gcs_task_pb2.GetTaskSummaryReply = self._call(self._stub.GetTaskSummary, req, True)
        return reply
