"""@serve.batch: calls of an async method are gathered into lists (up to max_batch_size, or
whatever arrived within batch_wait_timeout_s), the method runs once per list and each caller
gets its own element of the returned list."""
from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any, Callable


class _Batcher:
    def __init__(self, fn: Callable, max_batch_size: int, timeout_s: float) -> None:
        self.fn = fn
        self.max = max_batch_size
        self.timeout_s = timeout_s
        self.queue: asyncio.Queue | None = None
        self.task: asyncio.Task | None = None

    async def submit(self, self_arg: Any, item: Any) -> Any:
        if self.queue is None:
            self.queue = asyncio.Queue()
            self.task = asyncio.ensure_future(self._loop(self_arg))
        fut = asyncio.get_running_loop().create_future()
        await self.queue.put((item, fut))
        return await fut

    async def _loop(self, self_arg: Any) -> None:
        assert self.queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self.queue.get()]
            deadline = loop.time() + self.timeout_s
            while len(batch) < self.max:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self.queue.get(), left))
                except asyncio.TimeoutError:
                    break
            items = [b[0] for b in batch]
            try:
                args = (self_arg, items) if self_arg is not None else (items,)
                results = await self.fn(*args)
                if not isinstance(results, (list, tuple)) or len(results) != len(items):
                    raise TypeError(f"@serve.batch function {self.fn.__name__} must return a list of "
                                    f"{len(items)} results (one per input), got {type(results).__name__}")
                for (_, f), r in zip(batch, results):
                    if not f.done():
                        f.set_result(r)
            except Exception as e:
                for _, f in batch:
                    if not f.done():
                        f.set_exception(e)


def batch(_func: Callable | None = None, *, max_batch_size: int = 10,
          batch_wait_timeout_s: float = 0.01, **_ignored: Any) -> Any:
    """`@serve.batch` or `@serve.batch(max_batch_size=8, batch_wait_timeout_s=0.05)` on an async
    method (or function) that takes a list and returns a list of the same length."""
    if not isinstance(max_batch_size, int) or max_batch_size < 1:
        raise ValueError(f"max_batch_size must be an int >= 1, got {max_batch_size!r}")
    if batch_wait_timeout_s < 0:
        raise ValueError(f"batch_wait_timeout_s must be >= 0, got {batch_wait_timeout_s!r}")

    def decorate(fn: Callable) -> Callable:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"@serve.batch needs an async function, {fn.__name__} is not")
        params = list(inspect.signature(fn).parameters)
        is_method = bool(params) and params[0] == "self"
        attr = f"__serve_batcher_{fn.__name__}"

        @functools.wraps(fn)
        async def wrapper(*args: Any) -> Any:
            if is_method:
                self_arg, item = args
                b = self_arg.__dict__.get(attr)
                if b is None:
                    b = _Batcher(fn, max_batch_size, batch_wait_timeout_s)
                    self_arg.__dict__[attr] = b
            else:
                self_arg, (item,) = None, args
                b = wrapper.__dict__.setdefault("_batcher", _Batcher(fn, max_batch_size, batch_wait_timeout_s))
            return await b.submit(self_arg, item)

        return wrapper

    if _func is not None:
        return decorate(_func)
    return decorate
