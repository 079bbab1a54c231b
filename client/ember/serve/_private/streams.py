"""Streamed replies leave a replica in batches that the caller pulls.

A StreamPump drains the user's (async) iterator into a buffer as fast as it produces; the caller
(the proxy for HTTP, the handle runtime for `handle.options(stream=True)`) pulls with
`ServeReplica.stream_next(stream_id)`, which returns every item produced since its previous pull
and waits only when there is none. So a chunk is never held back (a pull that is already waiting
gets the first item at once), and chunks are coalesced only when they would otherwise queue
behind a pull still in flight: under load each round trip carries more items instead of the
backlog growing. One pull is in flight per stream at a time, which is also the back-pressure: a
pump stops reading its iterator while `max_buffered` items wait, and gives up (closing the
iterator) when nobody pulls for `idle_timeout_s`.

The proxy does not pull each stream by itself: a StreamMux groups every HTTP stream one proxy
has open on this replica, and one `ServeReplica.stream_poll(group)` call (one in flight per
proxy and replica) returns what every stream of the group produced since the previous poll. A
pull still waits only when nothing is ready and returns as soon as one item is, so no chunk is
held back; but the round trip (an actor call, two thread hops on each side) is shared by all the
chunks and streams that became ready while the previous one was in flight, instead of one call
per chunk per stream. Streamed handle calls (`handle.options(stream=True)`) from one caller
process share that caller's poll the same way; their items travel as lists of objects (HTTP
bodies as joined bytes), and a user error is fetched by the caller with stream_next(id), which
raises it through the actor call (streams of a group are joined bytes or item lists, per stream).

A pump may convert each item it reads or is pushed (an HTTP body's items become bytes there: no
generator layer around the user's for that). A push source skips the pump's task: an iterator
with `_ember_attach(put, end)` and `_ember_detach()` is attached instead of iterated. It calls
put(item) on the loop for each item and end(None) (or end(error)) once after the last, so a
producer that serves many streams from one callback (the LLM engine's per-step hand-off, the
LLM server's SSEStream) fills every stream's buffer without waking a task per item. A streamed
handle call's DeploymentResponseGenerator is one too: its batches are put on the loop as they
arrive, so a deployment that relays another's stream as its HTTP body (the OpenAI ingress)
takes no generator step per item. `close()` detaches it (it stops calling and frees what it
holds). A push source bounds what it produces itself (the pump cannot make it wait: the LLM's
is bounded by max_tokens, a relayed stream by its producer), and no idle timeout applies.
"""
from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, AsyncIterator, Callable

log = logging.getLogger(__name__)

# What a poll says for a handle stream whose user code raised: fetch the error with stream_next.
FETCH_ERROR = "\x00fetch"


