"""A first-in, first-out queue shared by tasks and actors (Ray's `ray.util.queue`).

    from ember.util.queue import Queue, Empty, Full

    q = Queue(maxsize=100)
    q.put(item)               # blocks while full (block=False / timeout= raise Full)
    q.get(timeout=1.0)        # blocks while empty (raises Empty on timeout)

The items live in one async actor (`_QueueActor`); a `Queue` object is a thin handle to it that
can be passed to tasks and actors. Order is FIFO across every producer and consumer because the
actor serves each call on its own event loop. `shutdown()` kills the actor.
"""
from __future__ import annotations

import asyncio
import queue as _stdlib_queue
from typing import Any, Iterable

import ember


class Empty(_stdlib_queue.Empty):
    """Raised by get on an empty queue (non-blocking or after the timeout)."""


class Full(_stdlib_queue.Full):
    """Raised by put on a full queue (non-blocking or after the timeout)."""


class _QueueActor:
    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self.queue: asyncio.Queue[Any] = asyncio.Queue(maxsize)

    def qsize(self) -> int:
        return self.queue.qsize()

    def empty(self) -> bool:
        return self.queue.empty()

    def full(self) -> bool:
        return self.queue.full()

    async def put(self, item: Any, timeout: float | None = None) -> None:
        try:
            await asyncio.wait_for(self.queue.put(item), timeout)
        except asyncio.TimeoutError:
            raise Full from None

    async def get(self, timeout: float | None = None) -> Any:
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except asyncio.TimeoutError:
            raise Empty from None

    def put_nowait(self, item: Any) -> None:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            raise Full from None

    def put_nowait_batch(self, items: list[Any]) -> None:
        if self.maxsize > 0 and len(items) + self.queue.qsize() > self.maxsize:
            raise Full(f"cannot add {len(items)} items to a queue of size {self.queue.qsize()} "
                       f"and maxsize {self.maxsize}")
        for item in items:
            self.queue.put_nowait(item)

    def get_nowait(self) -> Any:
        try:
            return self.queue.get_nowait()
        except asyncio.QueueEmpty:
            raise Empty from None

    def get_nowait_batch(self, num_items: int) -> list[Any]:
        if num_items > self.queue.qsize():
            raise Empty(f"cannot get {num_items} items from a queue of size {self.queue.qsize()}")
        return [self.queue.get_nowait() for _ in range(num_items)]


def _check_timeout(timeout: float | None) -> None:
    if timeout is not None and timeout < 0:
        raise ValueError("'timeout' must be a non-negative number")


class Queue:
    """A FIFO queue backed by an actor; `maxsize <= 0` means unbounded. `actor_options` are
    passed to the actor (e.g. `{"num_cpus": 0, "name": ...}`)."""

    def __init__(self, maxsize: int = 0, actor_options: dict[str, Any] | None = None) -> None:
        if not isinstance(maxsize, int):
            raise TypeError(f"maxsize must be an int, got {type(maxsize).__name__}")
        options = {"num_cpus": 0, **(actor_options or {})}
        self.maxsize = maxsize
        self.actor = ember.remote(_QueueActor).options(**options).remote(maxsize)

    def __len__(self) -> int:
        return self.size()

    def size(self) -> int:
        """The number of items in the queue."""
        n: int = ember.get(self.actor.qsize.remote())
        return n

    def qsize(self) -> int:
        return self.size()

    def empty(self) -> bool:
        empty: bool = ember.get(self.actor.empty.remote())
        return empty

    def full(self) -> bool:
        full: bool = ember.get(self.actor.full.remote())
        return full

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """Adds an item; with block, waits up to `timeout` seconds (forever when None) for room,
        else raises Full at once when there is none."""
        if not block:
            ember.get(self.actor.put_nowait.remote(item))
            return
        _check_timeout(timeout)
        ember.get(self.actor.put.remote(item, timeout))

    async def put_async(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """put() for async callers."""
        if not block:
            await self.actor.put_nowait.remote(item)
            return
        _check_timeout(timeout)
        await self.actor.put.remote(item, timeout)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """Removes and returns the oldest item; with block, waits up to `timeout` seconds (forever
        when None), else raises Empty at once when there is none."""
        if not block:
            return ember.get(self.actor.get_nowait.remote())
        _check_timeout(timeout)
        return ember.get(self.actor.get.remote(timeout))

    async def get_async(self, block: bool = True, timeout: float | None = None) -> Any:
        """get() for async callers."""
        if not block:
            return await self.actor.get_nowait.remote()
        _check_timeout(timeout)
        return await self.actor.get.remote(timeout)

    def put_nowait(self, item: Any) -> None:
        self.put(item, block=False)

    def put_nowait_batch(self, items: Iterable[Any]) -> None:
        """Adds all items at once, or none (Full) when they do not all fit."""
        if not isinstance(items, Iterable):
            raise TypeError("put_nowait_batch expects an iterable of items")
        ember.get(self.actor.put_nowait_batch.remote(list(items)))

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def get_nowait_batch(self, num_items: int) -> list[Any]:
        """Removes and returns `num_items` items at once, or none (Empty) when fewer are queued."""
        if not isinstance(num_items, int) or num_items < 0:
            raise ValueError("'num_items' must be a non-negative int")
        items: list[Any] = ember.get(self.actor.get_nowait_batch.remote(num_items))
        return items

    def shutdown(self, force: bool = False, grace_period_s: int = 5) -> None:
        """Terminates the queue's actor; the queue is unusable afterwards."""
        if self.actor is not None:
            ember.kill(self.actor)
        self.actor = None
