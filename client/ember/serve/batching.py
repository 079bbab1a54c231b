"""@serve.batch: calls of an async method are gathered into lists (up to max_batch_size, or
whatever arrived within batch_wait_timeout_s), the method runs once per list and each caller
gets its own element of the returned list."""
from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

# One queued call: its item and the future its caller awaits.
_Pending = tuple[Any, asyncio.Future[Any]]


class _Batcher:
    def __init__(self, fn: Callable[..., Awaitable[Any]], max_batch_size: int, timeout_s: float,
                 max_concurrent: int = 1, size_fn: Callable[[list[Any]], int] | None = None) -> None:
        self.fn = fn
        self.max = max_batch_size
        self.timeout_s = timeout_s
        self.max_concurrent = max_concurrent
        self.size_fn = size_fn
        self.queue: asyncio.Queue[_Pending] | None = None
        self.task: asyncio.Task[None] | None = None
        self.carry: _Pending | None = None  # taken, but it did not fit the last batch
        self.running: set[asyncio.Task[None]] = set()

    async def submit(self, self_arg: Any, item: Any) -> Any:
        if self.queue is None:
            self.queue = asyncio.Queue()
            self.task = asyncio.ensure_future(self._loop(self_arg))
        fut = asyncio.get_running_loop().create_future()
        await self.queue.put((item, fut))
        return await fut

    def _size(self, batch: list[_Pending]) -> int:
        items = [b[0] for b in batch]
        return len(items) if self.size_fn is None else int(self.size_fn(items))

    async def _next_batch(self) -> list[_Pending]:
        """Up to max_batch_size requests (by batch_size_fn when given), or what came within the
        wait timeout after the first. A request that would overflow a batch starts the next one
        (one alone that is bigger than max_batch_size runs alone)."""
        assert self.queue is not None
        loop = asyncio.get_running_loop()
        if self.carry is not None:
            batch, self.carry = [self.carry], None
        else:
            batch = [await self.queue.get()]
        deadline = loop.time() + self.timeout_s
        while self._size(batch) < self.max:
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                nxt = await asyncio.wait_for(self.queue.get(), left)
            except asyncio.TimeoutError:
                break
            if self.size_fn is not None and self._size(batch + [nxt]) > self.max:
                self.carry = nxt
                break
            batch.append(nxt)
        return batch

    async def _loop(self, self_arg: Any) -> None:
        """Forms batches and runs up to max_concurrent_batches of them at once; the next batch
        is formed when a slot is free, so requests arriving meanwhile join it."""
        slots = asyncio.Semaphore(self.max_concurrent)
        while True:
            await slots.acquire()
            try:
                batch = await self._next_batch()
            except BaseException:
                slots.release()
                raise
            t = asyncio.ensure_future(self._run(self_arg, batch))
            self.running.add(t)
            t.add_done_callback(functools.partial(self._finished, slots))

    def _finished(self, slots: asyncio.Semaphore, t: asyncio.Task[None]) -> None:
        self.running.discard(t)
        slots.release()

    async def _run(self, self_arg: Any, batch: list[_Pending]) -> None:
        items = [b[0] for b in batch]
        try:
            args = (self_arg, items) if self_arg is not None else (items,)
            results = await self.fn(*args)
            if not isinstance(results, (list, tuple)) or len(results) != len(items):
                raise TypeError(f"@serve.batch function {self.fn.__name__} must return a list of "
                                f"{len(items)} results (one per input), got {type(results).__name__}")
            for (_, f), r in zip(batch, results, strict=True):
                if not f.done():
                    f.set_result(r)
        except Exception as e:
            for _, f in batch:
                if not f.done():
                    f.set_exception(e)


def batch(_func: Callable[..., Awaitable[Any]] | None = None, /, max_batch_size: int = 10,
          batch_wait_timeout_s: float = 0.01, max_concurrent_batches: int = 1,
          batch_size_fn: Callable[[list[Any]], int] | None = None) -> Any:
    """`@serve.batch` or `@serve.batch(max_batch_size=8, batch_wait_timeout_s=0.05)` on an async
    method (or function) that takes a list and returns a list of the same length.
    max_concurrent_batches: how many batches may run at once (the method awaits, so a second
    batch can start while the first waits). batch_size_fn: a batch's size for max_batch_size
    (e.g. its total tokens) instead of its length."""
    if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or max_batch_size < 1:
        raise ValueError(f"max_batch_size must be an int >= 1, got {max_batch_size!r}")
    if isinstance(batch_wait_timeout_s, bool) or not isinstance(batch_wait_timeout_s, (int, float)) \
            or batch_wait_timeout_s < 0:
        raise ValueError(f"batch_wait_timeout_s must be a number >= 0, got {batch_wait_timeout_s!r}")
    if isinstance(max_concurrent_batches, bool) or not isinstance(max_concurrent_batches, int) \
            or max_concurrent_batches < 1:
        raise ValueError(f"max_concurrent_batches must be an int >= 1, got {max_concurrent_batches!r}")
    if batch_size_fn is not None and not callable(batch_size_fn):
        raise TypeError(f"batch_size_fn must be a callable, got {type(batch_size_fn).__name__}")

    def decorate(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"@serve.batch needs an async function, {fn.__name__} is not")
        params = list(inspect.signature(fn).parameters)
        is_method = bool(params) and params[0] == "self"
        attr = f"__serve_batcher_{fn.__name__}"

        def make() -> _Batcher:
            return _Batcher(fn, max_batch_size, batch_wait_timeout_s, max_concurrent_batches, batch_size_fn)

        @functools.wraps(fn)
        async def wrapper(*args: Any) -> Any:
            if is_method:
                self_arg, item = args
                home, key = self_arg.__dict__, attr  # one batcher per instance
            else:
                self_arg, (item,) = None, args
                home, key = wrapper.__dict__, "_batcher"
            b = home.get(key)
            if b is None:
                b = home[key] = make()
            return await b.submit(self_arg, item)

        return wrapper

    if _func is not None:
        return decorate(_func)
    return decorate
