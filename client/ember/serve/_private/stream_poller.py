"""The caller's side of per-replica stream polling (the replica's side is streams.StreamMux).

A caller (the HTTP proxy, or the handle runtime of any process: a driver, or a deployment that
calls another one with `handle.options(stream=True)`) keeps one StreamPoller per replica it has
streams open on. The poller keeps one `ServeReplica.stream_poll(group)` call in flight while at
least one of those streams is open; each reply carries what every stream of the group produced
since the previous one, and the poller hands each stream its part through the stream's Inbox.
So a round trip's cost is shared by every chunk of every stream that became ready while the
previous one was in flight; a chunk is never held back (a waiting poll answers as soon as one
stream has something).

Order of a request: `expect(id)` before the call that opens the stream (a poll in flight may bring
its first chunks before that call's reply), `start(id)` once the reply said the stream is open,
`close(id)` when the caller is done with it (chunks for an unknown id belong to a stream already
closed and are dropped). Used on one event loop.

Callers use a ChannelPoller: the same interface, fed by a direct socket on which the replica
pushes its chunks (stream_channel.py), with actor-call polling only when the replica offers no
channel (mutual TLS on) or its channel cannot be reached from here.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

from . import stream_channel
from .streams import FETCH_ERROR

log = logging.getLogger(__name__)
__all__ = ["FETCH_ERROR", "ChannelPoller", "Inbox", "StreamPoller"]
_groups = itertools.count()


class Inbox:
    """What one stream's poller delivered and its consumer has not taken yet."""

    __slots__ = ("poller", "items", "_waiter")

    def __init__(self, poller: StreamPoller) -> None:
        self.poller = poller
        self.items: list[tuple[Any, bool, str | None]] = []
        self._waiter: asyncio.Future[None] | None = None

    def put(self, data: Any, done: bool, error: str | None) -> None:
        self.items.append((data, done, error))
        f, self._waiter = self._waiter, None
        if f is not None and not f.done():
            f.set_result(None)

    def wait(self) -> asyncio.Future[None]:
        """A future done at the next put or wake() (or now, when something is already here)."""
        self._waiter = f = asyncio.get_running_loop().create_future()
        if self.items:
            f.set_result(None)
        return f

    def wake(self, _: object = None) -> None:
        """Ends a wait() with nothing put (e.g. the consumer's client went away); usable as a
        future's done-callback."""
        f, self._waiter = self._waiter, None
        if f is not None and not f.done():
            f.set_result(None)

    def take(self) -> tuple[bytes, bool, str | None]:
        """Everything delivered to an HTTP stream, joined: (bytes, done, error)."""
        items, self.items = self.items, []
        if len(items) == 1:  # the usual case: one chunk per wake-up
            return items[0]
        data = b"".join(d for d, _, _ in items)
        return data, items[-1][1], next((e for _, _, e in items if e is not None), None)

    def take_items(self) -> tuple[list[Any], bool, str | None]:
        """Everything delivered to a handle stream: (items in order, done, error)."""
        parts, self.items = self.items, []
        if len(parts) == 1:
            return parts[0]
        out: list[Any] = []
        for d, _, _ in parts:
            out.extend(d)
        return out, parts[-1][1], next((e for _, _, e in parts if e is not None), None)


