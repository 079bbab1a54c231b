"""Streaming generators: a task or actor method that yields returns an ObjectRefGenerator whose
refs become available one by one as the worker produces them.

Worker side (executor.py): each yielded value is stored (inline or shared memory) and reported to
the caller with CoreWorker.ReportGeneratorItem(task_id, index); the PushTask reply then says how
many items there were. An exception inside the generator becomes the last item (its ref raises).
Owner side (this module): GeneratorState collects items by index (duplicates from a retried task
are ignored) until the total is known; ObjectRefGenerator hands out the refs in order.
"""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Protocol, TypeVar

from ember_common import ids
from ember_common.proto import common_pb2

from ..objects.object_ref import ObjectRef
from ..objects.serialization import ERROR_METADATA, serialize

T = TypeVar("T")


class GeneratorState:
    """Loop thread only."""

    def __init__(self) -> None:
        self.items: dict[int, common_pb2.ReturnObject] = {}
        self.total: int | None = None
        self._waiters: list[asyncio.Future[None]] = []

    def add(self, index: int, item: common_pb2.ReturnObject) -> None:
        if index in self.items or (self.total is not None and index >= self.total):
            return
        self.items[index] = item
        self._wake()

    def finish(self, total: int) -> None:
        if self.total is None:
            self.total = total
            self._wake()

    def fail(self, task_id: bytes, error: BaseException) -> None:
        if self.total is not None:
            return
        index = max(self.items) + 1 if self.items else 0
        sv = serialize(error, ERROR_METADATA)
        self.items[index] = common_pb2.ReturnObject(
            object_id=ids.object_id_for_return(task_id, index + 1), value=sv.to_proto())
        self.finish(index + 1)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for f in waiters:
            if not f.done():
                f.set_result(None)

    async def wait_item(self, index: int, timeout: float | None) -> common_pb2.ReturnObject | None:
        """The item at index, or None once the stream ended before it."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            item = self.items.pop(index, None)
            if item is not None:
                return item
            if self.total is not None and index >= self.total:
                return None
            fut = loop.create_future()
            self._waiters.append(fut)
            left = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                await asyncio.wait_for(fut, left)
            except asyncio.TimeoutError:
                from ember.exceptions import GetTimeoutError

                raise GetTimeoutError(f"no item {index} from the generator within {timeout}s") from None


class GeneratorCore(Protocol):
    """What an ObjectRefGenerator needs of the core worker (CoreWorker, in core_worker.py)."""

    loop: asyncio.AbstractEventLoop
    generators: dict[bytes, GeneratorState]

    @property
    def is_shutdown(self) -> bool: ...

    def run(self, coro: Awaitable[T] | Callable[[], Awaitable[T]], timeout: float | None = None) -> T: ...

    def post(self, fn: Callable[..., object], *args: Any) -> None: ...

    def accept_generator_item(self, item: common_pb2.ReturnObject) -> ObjectRef: ...

    def drop_generator(self, task_id: bytes) -> None: ...


class ObjectRefGenerator:
    """Iterate (or `async for`) to get one ObjectRef per yielded value, in order."""

    def __init__(self, task_id: bytes, core: GeneratorCore) -> None:
        self._task_id = task_id
        self._core = core
        self._next = 0
        self._done = False

    def __iter__(self) -> ObjectRefGenerator:
        return self

    def __next__(self) -> ObjectRef:
        return self._take(self._core.run(self._state().wait_item(self._next, None)))

    def next_ready(self, timeout: float | None = None) -> ObjectRef:
        """The next ref; GetTimeoutError if it is not produced within timeout."""
        return self._take(self._core.run(self._state().wait_item(self._next, timeout)))

    def __aiter__(self) -> ObjectRefGenerator:
        return self

    async def __anext__(self) -> ObjectRef:
        fut = asyncio.run_coroutine_threadsafe(self._state().wait_item(self._next, None), self._core.loop)
        item = await asyncio.wrap_future(fut)
        try:
            return self._take(item)
        except StopIteration:
            raise StopAsyncIteration from None

    def _state(self) -> GeneratorState:
        st = self._core.generators.get(self._task_id)
        if st is None:
            st = GeneratorState()
            st.finish(self._next)
        return st

    def _take(self, item: common_pb2.ReturnObject | None) -> ObjectRef:
        if item is None:
            self._done = True
            raise StopIteration
        ref = self._core.accept_generator_item(item)
        self._next += 1
        return ref

    def is_finished(self) -> bool:
        return self._done

    def task_id(self) -> bytes:
        return self._task_id

    def __repr__(self) -> str:
        return f"ObjectRefGenerator({self._task_id.hex()})"

    def __del__(self) -> None:
        core = self._core
        if core is not None and not core.is_shutdown:
            core.post(core.drop_generator, self._task_id)
