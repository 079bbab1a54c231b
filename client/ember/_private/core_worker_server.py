"""The gRPC service every driver and worker runs (CoreWorker in core_worker.proto): a thin shell
over CoreWorker (owner side: serving objects, generator items) and its TaskExecutor (worker
side: pushed tasks, cancellation, exit)."""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import grpc

from ember_common.proto import core_worker_pb2, core_worker_pb2_grpc

if TYPE_CHECKING:
    from .core_worker import CoreWorker


class CoreWorkerServicer(core_worker_pb2_grpc.CoreWorkerServicer):
    """Thin gRPC shell over CoreWorker (owner side) and its TaskExecutor (worker side)."""

    def __init__(self, core: CoreWorker) -> None:
        self.core = core

    async def PushTask(self, request: Any, context: Any) -> Any:
        if self.core.executor is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this process executes no tasks")
        return await self.core.executor.push(request.spec)

    async def TaskStream(self, request_iterator: Any, context: Any) -> Any:
        from .task_stream import serve_stream

        if self.core.executor is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this process executes no tasks")
        async for msg in serve_stream(self.core.executor, request_iterator, context):
            yield msg

    async def GetObject(self, request: Any, context: Any) -> Any:
        oid = request.object_id
        core = self.core
        entry = core._objects.get(oid)
        if entry is None:
            if oid not in core._owned:
                return core_worker_pb2.GetObjectReply(status=core_worker_pb2.GetObjectReply.NOT_FOUND)
            fut = core.loop.create_future()
            core._waiters.setdefault(oid, []).append(fut)
            try:
                entry = await asyncio.wait_for(fut, None if request.timeout_s < 0 else request.timeout_s)
            except asyncio.TimeoutError:
                return core_worker_pb2.GetObjectReply(status=core_worker_pb2.GetObjectReply.TIMEOUT)
        return core_worker_pb2.GetObjectReply(status=core_worker_pb2.GetObjectReply.READY, object=entry,
                                              copy_node_ids=core._copies.get(oid, ()))

    async def ReportGeneratorItem(self, request: Any, context: Any) -> Any:
        st = self.core.generators.get(request.task_id)
        if request.nested:
            self.core.refs.take_nested(request.nested)
        if st is not None:
            st.add(request.index, request.item)
        else:  # the generator was dropped: nobody will read it
            self.core._contained.pop(request.item.object_id, None)
            if request.item.in_plasma:
                await self.core._free_plasma([request.item.object_id])
        return core_worker_pb2.ReportGeneratorItemReply()

    async def AddBorrower(self, request: Any, context: Any) -> Any:
        unknown = self.core.refs.add_borrowers(request.object_ids, request.borrower_worker_id)
        return core_worker_pb2.AddBorrowerReply(unknown_ids=unknown)

    async def RemoveBorrower(self, request: Any, context: Any) -> Any:
        self.core.refs.remove_borrowers(request.object_ids, request.borrower_worker_id)
        return core_worker_pb2.RemoveBorrowerReply()

    async def AddObjectLocation(self, request: Any, context: Any) -> Any:
        core = self.core
        if request.object_id in core._owned:
            core._copies.setdefault(request.object_id, set()).add(request.node_id)
        return core_worker_pb2.AddObjectLocationReply()

    async def CancelTask(self, request: Any, context: Any) -> Any:
        ok = self.core.executor.cancel(request.task_id, request.force) if self.core.executor else False
        return core_worker_pb2.CancelTaskReply(attempted=ok)

    async def Exit(self, request: Any, context: Any) -> Any:
        if self.core.executor is not None:
            self.core.executor.request_exit()
        return core_worker_pb2.ExitReply()
