"""Waits on every task in flight at once, from the executor's thread.

A streaming task (a map task, the map actor's run) is an ObjectRefGenerator that yields
(metadata, block) pairs; any other task is watched through its last return. `ember.wait` takes
ObjectRefs only, so the waiter runs a private asyncio loop in the executor's thread: one
coroutine per task in flight awaits its next event (`async for` over the generator, `await` on
the ref — Ray's public async API), and `wait(timeout)` runs the loop until some are done.
"""
from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Coroutine


@dataclasses.dataclass
class Event:
    """What happened to one task in flight.

    kind: "block" (payload: (metadata, block ref, metadata ref)), "end" (the stream is over),
    "value" (payload: the value of a plain task's last return) or "error" (payload: the
    exception, with the user's type)."""

    key: int  # the key the task was watched under (the executor numbers its tasks)
    kind: str
    payload: Any = None


async def _next_pair(gen: Any) -> tuple[str, Any]:
    try:
        meta_ref = await gen.__anext__()
    except StopAsyncIteration:
        return "end", None
    meta = await meta_ref
    try:
        block_ref = await gen.__anext__()
    except StopAsyncIteration:
        raise RuntimeError("a Data task's stream ended between a block's metadata and the "
                           "block") from None
    return "block", (meta, block_ref, meta_ref)


async def _value(ref: Any) -> tuple[str, Any]:
    return "value", await ref


class Waiter:
    """Watches streams and refs; `wait` returns the events of those that are ready."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._tasks: dict[asyncio.Task[tuple[str, Any]], int] = {}
        self._by_key: dict[int, asyncio.Task[tuple[str, Any]]] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    def watch_stream(self, key: int, gen: Any) -> None:
        """Waits for the next (metadata, block) of gen, or its end."""
        self._watch(key, _next_pair(gen))

    def watch_value(self, key: int, ref: Any) -> None:
        """Waits for ref's value."""
        self._watch(key, _value(ref))

    def _watch(self, key: int, coro: Coroutine[Any, Any, tuple[str, Any]]) -> None:
        t = self.loop.create_task(coro)
        self._tasks[t] = key
        self._by_key[key] = t

    def wait(self, timeout: float) -> list[Event]:
        """Runs the loop until at least one watched task has an event (or timeout); returns all
        events ready by then. A key yields one event per watch."""
        if not self._tasks:
            return []
        done, _ = self.loop.run_until_complete(
            asyncio.wait(list(self._tasks), timeout=timeout, return_when=asyncio.FIRST_COMPLETED))
        events = []
        for t in done:
            key = self._tasks.pop(t)
            self._by_key.pop(key, None)
            try:
                kind, payload = t.result()
            except BaseException as e:  # noqa: BLE001 - the task's error, handed to the executor
                kind, payload = "error", e
            events.append(Event(key, kind, payload))
        return events

    def forget(self, key: int) -> None:
        """Stops watching key."""
        t = self._by_key.pop(key, None)
        if t is not None:
            self._tasks.pop(t, None)
            t.cancel()

    def close(self) -> None:
        """Cancels every watch and closes the loop."""
        tasks = list(self._tasks)
        self._tasks.clear()
        self._by_key.clear()
        for t in tasks:
            t.cancel()
        if tasks:
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self.loop.close()
