"""Pool: `multiprocessing.Pool` whose processes are actors (Ray's `ray.util.multiprocessing`).

Work goes to the actors in chunks (a list of calls run by one actor method call), round robin.
`map`/`starmap` split the input into about four chunks per actor unless `chunksize` is given;
`imap`/`imap_unordered` keep one chunk per actor in flight and submit the next as results come
(chunksize 1 by default). A call that raises is returned as its exception, which `get()` (or
the iterator) raises in the caller as the original type. `close()` refuses new work, `join()`
(after close or terminate) waits for submitted work and ends the actors, `terminate()` kills
them at once; the context manager terminates on exit, as multiprocessing's does.
"""
from __future__ import annotations

import itertools
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator
from multiprocessing import TimeoutError
from typing import Any

import ember


class _CallFailed:
    """A call of the batch raised: its exception, and the traceback text if it cannot travel."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.text = "".join(traceback.format_exception(error))

    def __reduce__(self) -> tuple[Any, ...]:
        import cloudpickle

        try:
            cloudpickle.dumps(self.error)
            return (_CallFailed, (self.error,))
        except Exception:
            return (_CallFailed, (RuntimeError(self.text),))


@ember.remote(num_cpus=0)
class PoolActor:
    """One of the pool's processes: runs the initializer once, then batches of calls."""

    def __init__(self, initializer: Callable[..., Any] | None, initargs: Iterable[Any]) -> None:
        if initializer is not None:
            initializer(*initargs)

    def ping(self) -> None:
        """Answers once the initializer has run."""

    def run_batch(self, func: Callable[..., Any],
                  batch: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[Any]:
        """Runs each (args, kwargs) of the batch; a call that raises gives _CallFailed."""
        out: list[Any] = []
        for args, kwargs in batch:
            try:
                out.append(func(*args, **kwargs))
            except Exception as e:
                out.append(_CallFailed(e))
        return out


def _unwrap(results: list[Any]) -> list[Any]:
    for r in results:
        if isinstance(r, _CallFailed):
            raise r.error
    return results


class AsyncResult:
    """The result of apply_async/map_async/starmap_async: get(), wait(), ready(), successful()."""

    def __init__(self, refs: list[Any], callback: Callable[[Any], Any] | None = None,
                 error_callback: Callable[[BaseException], Any] | None = None,
                 single: bool = False) -> None:
        self._refs = refs
        self._single = single
        self._done = threading.Event()
        self._value: list[Any] | None = None
        self._error: BaseException | None = None
        threading.Thread(target=self._collect, args=(callback, error_callback),
                         name="ember-pool-result", daemon=True).start()

    def _collect(self, callback: Any, error_callback: Any) -> None:
        try:
            value = [r for chunk in ember.get(self._refs) for r in chunk]
            self._value = _unwrap(value)
        except BaseException as e:  # a call raised, or its actor died
            self._error = e
        self._done.set()
        if self._error is not None:
            if error_callback is not None:
                error_callback(self._error)
        elif callback is not None:
            callback(self._value[0] if self._single else self._value)  # type: ignore[index]

    def wait(self, timeout: float | None = None) -> None:
        """Waits until the result is ready or timeout seconds passed."""
        self._done.wait(timeout)

    def ready(self) -> bool:
        """Whether every call has finished."""
        return self._done.is_set()

    def successful(self) -> bool:
        """Whether no call raised; ValueError if the result is not ready."""
        if not self.ready():
            raise ValueError(f"{self!r} not ready")
        return self._error is None

    def get(self, timeout: float | None = None) -> Any:
        """The result (a list, or one value for apply_async); raises a call's exception, or
        multiprocessing.TimeoutError after timeout seconds."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"the pool's result was not ready within {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value[0] if self._single else self._value


class Pool:
    """A pool of actor processes with multiprocessing.Pool's methods."""

    def __init__(self, processes: int | None = None, initializer: Callable[..., Any] | None = None,
                 initargs: Iterable[Any] | None = None, maxtasksperchild: int | None = None,
                 context: Any = None, ray_address: str | None = None,
                 ray_remote_args: dict[str, Any] | None = None) -> None:
        if context is not None:
            raise ValueError("Pool(context=...) is not supported: the pool's processes are "
                             "Ember actors, not processes of a multiprocessing context")
        if maxtasksperchild is not None and (not isinstance(maxtasksperchild, int)
                                             or maxtasksperchild < 1):
            raise ValueError(f"maxtasksperchild must be an int >= 1, got {maxtasksperchild!r}")
        if not ember.is_initialized():  # Ray's order: ray_address, the address variable, local
            if ray_address is not None:
                ember.init(address=ray_address)
            else:
                try:
                    ember.init(num_cpus=processes)  # a local cluster of `processes` CPUs
                except ValueError as e:  # EMBER_ADDRESS/RAY_ADDRESS names a running cluster
                    if "existing one" not in str(e):
                        raise
                    ember.init()
        cpus = int(ember.cluster_resources().get("CPU", 0))
        if processes is None:
            processes = cpus
        if processes <= 0:
            raise ValueError("Processes in the pool must be >0.")
        if processes > cpus:
            raise ValueError(f"Tried to start a pool with {processes} processes on a cluster "
                             f"with only {cpus} CPUs.")
        self._initializer = initializer
        self._initargs = tuple(initargs or ())
        self._max_tasks = maxtasksperchild
        actor_class: Any = PoolActor  # an ActorClass (the decorator's result)
        self._actor_class = actor_class.options(**(ray_remote_args or {}))
        self._actors: list[list[Any]] = [[self._new_actor(), 0] for _ in range(processes)]
        self._retired: list[Any] = []  # actors replaced after maxtasksperchild batches
        self._pending: list[Any] = []  # batch refs, for join()
        self._next = 0
        self._closed = False
        ember.get([a.ping.remote() for a, _ in self._actors])

    def _new_actor(self) -> Any:
        return self._actor_class.remote(self._initializer, self._initargs)

    def _check_running(self) -> None:
        if self._closed:
            raise ValueError("Pool not running")

    def _run_batch(self, index: int, func: Callable[..., Any], batch: list[Any]) -> Any:
        entry = self._actors[index]
        ref = entry[0].run_batch.remote(func, batch)
        self._pending.append(ref)
        if len(self._pending) >= 256:  # forget finished batches now and then
            _, self._pending = ember.wait(self._pending, num_returns=len(self._pending), timeout=0)
        entry[1] += 1
        if self._max_tasks is not None and entry[1] >= self._max_tasks:
            self._retired.append(entry[0])  # its queued batches still run; join() ends it
            entry[0], entry[1] = self._new_actor(), 0
        return ref

    def _next_index(self) -> int:
        self._next = (self._next + 1) % len(self._actors)
        return self._next

    def _chunksize(self, n: int) -> int:
        size, extra = divmod(n, len(self._actors) * 4)
        return max(1, size + (1 if extra else 0))

    def _submit(self, func: Callable[..., Any], iterable: Iterable[Any], chunksize: int | None,
                star: bool) -> list[Any]:
        self._check_running()
        items = list(iterable)
        if chunksize is not None and chunksize < 1:
            raise ValueError(f"chunksize must be >= 1, got {chunksize}")
        size = chunksize or self._chunksize(len(items))
        refs: list[Any] = []
        for i in range(0, len(items), size):
            batch: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
                (tuple(x) if star else (x,), {}) for x in items[i:i + size]]
            refs.append(self._run_batch(len(refs) % len(self._actors), func, batch))
        return refs

    # -- multiprocessing.Pool's API ----------------------------------------------------------
    def apply(self, func: Callable[..., Any], args: tuple[Any, ...] | None = None,
              kwds: dict[str, Any] | None = None) -> Any:
        """func(*args, **kwds) on one of the pool's actors; its result."""
        return self.apply_async(func, args, kwds).get()

    def apply_async(self, func: Callable[..., Any], args: tuple[Any, ...] | None = None,
                    kwds: dict[str, Any] | None = None,
                    callback: Callable[[Any], Any] | None = None,
                    error_callback: Callable[[BaseException], Any] | None = None) -> AsyncResult:
        """func(*args, **kwds) on one of the pool's actors; an AsyncResult."""
        self._check_running()
        ref = self._run_batch(self._next_index(), func, [(tuple(args or ()), dict(kwds or {}))])
        return AsyncResult([ref], callback, error_callback, single=True)

    def map(self, func: Callable[..., Any], iterable: Iterable[Any],
            chunksize: int | None = None) -> list[Any]:
        """[func(x) for x in iterable], in order, spread over the actors."""
        out: list[Any] = self.map_async(func, iterable, chunksize).get()
        return out

    def map_async(self, func: Callable[..., Any], iterable: Iterable[Any],
                  chunksize: int | None = None, callback: Callable[[Any], Any] | None = None,
                  error_callback: Callable[[BaseException], Any] | None = None) -> AsyncResult:
        """map's AsyncResult; callback gets the whole list, error_callback the first error."""
        return AsyncResult(self._submit(func, iterable, chunksize, False), callback, error_callback)

    def starmap(self, func: Callable[..., Any], iterable: Iterable[Iterable[Any]],
                chunksize: int | None = None) -> list[Any]:
        """[func(*args) for args in iterable], in order."""
        out: list[Any] = self.starmap_async(func, iterable, chunksize).get()
        return out

    def starmap_async(self, func: Callable[..., Any], iterable: Iterable[Iterable[Any]],
                      chunksize: int | None = None, callback: Callable[[Any], Any] | None = None,
                      error_callback: Callable[[BaseException], Any] | None = None) -> AsyncResult:
        """starmap's AsyncResult."""
        return AsyncResult(self._submit(func, iterable, chunksize, True), callback, error_callback)

    def imap(self, func: Callable[..., Any], iterable: Iterable[Any],
             chunksize: int = 1) -> Iterator[Any]:
        """func(x) for each x, lazily, in order; one chunk per actor in flight."""
        self._check_running()
        return self._imap(func, iterable, chunksize, ordered=True)

    def imap_unordered(self, func: Callable[..., Any], iterable: Iterable[Any],
                       chunksize: int = 1) -> Iterator[Any]:
        """func(x) for each x, lazily, in the order they finish."""
        self._check_running()
        return self._imap(func, iterable, chunksize, ordered=False)

    def _imap(self, func: Callable[..., Any], iterable: Iterable[Any], chunksize: int,
              ordered: bool) -> Iterator[Any]:
        if chunksize < 1:
            raise ValueError(f"chunksize must be >= 1, got {chunksize}")
        source = iter(iterable)
        in_flight: list[Any] = []

        def submit() -> bool:
            batch: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
                ((x,), {}) for x in itertools.islice(source, chunksize)]
            if batch:
                in_flight.append(self._run_batch(self._next_index(), func, batch))
            return bool(batch)

        for _ in range(len(self._actors)):
            if not submit():
                break
        while in_flight:
            if ordered:
                ref = in_flight.pop(0)
            else:
                [ref], _ = ember.wait(in_flight, num_returns=1)
                in_flight.remove(ref)
            results = ember.get(ref)
            submit()
            yield from _unwrap(results)

    def close(self) -> None:
        """Refuses new work; submitted work still runs (join() waits for it)."""
        self._closed = True

    def terminate(self) -> None:
        """Kills the pool's actors now; unfinished work fails."""
        self._closed = True
        for actor in [a for a, _ in self._actors] + self._retired:
            ember.kill(actor)
        self._actors, self._retired, self._pending = [], [], []

    def join(self) -> None:
        """Waits for submitted work, then ends the actors; only after close() or terminate()."""
        if not self._closed:
            raise ValueError("Pool is still running; call close() or terminate() first")
        if self._pending:
            ember.wait(self._pending, num_returns=len(self._pending))
        self.terminate()

    def __enter__(self) -> Pool:
        self._check_running()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.terminate()
