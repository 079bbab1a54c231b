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
    two, one = shape_of({"CPU": 2}), shape_of({"CPU": 1})
    wa = pool.take_idle(two)
    assert wa is not None and wa.worker_id == "c"  # most recently idle
    clock.t = 1
    pool.returned("c")
    wb = pool.take_idle(one)
    assert wb is not None and wb.worker_id == "c"  # no worker ran one CPU: the most recent
    pool.returned("c")
    w = pool.take_idle(one)
    assert w is not None and w.worker_id == "c"  # c last ran one CPU


def test_same_shape_wins_over_recency():
    pool, _ = make()
    start(pool, "a", "b")
    two = shape_of({"CPU": 2})
    assert pool.take_idle(two).worker_id == "b"
    pool.returned("b")  # b ran two CPUs, now the most recent
    w = pool.take_idle(shape_of({"CPU": 1}))
    assert w.worker_id == "b"
    pool.returned("b")  # b now ran one CPU; a never ran anything
    pool.take_idle(two)  # takes b (most recent, no match)
    w = pool.take_idle(shape_of({"CPU": 1}))
    assert w.worker_id == "a"
    assert pool.take_idle(two) is None


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


def test_gpu_and_cpu_work_never_share_a_worker():
    # Ray's pool keys workers by "is GPU": a worker that ran GPU work only takes GPU work again,
    # one that ran CPU-only work only CPU-only work; a fresh one takes either.
    pool, _ = make()
    start(pool, "a", "b")
    gpu, cpu = shape_of({"CPU": 1, "GPU": 1}), shape_of({"CPU": 1})
    first = pool.take_idle(gpu)
    assert first is not None and first.gpu is True
    pool.returned(first.worker_id)
    other = pool.take_idle(cpu)
    assert other is not None and other.worker_id != first.worker_id and other.gpu is False
    assert pool.take_idle(cpu) is None  # only the GPU worker is idle
    assert pool.idle_by_env() == {"|gpu": 1}
    pool.returned(other.worker_id)
    assert pool.idle_by_env() == {"|gpu": 1, "|cpu": 1}
    again = pool.take_idle(gpu)
    assert again is not None and again.worker_id == first.worker_id
