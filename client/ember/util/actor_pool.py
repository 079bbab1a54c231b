"""ActorPool: spread work over a fixed set of actors (same API as ray.util.ActorPool).

    pool = ActorPool([Worker.remote() for _ in range(4)])
    results = list(pool.map(lambda a, v: a.process.remote(v), items))
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator


class ActorPool:
    def __init__(self, actors: list[Any]) -> None:
        self._idle = list(actors)
        self._future_to_actor: dict[Any, tuple[int, Any]] = {}
        self._index_to_future: dict[int, Any] = {}
        self._next_task_index = 0
        self._next_return_index = 0
        self._pending: list[tuple[Callable[[Any, Any], Any], Any]] = []

    def map(self, fn: Callable[[Any, Any], Any], values: Iterable[Any]) -> Iterator[Any]:
        """Submits every value at once (as Ray's), and returns an iterator over the results in the
        order of `values`. Results left from an earlier map are dropped. A `fn` returning a list
        of refs (an actor method with num_returns > 1) yields a list of values per item."""
        while self.has_next():  # drop leftovers of an earlier map
            try:
                self.get_next(timeout=0, ignore_if_timedout=True)
            except TimeoutError:
                pass
        for v in values:
            self.submit(fn, v)
        return self._drain(self.get_next)

    def map_unordered(self, fn: Callable[[Any, Any], Any], values: Iterable[Any]) -> Iterator[Any]:
        """As map, but results come as they finish."""
        while self.has_next():
            try:
                self.get_next_unordered(timeout=0)
            except TimeoutError:
                pass
        for v in values:
            self.submit(fn, v)
        return self._drain(self.get_next_unordered)

    def _drain(self, get: Callable[[], Any]) -> Iterator[Any]:
        while self.has_next():
            yield get()

    def submit(self, fn: Callable[[Any, Any], Any], value: Any) -> None:
        """Runs fn(actor, value) on an idle actor, or queues it until one is free."""
        if self._idle:
            actor = self._idle.pop()
            future = fn(actor, value)
            self._future_to_actor[_key(future)] = (self._next_task_index, actor)
            self._index_to_future[self._next_task_index] = future
            self._next_task_index += 1
        else:
            self._pending.append((fn, value))

    def has_next(self) -> bool:
        return bool(self._future_to_actor)

    def has_free(self) -> bool:
        return bool(self._idle) and not self._pending

    def get_next(self, timeout: float | None = None, ignore_if_timedout: bool = False) -> Any:
        """The next result in submission order. On timeout, TimeoutError; with
        ignore_if_timedout the late result is dropped and its actor returned to the pool."""
        import ember

        if not self.has_next():
            raise StopIteration("No more results to get")
        if self._next_return_index >= self._next_task_index:
            raise ValueError("It is not allowed to call get_next() after get_next_unordered().")
        future = self._index_to_future[self._next_return_index]
        timed_out = False
        if timeout is not None:
            refs = _refs(future)
            ready, _ = ember.wait(refs, num_returns=len(refs), timeout=timeout)
            if len(ready) < len(refs):
                if not ignore_if_timedout:
                    raise TimeoutError("Timed out waiting for result")
                timed_out = True
        del self._index_to_future[self._next_return_index]
        self._next_return_index += 1
        _, actor = self._future_to_actor.pop(_key(future))
        self._return_actor(actor)
        if timed_out:
            raise TimeoutError(f"Timed out waiting for result. The task {future} has been ignored.")
        return ember.get(future)

    def get_next_unordered(self, timeout: float | None = None, ignore_if_timedout: bool = False) -> Any:
        """Whichever result finishes first (a multi-return task's refs finish together: its
        first ref stands for it)."""
        import ember

        if not self.has_next():
            raise StopIteration("No more results to get")
        first = {_refs(k)[0]: k for k in self._future_to_actor}
        ready, _ = ember.wait(list(first), num_returns=1, timeout=timeout)
        if not ready:
            raise TimeoutError("Timed out waiting for result")
        key = first[ready[0]]
        index, actor = self._future_to_actor.pop(key)
        future = self._index_to_future.pop(index)
        self._next_return_index = max(self._next_return_index, index + 1)
        self._return_actor(actor)
        return ember.get(future)

    def _return_actor(self, actor: Any) -> None:
        self._idle.append(actor)
        if self._pending:
            self.submit(*self._pending.pop(0))

    def pop_idle(self) -> Any | None:
        """Removes an idle actor from the pool (None if all are busy)."""
        return self._idle.pop() if self.has_free() else None

    def push(self, actor: Any) -> None:
        """Adds an actor to the pool."""
        busy = {a for _, a in self._future_to_actor.values()}
        if actor in self._idle or actor in busy:
            raise ValueError("Actor already belongs to current ActorPool")
        self._return_actor(actor)


def _key(future: Any) -> Any:
    """A submission's key: its ref, or the tuple of its refs (lists are not hashable)."""
    return tuple(future) if isinstance(future, list) else future


def _refs(future: Any) -> list[Any]:
    return list(future) if isinstance(future, (list, tuple)) else [future]