class StreamPoller:
    """Pulls every open stream of this caller on one replica with one stream_poll(group) call in
    flight at a time; runs while at least one stream is open, and leaves `registry` (the
    caller's pollers by replica key) when it stops with no stream left."""

    def __init__(self, h: Any, key: str, group: str, registry: dict[str, StreamPoller]) -> None:
        self.h, self.key, self.group, self.registry = h, key, group, registry
        self.inboxes: dict[str, Inbox] = {}
        self.streaming: set[str] = set()  # inboxes whose stream is open (the others wait for a reply)
        self._task: asyncio.Future[None] | None = None

    @classmethod
    def of(cls, registry: dict[str, StreamPoller], key: str, h: Any, group: str) -> StreamPoller:
        """The poller of replica `key` in registry (made when there is none)."""
        p = registry.get(key)
        if p is None:
            p = registry[key] = cls(h, key, group, registry)
        return p

    def expect(self, stream_id: str) -> Inbox:
        inbox = self.inboxes[stream_id] = Inbox(self)
        return inbox

    def start(self, stream_id: str) -> None:
        """stream_id is open on the replica: poll (if not already)."""
        self.streaming.add(stream_id)
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    def close(self, stream_id: str) -> None:
        self.inboxes.pop(stream_id, None)
        self.streaming.discard(stream_id)
        if not self.inboxes and self._task is None and self.registry.get(self.key) is self:
            del self.registry[self.key]

    async def _run(self) -> None:
        try:
            while self.streaming:
                try:
                    batch = await self.h.stream_poll.remote(self.group)
                except Exception as e:  # the replica died (or the call failed): every stream ends
                    for inbox in list(self.inboxes.values()):
                        inbox.put(b"", True, f"{type(e).__name__}: {e}")
                    self.inboxes.clear()
                    self.streaming.clear()
                    return
                for sid, data, done, error in batch:
                    box = self.inboxes.get(sid)
                    if box is not None:
                        box.put(data, done, error)
                        if done or error is not None:
                            self.streaming.discard(sid)
        finally:
            self._task = None
            if not self.inboxes and self.registry.get(self.key) is self:
                del self.registry[self.key]


class ChannelPoller(StreamPoller):
    """A StreamPoller fed by a direct socket to the replica (stream_channel.py):
    the replica pushes every chunk of this caller's streams as it is produced, with no call per
    batch. One connection per caller process and replica, opened at the first stream (one
    `stream_channel()` actor call) and kept while it is up, so the poller stays in the registry;
    the connection's loss ends every stream it carried. A replica that offers no channel (mutual
    TLS on) or cannot be reached that way is polled with stream_poll calls as StreamPoller does.
    Its group is unique to this poller (the replica's streams of a lost connection are closed)."""

    def __init__(self, h: Any, key: str, group: str, registry: dict[str, StreamPoller]) -> None:
        super().__init__(h, key, f"{group}c{next(_groups)}", registry)
        self._conn: stream_channel.ChannelClient | None = None
        self._fallback = False
        self._ready: asyncio.Future[bool] = asyncio.ensure_future(self._connect())

    @property
    def connected(self) -> bool:
        return self._conn is not None

    async def _connect(self) -> bool:
        try:
            info = await self.h.stream_channel.remote()
            if info is not None:
                host, port, secret = info
                self._conn = await stream_channel.connect(host, port, secret, self.group,
                                                          self._deliver, self._lost)
                return True
        except Exception as e:  # the replica died, or its port is not reachable from here
            log.info("no stream channel to replica %s (%r): polling it with actor calls", self.key, e)
        self._fallback = True
        if not self.inboxes and self._task is None and self.registry.get(self.key) is self:
            del self.registry[self.key]
        return False

    def start(self, stream_id: str) -> None:
        self.streaming.add(stream_id)
        if self._conn is None and self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        if not await asyncio.shield(self._ready):
            return await super()._run()
        self._task = None  # connected meanwhile: the connection delivers

    def close(self, stream_id: str) -> None:
        if self._fallback:
            return super().close(stream_id)
        self.inboxes.pop(stream_id, None)
        self.streaming.discard(stream_id)

    def shutdown(self) -> None:
        """Closes the connection (the replica then ends this caller's streams there)."""
        if self._conn is not None:
            self._conn.close()

    def _deliver(self, entries: list[stream_channel.Entry]) -> None:
        inboxes = self.inboxes
        for sid, data, done, error in entries:
            box = inboxes.get(sid)
            if box is not None:
                box.put(data, done, error)
                if done:
                    self.streaming.discard(sid)

    def _lost(self, exc: BaseException | None) -> None:
        self._conn = None
        if self.registry.get(self.key) is self:
            del self.registry[self.key]
        why = f"the stream channel to replica {self.key} closed" + (f": {exc!r}" if exc else "")
        for inbox in list(self.inboxes.values()):
            inbox.put(b"", True, why)
        self.inboxes.clear()
        self.streaming.clear()
