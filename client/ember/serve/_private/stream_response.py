"""The consumer side of a streamed handle call: the items' hand-off and the generator that reads it.

`DeploymentHandle.remote()` with `stream=True` (handle.py) runs the call on the handle runtime's
loop, which puts each batch into an `_Items`; the caller iterates the
`DeploymentResponseGenerator` over it (`for`, `async for`, or attached by Serve's stream pump),
on its own thread or loop. Imported from `ember.serve.handle`, the generator's public home.
"""
from __future__ import annotations

import _thread
import asyncio
import collections
import concurrent.futures
import functools
import threading
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterator

if TYPE_CHECKING:
    from ..handle import _HandleRuntime


class _Items:
    """The entries of one streamed call ("item", x) / ("end", None) / ("error", e), handed from
    the runtime's loop (which puts them) to the consumer, on whatever thread or event loop it
    iterates: the consumer takes what is here without any hop, and when it has to wait, the
    next put wakes it directly (a lock released for a thread, `call_soon_threadsafe` onto its
    loop for a coroutine): one wake-up per batch, none while the consumer is busy, and no
    thread hop onto the runtime's loop to ask for the next item. An attached consumer (`attach`)
    gets each batch by a callback on its loop instead."""

    __slots__ = ("_lock", "buf", "waiter", "sink")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.buf: collections.deque[tuple[str, Any]] = collections.deque()
        self.waiter: Callable[[], Any] | None = None  # wakes the consumer waiting for an entry
        self.sink: Callable[[list[tuple[str, Any]]], Any] | None = None  # an attached consumer's

    def put(self, entries: list[tuple[str, Any]]) -> None:
        """Adds entries (the runtime's loop); wakes the consumer if it waits."""
        with self._lock:
            sink = self.sink
            if sink is None:
                self.buf.extend(entries)
            w, self.waiter = self.waiter, None
        if sink is not None:
            w = functools.partial(sink, entries)
        if w is not None:
            try:
                w()
            except RuntimeError:  # the consumer's loop is closed: nobody is waiting any more
                pass

    def attach(self, put: Callable[[Any], None], end: Callable[[BaseException | None], None]) -> None:
        """From now on each batch is handed to put(item) per item, then end(None) (or
        end(error)) once, on the running loop (one `call_soon_threadsafe` per batch)."""
        loop = asyncio.get_running_loop()
        over = False

        def deliver(entries: list[tuple[str, Any]]) -> None:
            nonlocal over
            for kind, value in entries:
                if over:
                    return
                if kind == "item":
                    put(value)
                else:
                    over = True
                    end(value if kind == "error" else None)

        def sink(entries: list[tuple[str, Any]]) -> None:
            loop.call_soon_threadsafe(deliver, entries)

        with self._lock:
            ready, self.buf = list(self.buf), collections.deque()
            self.sink = sink
        deliver(ready)

    def cancelled(self, fut: concurrent.futures.Future[Any]) -> None:
        """fut's done-callback: a call cancelled before it started still ends its consumer's wait."""
        if fut.cancelled():
            self.put([("error", asyncio.CancelledError())])

    def get(self) -> tuple[str, Any]:
        """The next entry, waiting on this thread while there is none."""
        while True:
            with self._lock:
                if self.buf:
                    return self.buf.popleft()
                lk = _thread.allocate_lock()
                lk.acquire()
                self.waiter = lk.release
            lk.acquire()

    async def aget(self) -> tuple[str, Any]:
        """The next entry, waiting on the running loop while there is none."""
        while True:
            with self._lock:
                if self.buf:
                    return self.buf.popleft()
                loop = asyncio.get_running_loop()
                f: asyncio.Future[None] = loop.create_future()
                self.waiter = functools.partial(loop.call_soon_threadsafe, _wake, f)
            await f


def _wake(f: asyncio.Future[None]) -> None:
    if not f.done():
        f.set_result(None)


class DeploymentResponseGenerator:
    """The items of a streaming handle call (`handle.options(stream=True)`), as they are produced;
    iterate with `for` or `async for`."""

    def __init__(self, runtime: _HandleRuntime, items: _Items, fut: concurrent.futures.Future[Any]) -> None:
        self._rt = runtime
        self._items = items
        self._fut = fut
        self._done = False

    def _take(self, entry: tuple[str, Any]) -> Any:
        kind, value = entry
        if kind == "item":
            return value
        self._done = True
        if kind == "error":
            raise value
        raise StopIteration

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        return self._take(self._items.get())

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        if self._done:
            raise StopAsyncIteration
        try:
            return self._take(await self._items.aget())
        except StopIteration:
            raise StopAsyncIteration from None

    def _ember_attach(self, put: Callable[[Any], None], end: Callable[[BaseException | None], None]) -> None:
        """The push protocol of Serve's stream pump (serve/_private/streams.py): every item
        still to come is handed to put on this loop, then end(None) or end(error); no task
        and no generator step per item. `_ember_detach()` stops the stream."""
        self._done = True  # (no iterating it any more)
        self._items.attach(put, end)

    def _ember_detach(self) -> None:
        self.cancel()

    def cancel(self) -> None:
        """Stops the stream: the replica closes the deployment's generator."""
        self._done = True
        self._items.sink = None
        self._items.buf.clear()
        if not self._fut.done():  # (a stream read to its end needs no wake-up of the runtime)
            self._rt.loop.call_soon_threadsafe(self._fut.cancel)

    async def aclose(self) -> None:
        self.cancel()

    def close(self) -> None:
        self.cancel()

    def __del__(self) -> None:
        if not self._done and not self._fut.done():
            try:
                self._rt.loop.call_soon_threadsafe(self._fut.cancel)
            except RuntimeError:  # the loop is closed at exit
                pass
