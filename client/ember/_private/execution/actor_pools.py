"""Worker side of an actor's concurrency: its concurrency groups and the cancellation of its calls.

Concurrency groups (Ray's `concurrency_groups={"io": 2}`): every call carries its group
(TaskSpec.concurrency_group, "" for the default one). A threaded actor has one `ThreadPool` per
named group, and one for the default group when `max_concurrency` > 1 (otherwise default calls
run on the main thread, one at a time); threads start on demand up to the group's size. An
async actor has one semaphore per group on its event loop (`async_limits`). A saturated group
never holds up another one.

Cancellation (`CallCancels`): a call that has not started when its caller cancels it is
answered with TaskCancelledError instead of running; a running call of an async actor has its
coroutine cancelled (`asyncio.CancelledError` inside it); a running sync call runs to its end
(Ray's rule: actors have state) and is then answered with TaskCancelledError (as Ray's `get`
of a cancelled call). A cancel may overtake its call (they travel on different RPCs): it is
remembered, boundedly, until the call arrives.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import queue
import threading
from typing import Any, Callable

from ember_common.proto import common_pb2

# Cancels of calls not (yet) seen here, kept until their call arrives; the oldest go first.
MAX_EARLY_CANCELS = 4096


class ThreadPool:
    """The threads of one concurrency group of a threaded actor: `run(item)` runs a call on
    one of at most `size` threads, started only as calls pile up (for short calls one or two
    threads do the work, and fewer threads fight over the GIL)."""

    def __init__(self, name: str, size: int, run: Callable[[Any], None]) -> None:
        self.name = name
        self.size = size
        self._run = run
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0  # started so far
        self._idle = 0
        self._waiting = 0  # calls put but not yet taken by a thread

    def put(self, item: Any) -> None:
        """Queues a call (any thread); starts a thread if every started one is busy."""
        with self._lock:
            self._waiting += 1
            start = self._waiting > self._idle and self._threads < self.size
            if start:
                self._threads += 1
                self._idle += 1
        self._queue.put(item)
        if start:
            label = f"-{self.name}" if self.name else ""
            threading.Thread(target=self._thread, daemon=True,
                             name=f"ember-actor{label}-{self._threads}").start()

    def _thread(self) -> None:
        while True:
            item = self._queue.get()
            with self._lock:
                self._idle -= 1
                self._waiting -= 1
            try:
                self._run(item)
            finally:
                with self._lock:
                    self._idle += 1


def thread_pools(c: common_pb2.ActorCreationSpec, run: Callable[[Any], None]) -> dict[str, ThreadPool]:
    """The pools of a threaded actor by group ("" = default, only when max_concurrency > 1)."""
    pools = {name: ThreadPool(name, size, run) for name, size in c.concurrency_groups.items()}
    if c.max_concurrency > 1:
        pools[""] = ThreadPool("", c.max_concurrency, run)
    return pools


def async_limits(c: common_pb2.ActorCreationSpec) -> dict[str, asyncio.Semaphore]:
    """The concurrency limits of an async actor by group ("" = default: max_concurrency)."""
    limits = {name: asyncio.Semaphore(size) for name, size in c.concurrency_groups.items()}
    limits[""] = asyncio.Semaphore(c.max_concurrency or 1000)
    return limits


def unknown_group(spec: common_pb2.TaskSpec, c: common_pb2.ActorCreationSpec) -> ValueError:
    """The error of a call to a group the actor does not have (callers check this first)."""
    return ValueError(f"{spec.name}: the actor has no concurrency group "
                      f"{spec.concurrency_group!r} (its groups: {sorted(c.concurrency_groups)})")


class CallCancels:
    """Which actor calls were cancelled before they started, and the running async calls that
    a cancel can reach. Thread-safe: cancels arrive on the core loop, calls start on the main
    thread, pool threads or the core loop."""

    def __init__(self, max_early: int = MAX_EARLY_CANCELS) -> None:
        self._lock = threading.Lock()
        self._queued: set[bytes] = set()  # arrived, not started
        self._cancelled: set[bytes] = set()  # arrived and cancelled before they started
        self._active: set[bytes] = set()  # started, not finished
        self._cancelled_active: set[bytes] = set()  # cancelled while running (sync)
        self._running: dict[bytes, concurrent.futures.Future[Any] | asyncio.Future[Any]] = {}  # async, running
        self._early: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._max_early = max_early

    def arrived(self, task_id: bytes) -> None:
        """A call reached the worker (before it is put in its caller's order)."""
        with self._lock:
            self._queued.add(task_id)
            if task_id in self._early:  # its cancel came first
                del self._early[task_id]
                self._cancelled.add(task_id)

    def start(self, task_id: bytes) -> bool:
        """The call is about to run: False if it was cancelled (answer TaskCancelledError)."""
        with self._lock:
            self._queued.discard(task_id)
            if task_id in self._cancelled:
                self._cancelled.discard(task_id)
                return False
            self._active.add(task_id)
            return True

    def running(self, task_id: bytes, fut: concurrent.futures.Future[Any] | asyncio.Future[Any]) -> None:
        """An async call's coroutine runs behind fut (cancelling fut cancels it)."""
        with self._lock:
            self._running[task_id] = fut

    def finished(self, task_id: bytes) -> bool:
        """A started call is over: True if it was cancelled while it ran (its reply becomes
        TaskCancelledError)."""
        with self._lock:
            self._running.pop(task_id, None)
            self._active.discard(task_id)
            if task_id in self._cancelled_active:
                self._cancelled_active.discard(task_id)
                return True
            return False

    def cancel(self, task_id: bytes) -> bool:
        """The caller cancels a call: True if it was queued here (it will not run), running
        async (its coroutine is cancelled) or running sync (its reply will say cancelled);
        otherwise it is remembered in case the call has not arrived yet, and False."""
        with self._lock:
            fut = self._running.get(task_id)
            if fut is None:
                if task_id in self._queued:
                    self._cancelled.add(task_id)
                    return True
                if task_id in self._active:
                    self._cancelled_active.add(task_id)
                    return True
                self._early[task_id] = None
                while len(self._early) > self._max_early:
                    self._early.popitem(last=False)
                return False
        fut.cancel()
        return True