class StreamPump:
    """Reads one async iterator on the running loop into a buffer; `take()` hands out batches."""

    def __init__(self, it: AsyncIterator[Any], *, max_buffered: int = 4096, idle_timeout_s: float = 120.0,
                 convert: Callable[[Any], Any] | None = None) -> None:
        self._it = it
        self._convert = convert  # applied to each item read (an HTTP body's: to bytes)
        self._items: list[Any] = []
        self._done = False
        self._error: BaseException | None = None
        self._max = max_buffered
        self._idle_timeout_s = idle_timeout_s
        self._ready: asyncio.Future[bool] | None = None   # a take() waiting for an item
        self._space: asyncio.Future[None] | None = None   # the reader waiting for room
        self.listener: Callable[[], None] | None = None  # called when items or the end arrive
        self._source: Any = None
        self._task: asyncio.Future[None] | None = None
        attach = getattr(it, "_ember_attach", None)
        if attach is not None:  # a push source (see the module docstring): no task, no await per item
            self._source = it
            attach(self._push, self._push_end)
        else:
            self._task = asyncio.ensure_future(self._run())

    def _push(self, item: Any) -> None:
        if not self._done:
            self._items.append(item if self._convert is None else self._convert(item))
            self._wake()

    def _push_end(self, error: BaseException | None) -> None:
        if not self._done:
            self._error = error
            self._done = True
            self._wake()

    async def _run(self) -> None:
        convert = self._convert
        try:
            async for x in self._it:
                self._items.append(x if convert is None else convert(x))
                self._wake()
                while len(self._items) >= self._max:
                    self._space = asyncio.get_running_loop().create_future()
                    try:
                        await asyncio.wait_for(self._space, self._idle_timeout_s)
                    except asyncio.TimeoutError:
                        raise TimeoutError(f"nobody pulled this stream for {self._idle_timeout_s} s") from None
        except asyncio.CancelledError:
            self._error = self._error or asyncio.CancelledError()
        except BaseException as e:  # the user's code failed: the caller gets it after the items before it
            self._error = e
        finally:
            self._done = True
            self._wake()
            await _aclose(self._it)

    def _wake(self) -> None:
        f, self._ready = self._ready, None
        if f is not None and not f.done():
            f.set_result(True)
        if self.listener is not None:
            self.listener()

    @property
    def ready(self) -> bool:
        """take_ready() would return something now (items, the end, or an error)."""
        return bool(self._items) or self._done

    @property
    def done(self) -> bool:
        """The iterator ended (or failed) and every item was taken."""
        return self._done and not self._items

    async def take(self, timeout_s: float | None = None) -> tuple[list[Any], bool]:
        """(items produced since the previous take, whether the stream is over). Waits for at
        least one item or the end (at most timeout_s: then ([], False)); raises the iterator's
        error once the items before it were taken."""
        if not self._items and not self._done:
            self._ready = f = asyncio.get_running_loop().create_future()
            if not await _wait(f, timeout_s):
                return [], False
        return self.take_ready()

    def take_ready(self) -> tuple[list[Any], bool]:
        """take() without waiting: ([], False) when nothing is ready."""
        items, self._items = self._items, []
        s, self._space = self._space, None
        if s is not None and not s.done():
            s.set_result(None)
        if not items and self._error is not None and not isinstance(self._error, asyncio.CancelledError):
            raise self._error
        return items, self._done and not self._items and (self._error is None or not items)

    def close(self) -> None:
        """Stops reading (the client went away): the iterator is closed (a push source is
        detached)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        elif self._source is not None and not self._done:
            self._source._ember_detach()
        self._done = True
        self._items = []
        self._wake()


class StreamMux:
    """The open streams of one caller (a proxy, a handle runtime) on this replica; `poll()`
    returns what any of them has ready, waiting while none has; `take_ready()` the same without
    waiting, for a stream channel, whose `notify` is called each time a stream becomes ready.
    Loop thread only."""

    def __init__(self, notify: Callable[[], None] | None = None) -> None:
        self._pumps: dict[str, StreamPump] = {}
        self._raw: set[str] = set()  # handle streams: items as a list, errors fetched by stream_next
        self._ready: dict[str, None] = {}  # stream ids with something to take (ordered)
        self._waiter: asyncio.Future[bool] | None = None
        self.notify = notify

    def __len__(self) -> int:
        return len(self._pumps)

    def add(self, stream_id: str, pump: StreamPump, *, join: bool = True) -> None:
        """join: an HTTP body (bytes, joined); else a handle stream's items (a list)."""
        self._pumps[stream_id] = pump
        if not join:
            self._raw.add(stream_id)
        pump.listener = functools.partial(self._mark, stream_id)  # (C: no Python frame per item)
        if pump.ready:
            self._mark(stream_id)

    def ids(self) -> list[str]:
        """The streams of this caller open now."""
        return list(self._pumps)

    def remove(self, stream_id: str) -> None:
        pump = self._pumps.pop(stream_id, None)
        if pump is not None:
            pump.listener = None
        self._ready.pop(stream_id, None)
        self._raw.discard(stream_id)

    def _mark(self, stream_id: str) -> None:
        self._ready[stream_id] = None
        f, self._waiter = self._waiter, None
        if f is not None and not f.done():
            f.set_result(True)
        if self.notify is not None:
            self.notify()

    async def poll(self, timeout_s: float) -> list[tuple[str, Any, bool, str | None]]:
        """(stream_id, what it produced, done, error) for every stream with something ready;
        waits (at most timeout_s, then []) while none has. What it produced: an HTTP stream's
        items joined into bytes, a handle stream's items as a list. A stream that is done or
        failed is removed (error, after the items before it: "Type: message" of the user's
        exception for an HTTP stream; streams.FETCH_ERROR for a handle stream, whose caller
        fetches the exception itself with stream_next)."""
        if not self._ready:
            self._waiter = f = asyncio.get_running_loop().create_future()
            if not await _wait(f, timeout_s):
                return []
        return self.take_ready()

    def take_ready(self) -> list[tuple[str, Any, bool, str | None]]:
        """poll() without waiting: [] when nothing is ready."""
        out: list[tuple[str, Any, bool, str | None]] = []
        ready, self._ready = self._ready, {}
        for sid in ready:
            pump = self._pumps.get(sid)
            if pump is None:
                continue
            raw = sid in self._raw
            while pump.ready:  # twice when items came before an error: the items, then it
                try:
                    items, done = pump.take_ready()
                except Exception as e:
                    if raw:  # the pump keeps the error for stream_next
                        out.append((sid, [], False, FETCH_ERROR))
                    else:
                        out.append((sid, b"", True, f"{type(e).__name__}: {e}"))
                    done = True
                else:
                    if items or done:
                        out.append((sid, items if raw else _join(items), done, None))
                if done:
                    self.remove(sid)
                    break
        return out


async def _wait(f: asyncio.Future[bool], timeout_s: float | None) -> bool:
    """Waits for f (set to True by a wake) at most timeout_s: False on the timeout. One timer
    handle, no wait_for/shield tasks and callbacks (a pump's first take and every poll)."""
    h = None if timeout_s is None else asyncio.get_running_loop().call_later(timeout_s, _expire, f)
    try:
        return bool(await f)
    finally:
        if h is not None:
            h.cancel()


def _expire(f: asyncio.Future[bool]) -> None:
    if not f.done():
        f.set_result(False)


def _join(items: list[Any]) -> bytes:
    return items[0] if len(items) == 1 and isinstance(items[0], bytes) else b"".join(items)


async def _aclose(it: Any) -> None:
    aclose = getattr(it, "aclose", None)
    if aclose is not None:
        try:
            await aclose()
        except BaseException as e:  # closing a generator that is mid-await, or that raises on close
            log.debug("closing a stream: %r", e)


def aiter_any(it: Any) -> AsyncIterator[Any]:
    """An async iterator over a sync or async iterable (a sync generator yields to the loop
    between items). An async one is returned as it is: one generator layer less per item."""
    if hasattr(it, "__aiter__"):
        return it  # type: ignore[no-any-return]
    return _aiter_sync(it)


async def _aiter_sync(it: Any) -> AsyncIterator[Any]:
    try:
        for x in it:
            yield x
            await asyncio.sleep(0)
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
