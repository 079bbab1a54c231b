"""What the executor (executor.py, with its effects in executor_effects.py) needs of the core
worker: `ExecutorCore`, a typing Protocol that CoreWorker (core_worker.py) satisfies. The
executor holds the core through it, so that neither imports the other's module."""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Protocol, TypeVar

if TYPE_CHECKING:
    from ember_common.config import Config
    from ember_common.gcs_client import GcsClient
    from ember_common.proto import common_pb2, core_worker_pb2, core_worker_pb2_grpc

    from ..objects.object_ref import ObjectRef, OwnerAddress
    from ..objects.serialization import SerializedValue
    from ..owner.references import References

T = TypeVar("T")


class CallerRoute(Protocol):
    """A direct connection a task came over (wire_server.py's _ServerConn): its items go back on it."""

    def report(self, request: core_worker_pb2.ReportGeneratorItemRequest,
               wait: bool = True) -> asyncio.Future[None] | None: ...


class DirectRoutes(Protocol):
    """The worker's direct listener (wire_server.py's DirectServer), by the tasks it routes."""

    @property
    def routes(self) -> Mapping[bytes, CallerRoute]: ...


class ExecutorCore(Protocol):
    """What the executor and its effects need of the core worker."""

    config: Config
    gcs: GcsClient
    loop: asyncio.AbstractEventLoop
    job_id: bytes  # the executor sets it to the job of the task it runs
    node_id: str
    worker_id: str
    ip: str
    refs: References

    @property
    def direct_server(self) -> DirectRoutes: ...

    def run(self, coro: Awaitable[T] | Callable[[], Awaitable[T]], timeout: float | None = None) -> T: ...

    def post(self, fn: Callable[..., object], *args: Any) -> None: ...

    def in_loop(self) -> bool: ...

    async def cancel_children(self, parent_id: bytes, force: bool) -> None: ...

    def worker_stub(self, address: str) -> core_worker_pb2_grpc.CoreWorkerAsyncStub: ...

    def store_value(self, oid: bytes, sv: SerializedValue, owner: str | None = None) -> common_pb2.ReturnObject: ...

    async def store_value_async(self, oid: bytes, sv: SerializedValue,
                                owner: str | None = None) -> common_pb2.ReturnObject: ...

    def materialize(self, entry: common_pb2.ReturnObject, owner: OwnerAddress | None = None) -> Any: ...

    async def materialize_async(self, entry: common_pb2.ReturnObject, owner: OwnerAddress | None = None) -> Any: ...

    def get(self, refs: list[ObjectRef], timeout: float | None = None) -> list[Any]: ...

    async def get_async(self, ref: ObjectRef) -> Any: ...
