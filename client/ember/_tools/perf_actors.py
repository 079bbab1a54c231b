"""The actor workloads of `ember microbenchmark` (see perf.py), with the names, shapes and
multipliers of Ray's `ray/_private/ray_perf.py`.

perf.py loads this file by path, so, like perf.py, it imports nothing from Ember and runs under
Ray's interpreter too. Everything that runs remotely (the classes and task bodies) is defined
inside a function and refers to nothing but `mod` and its own closure, so it is pickled by value.

Each maker takes the runtime module (`ember` or `ray`) and returns the timed function; the
actors it made are listed on `fn.actors`, which perf.py kills after the workload (in Ray they
die when their handles go out of scope).
"""
from __future__ import annotations

import os
from typing import Any, Callable

Fn = Callable[[], Any]


def _n_cpu() -> int:
    """Ray's `multiprocessing.cpu_count() // 2`, at least 1."""
    return max(1, (os.cpu_count() or 2) // 2)


def _classes(mod: Any) -> tuple[Any, Any, Any]:
    """Ray's Actor, AsyncActor and Client, as (remote) classes of `mod`."""

    def small_value() -> bytes:
        return b"ok"

    small_value_task = mod.remote(small_value)

    class Actor:
        def small_value(self) -> bytes:
            return b"ok"

        def small_value_arg(self, x: Any) -> bytes:
            return b"ok"

        def small_value_batch(self, n: int) -> None:
            mod.get([small_value_task.remote() for _ in range(n)])

    class AsyncActor:
        async def small_value(self) -> bytes:
            return b"ok"

        async def small_value_with_arg(self, x: Any) -> bytes:
            return b"ok"

    class Client:
        def __init__(self, servers: Any) -> None:
            self.servers = servers if isinstance(servers, list) else [servers]

        def small_value_batch(self, n: int) -> None:
            mod.get([s.small_value.remote() for s in self.servers for _ in range(n)])

        def small_value_batch_arg(self, n: int) -> None:
            x = mod.put(0)
            mod.get([s.small_value_arg.remote(x) for s in self.servers for _ in range(n)])

    return (mod.remote(num_cpus=0)(Actor), mod.remote(AsyncActor),
            mod.remote(num_cpus=0)(Client))


def _timed(fn: Fn, *actors: Any) -> Fn:
    fn.actors = list(actors)  # type: ignore[attr-defined]
    return fn


def _calls_from_tasks(mod: Any, actor_cls: Any, n: int, m: int) -> Fn:
    """n:n: m tasks, each making n calls spread over n_cpu actors."""
    n_cpu = _n_cpu()
    actors = [actor_cls.remote() for _ in range(n_cpu)]

    def work(actors: list[Any]) -> None:
        mod.get([actors[i % n_cpu].small_value.remote() for i in range(n)])

    work_task = mod.remote(work)
    return _timed(lambda: mod.get([work_task.remote(actors) for _ in range(m)]), *actors)


# --- sync actors -----------------------------------------------------------------------------

def _multi_client_tasks(mod: Any) -> Fn:
    """4 actors, each submitting 10k tasks and getting them."""
    actor_cls, _, _ = _classes(mod)
    actors = [actor_cls.remote() for _ in range(4)]
    return _timed(lambda: mod.get([a.small_value_batch.remote(10000) for a in actors]), *actors)


def _actor_sync(mod: Any) -> Fn:
    actor_cls, _, _ = _classes(mod)
    a = actor_cls.remote()
    return _timed(lambda: mod.get(a.small_value.remote()), a)


def _actor_async(mod: Any, **options: Any) -> Fn:
    actor_cls, _, _ = _classes(mod)
    a = actor_cls.options(**options).remote() if options else actor_cls.remote()
    return _timed(lambda: mod.get([a.small_value.remote() for _ in range(1000)]), a)


def _actor_concurrent(mod: Any) -> Fn:
    return _actor_async(mod, max_concurrency=16)


def _one_client_n(mod: Any, use_async: bool) -> Fn:
    """One client actor calling n_cpu actors (plain or async) 5000 times."""
    actor_cls, async_cls, client_cls = _classes(mod)
    cls = async_cls if use_async else actor_cls
    actors = [cls.remote() for _ in range(_n_cpu())]
    client = client_cls.remote(actors)
    return _timed(lambda: mod.get(client.small_value_batch.remote(5000)), client, *actors)


def _one_client_n_actors(mod: Any) -> Fn:
    return _one_client_n(mod, use_async=False)


def _n_tasks_n_actors(mod: Any) -> Fn:
    actor_cls, _, _ = _classes(mod)
    return _calls_from_tasks(mod, actor_cls, 5000, 4)


def _n_clients_n_actors_arg(mod: Any) -> Fn:
    """One client actor per actor; each client makes 1000 calls passing a put object."""
    actor_cls, _, client_cls = _classes(mod)
    actors = [actor_cls.remote() for _ in range(_n_cpu())]
    clients = [client_cls.remote(a) for a in actors]
    return _timed(lambda: mod.get([c.small_value_batch_arg.remote(1000) for c in clients]),
                  *clients, *actors)


def _actor_creation(mod: Any) -> Fn:
    """Creates 10 actors (num_cpus=0), waits until each answers a call, then kills them (the
    kill is part of the timed call, as the next call needs the workers back)."""
    actor_cls, _, _ = _classes(mod)

    def create() -> None:
        actors = [actor_cls.remote() for _ in range(10)]
        mod.get([a.small_value.remote() for a in actors])
        for a in actors:
            mod.kill(a)

    return create


# --- async actors ----------------------------------------------------------------------------

def _async_actor_sync(mod: Any) -> Fn:
    _, async_cls, _ = _classes(mod)
    a = async_cls.remote()
    return _timed(lambda: mod.get(a.small_value.remote()), a)


def _async_actor_async(mod: Any) -> Fn:
    _, async_cls, _ = _classes(mod)
    a = async_cls.remote()
    return _timed(lambda: mod.get([a.small_value.remote() for _ in range(1000)]), a)


def _async_actor_args_async(mod: Any) -> Fn:
    _, async_cls, _ = _classes(mod)
    a = async_cls.remote()
    return _timed(lambda: mod.get([a.small_value_with_arg.remote(i) for i in range(1000)]), a)


def _one_client_n_async_actors(mod: Any) -> Fn:
    return _one_client_n(mod, use_async=True)


def _n_tasks_n_async_actors(mod: Any) -> Fn:
    _, async_cls, _ = _classes(mod)
    return _calls_from_tasks(mod, async_cls, 5000, 4)


# (name, make, multiplier), in Ray's order. The 1:n and n:n multipliers use n_cpu as Ray's do
# (one actor, or one client, per n_cpu).
BENCHMARKS: list[tuple[str, Callable[[Any], Fn], float]] = [
    ("multi client tasks async", _multi_client_tasks, 10000 * 4),
    ("1:1 actor calls sync", _actor_sync, 1),
    ("1:1 actor calls async", _actor_async, 1000),
    ("1:1 actor calls concurrent", _actor_concurrent, 1000),
    ("1:n actor calls async", _one_client_n_actors, 5000 * _n_cpu()),
    ("n:n actor calls async", _n_tasks_n_actors, 4 * 5000),
    ("n:n actor calls with arg async", _n_clients_n_actors_arg, 1000 * _n_cpu()),
    ("1:1 async-actor calls sync", _async_actor_sync, 1),
    ("1:1 async-actor calls async", _async_actor_async, 1000),
    ("1:1 async-actor calls with args async", _async_actor_args_async, 1000),
    ("1:n async-actor calls async", _one_client_n_async_actors, 5000 * _n_cpu()),
    ("n:n async-actor calls async", _n_tasks_n_async_actors, 4 * 5000),
    # Not in Ray's list: actor start-up (issue 20), 10 per call.
    ("actor creation", _actor_creation, 10),
]
