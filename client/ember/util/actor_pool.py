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
        self._pending: list[tuple[Callable, Any]] = []

    def map(self, fn: Callable[[Any, Any], Any], values: Iterable[Any]) -> Iterator[Any]:
        """Results in the order of `values`."""
        while self.has_next():  # drop leftovers of an earlier map
            self.get_next_unordered()
        for v in values:
            self.submit(fn, v)
        while self.has_next():
            yield self.get_next()

    def map_unordered(self, fn: Callable[[Any, Any], Any], values: Iterable[Any]) -> Iterator[Any]:
        """Results as they finish."""
        while self.has_next():
            self.get_next_unordered()
        for v in values:
            self.submit(fn, v)
        while self.has_next():
            yield self.get_next_unordered()

    def submit(self, fn: Callable[[Any, Any], Any], value: Any) -> None:
        """Runs fn(actor, value) on an idle actor, or queues it until one is free."""
        if self._idle:
            actor = self._idle.pop()
            ref = fn(actor, value)
            self._future_to_actor[ref] = (self._next_task_index, actor)
            self._index_to_future[self._next_task_index] = ref
            self._next_task_index += 1
        else:
            self._pending.append((fn, value))

    def has_next(self) -> bool:
        return bool(self._future_to_actor)

    def has_free(self) -> bool:
        return bool(self._idle) and not self._pending

    def get_next(self, timeout: float | None = None, ignore_if_timedout: bool = False) -> Any:
        """The next result in submission order."""
        import ember

        if not self.has_next():
            raise StopIteration("No more results to get")
        if self._next_return_index >= self._next_task_index:
            raise ValueError("It is not allowed to call get_next() after get_next_unordered().")
        ref = self._index_to_future[self._next_return_index]
        if timeout is not None:
            ready, _ = ember.wait([ref], timeout=timeout)
            if not ready:
                if ignore_if_timedout:
                    self._next_return_index += 1
                    del self._index_to_future[self._next_return_index - 1]
                raise TimeoutError("Timed out waiting for result")
        del self._index_to_future[self._next_return_index]
        self._next_return_index += 1
        _, actor = self._future_to_actor.pop(ref)
        self._return_actor(actor)
        return ember.get(ref)

    def get_next_unordered(self, timeout: float | None = None, ignore_if_timedout: bool = False) -> Any:
        """Whichever result finishes first."""
        import ember

        if not self.has_next():
            raise StopIteration("No more results to get")
        ready, _ = ember.wait(list(self._future_to_actor), num_returns=1, timeout=timeout)
        if not ready:
            raise TimeoutError("Timed out waiting for result")
        ref = ready[0]
        index, actor = self._future_to_actor.pop(ref)
        self._index_to_future.pop(index, None)
        self._next_return_index = max(self._next_return_index, index + 1)
        self._return_actor(actor)
        return ember.get(ref)

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
