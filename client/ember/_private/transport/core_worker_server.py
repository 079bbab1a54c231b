"""The gRPC service every driver and worker runs (CoreWorker in core_worker.proto): a thin shell
over CoreWorker (owner side: serving objects, generator items) and its TaskExecutor (worker
side: pushed tasks, cancellation, exit)."""
from __future__ import annotations

import enum
from typing import TYPE_CHECKING, AsyncIterator, Iterable, Protocol

import grpc

from ember_common import rpc
from ember_common.proto import common_pb2, core_worker_pb2, core_worker_pb2_grpc

from .task_stream import serve_stream

if TYPE_CHECKING:
    from ..execution.executor import TaskExecutor
    from ..owner.references import References
    from .wire_server import DirectServer


class GetStatus(enum.IntEnum):
    """How an owner answers a borrower's GetObject (core_worker.proto's GetObjectReply.Status)."""

    READY = core_worker_pb2.GetObjectReply.READY
    NOT_FOUND = core_worker_pb2.GetObjectReply.NOT_FOUND
    TIMEOUT = core_worker_pb2.GetObjectReply.TIMEOUT


class ServicerCore(Protocol):
    """What the service needs of the core worker (CoreWorker, in core_worker.py)."""

    executor: TaskExecutor | None
    direct_server: DirectServer
    refs: References

    async def object_for_borrower(self, oid: bytes, timeout_s: float | None
                                  ) -> tuple[GetStatus, common_pb2.ReturnObject | None, set[str]]: ...

    async def take_generator_item(self, task_id: bytes, index: int, item: common_pb2.ReturnObject,
                                  nested: Iterable[core_worker_pb2.NestedRefs]) -> None: ...

    def add_object_location(self, oid: bytes, node_id: str) -> None: ...


class CoreWorkerServicer(core_worker_pb2_grpc.CoreWorkerServicer):
    """Thin gRPC shell over CoreWorker (owner side) and its TaskExecutor (worker side)."""

    def __init__(self, core: ServicerCore) -> None:
        self.core = core

    async def PushTask(self, request: core_worker_pb2.PushTaskRequest,
                           context: rpc.Context) -> core_worker_pb2.PushTaskReply:
        if self.core.executor is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this process executes no tasks")
        return await self.core.executor.push(request.spec)

    async def TaskStream(self, request_iterator: AsyncIterator[core_worker_pb2.TaskBatch],
                         context: rpc.Context) -> AsyncIterator[core_worker_pb2.TaskReplyBatch]:
        if self.core.executor is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this process executes no tasks")
        async for msg in serve_stream(self.core.executor, request_iterator, context):
            yield msg

    async def DirectEndpoint(self, request: core_worker_pb2.DirectEndpointRequest,
                             context: rpc.Context) -> core_worker_pb2.DirectEndpointReply:
        direct = self.core.direct_server
        if self.core.executor is None or not direct.port:
            return core_worker_pb2.DirectEndpointReply()  # none: use TaskStream
        return core_worker_pb2.DirectEndpointReply(port=direct.port, secret=direct.secret)

    async def GetObject(self, request: core_worker_pb2.GetObjectRequest,
                            context: rpc.Context) -> core_worker_pb2.GetObjectReply:
        status, entry, copies = await self.core.object_for_borrower(
            request.object_id, None if request.timeout_s < 0 else request.timeout_s)
        return core_worker_pb2.GetObjectReply(status=status.value, object=entry, copy_node_ids=copies)

    async def ReportGeneratorItem(self, request: core_worker_pb2.ReportGeneratorItemRequest,
                                      context: rpc.Context) -> core_worker_pb2.ReportGeneratorItemReply:
        await self.core.take_generator_item(request.task_id, request.index, request.item,
                                            request.nested)
        return core_worker_pb2.ReportGeneratorItemReply()

    async def AddBorrower(self, request: core_worker_pb2.BorrowerRequest,
                              context: rpc.Context) -> core_worker_pb2.AddBorrowerReply:
        unknown = self.core.refs.add_borrowers(request.object_ids, request.borrower_worker_id)
        return core_worker_pb2.AddBorrowerReply(unknown_ids=unknown)

    async def RemoveBorrower(self, request: core_worker_pb2.BorrowerRequest,
                                 context: rpc.Context) -> core_worker_pb2.RemoveBorrowerReply:
        self.core.refs.remove_borrowers(request.object_ids, request.borrower_worker_id)
        return core_worker_pb2.RemoveBorrowerReply()

    async def AddObjectLocation(self, request: core_worker_pb2.AddObjectLocationRequest,
                                    context: rpc.Context) -> core_worker_pb2.AddObjectLocationReply:
        self.core.add_object_location(request.object_id, request.node_id)
        return core_worker_pb2.AddObjectLocationReply()

    async def CancelTask(self, request: core_worker_pb2.CancelTaskRequest,
                             context: rpc.Context) -> core_worker_pb2.CancelTaskReply:
        ex = self.core.executor
        ok = ex.cancel(request.task_id, request.force, request.recursive) if ex else False
        return core_worker_pb2.CancelTaskReply(attempted=ok)

    async def Exit(self, request: core_worker_pb2.ExitRequest,
                       context: rpc.Context) -> core_worker_pb2.ExitReply:
        if self.core.executor is not None:
            self.core.executor.request_exit()
        return core_worker_pb2.ExitReply()
