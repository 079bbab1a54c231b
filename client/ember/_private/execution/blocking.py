"""A worker's waits in get()/wait() and the CPUs they lend (as Ray: a blocked worker's CPUs go
to other tasks, so nested tasks cannot deadlock), with Ember's stricter bound: `num_cpus`
always holds for tasks that run.

- Lend only when the worker really waits: the get/wait path calls `run` only for objects that
  are not ready (owned ones not stored yet; borrowed ones whose owner said "not ready" to a
  no-wait ask), so a get of an object that is ready lends nothing.
- Take the CPUs back before continuing: the unblock call to the raylet returns only once they
  are this worker's again (the raylet may make it wait until other leases end or block), and
  the get()/wait() returns only then.
- In order: nested waits (threads of an actor) count as one; an unblock is sent only after the
  block before it was answered, so it never overtakes it.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from typing import Awaitable, Callable, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
# A wait's hook: it is handed the callable that ends that wait early (a cancel calls it).
OnWait = Callable[[Callable[[], None]], None]


class BlockedWaits:
    """Runs a worker's blocking waits and tells its raylet when it blocks and resumes."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 notify: Callable[[bool], Awaitable[None]]) -> None:
        self._loop = loop
        self._notify = notify  # sends NotifyWorkerBlocked(blocked) (on the loop)
        self._lock = threading.Lock()
        self._depth = 0
        self._last: concurrent.futures.Future[None] | None = None

    def run(self, coro: Awaitable[T] | None, fn: Callable[[], T] | None = None) -> T:
        """User thread: waits for coro on the loop, or runs fn here, with the CPUs lent."""
        if fn is None:
            assert coro is not None
            fn = asyncio.run_coroutine_threadsafe(_awaited(coro), self._loop).result
        self._set(True)
        try:
            return fn()
        finally:
            self._set(False)

    def _set(self, blocked: bool) -> None:
        with self._lock:
            self._depth += 1 if blocked else -1
            if self._depth != (1 if blocked else 0):
                return  # another thread of this worker still waits (or already did)
            prev = None if blocked else self._last
            call = self._last = asyncio.run_coroutine_threadsafe(self._send(prev, blocked),
                                                                 self._loop)
        if not blocked:
            call.result()  # continue only once the raylet gave the CPUs back

    async def _send(self, prev: concurrent.futures.Future[None] | None, blocked: bool) -> None:
        if prev is not None:
            await asyncio.wrap_future(prev)
        try:
            await self._notify(blocked)
        except Exception as e:  # noqa: BLE001 - the raylet is gone: nothing to lend or take
            log.debug("NotifyWorkerBlocked(%s) failed: %s", blocked, e)


async def _awaited(aw: Awaitable[T]) -> T:
    return await aw
