"""WorkerPool: start-up counts, reuse by shape, idle reaping, start-up timeouts (pure, fake clock)."""
from __future__ import annotations

import pytest

from ember_common.rpc import NotFound
from ember_raylet.worker_pool import WorkerPool, WorkerState, shape_of


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def make(prestart: int = 0, max_starting: int = 2) -> tuple[WorkerPool, Clock]:
    clock = Clock()
    return WorkerPool(num_prestart=prestart, max_starting=max_starting, startup_timeout_s=30,
                      idle_timeout_s=10, clock=clock), clock


def start(pool: WorkerPool, *ids: str) -> None:
    for wid in ids:
        pool.add_starting(wid)
        pool.registered(wid, 1000)


def test_to_start_keeps_prestart_and_bounds_concurrent_startups():
    pool, _ = make(prestart=3, max_starting=2)
    assert pool.to_start(0) == 3
    for wid in "abc":
        pool.add_starting(wid)
    assert pool.to_start(0) == 0
    assert pool.to_start(10) == 0  # three already starting, above max_starting
    start(pool)
    pool.registered("a", 1)
    pool.registered("b", 1)
    assert pool.to_start(5) == 1  # one still starting; two at once at most


def test_register_unknown_worker_is_not_found():
    pool, _ = make()
    with pytest.raises(NotFound, match="not started by this raylet"):
        pool.registered("nobody", 1)


def test_reuse_prefers_the_same_shape_then_the_most_recent():
    pool, clock = make()
    start(pool, "a", "b", "c")
    gpu, cpu = shape_of({"GPU": 1, "CPU": 1}), shape_of({"CPU": 1})
    wa = pool.take_idle(gpu)
    assert wa is not None and wa.worker_id == "c"  # most recently idle
    clock.t = 1
    pool.returned("c")
    wb = pool.take_idle(cpu)
    assert wb is not None and wb.worker_id == "c"  # no worker ran cpu: the most recent
    pool.returned("c")
    w = pool.take_idle(cpu)
    assert w is not None and w.worker_id == "c"  # c last ran cpu


def test_same_shape_wins_over_recency():
    pool, _ = make()
    start(pool, "a", "b")
    gpu = shape_of({"GPU": 1})
    assert pool.take_idle(gpu).worker_id == "b"
    pool.returned("b")  # b ran gpu, now the most recent
    w = pool.take_idle(shape_of({"CPU": 1}))
    assert w.worker_id == "b"
    pool.returned("b")  # b now ran cpu; a never ran anything
    pool.take_idle(gpu)  # takes b (most recent, no match)
    w = pool.take_idle(shape_of({"CPU": 1}))
    assert w.worker_id == "a"
    assert pool.take_idle(gpu) is None


def test_exit_forgets_the_worker():
    pool, _ = make()
    start(pool, "a")
    w = pool.take_idle(())
    assert w is not None
    prev = pool.exited("a")
    assert prev is not None and prev.state is WorkerState.LEASED
    assert pool.exited("a") is None
    assert pool.alive() == 0 and pool.take_idle(()) is None


def test_idle_workers_beyond_prestart_are_reaped_oldest_first():
    pool, clock = make(prestart=1)
    start(pool, "a")
    clock.t = 5
    start(pool, "b", "c")
    clock.t = 12
    kills = pool.tick()
    assert [k.worker_id for k in kills] == ["a"]  # only a idled 10 s
    assert "idle" in kills[0].reason
    clock.t = 16
    assert [k.worker_id for k in pool.tick()] == ["b"]  # c kept: the prestarted one
    assert pool.tick() == []
    assert pool.count(WorkerState.IDLE) == 1
    assert pool.take_idle(()).worker_id == "c"


def test_leased_workers_are_never_reaped():
    pool, clock = make(prestart=0)
    start(pool, "a")
    pool.take_idle(())
    clock.t = 1000
    assert pool.tick() == []


def test_startup_timeout_kills_once():
    pool, clock = make()
    pool.add_starting("slow")
    clock.t = 29
    assert pool.tick() == []
    clock.t = 31
    (k,) = pool.tick()
    assert k.worker_id == "slow" and "register" in k.reason
    assert pool.tick() == []
    assert pool.count(WorkerState.STARTING) == 0
    assert pool.to_start(1) == 1  # it no longer counts as starting
