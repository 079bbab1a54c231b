"""Actors on the embedded cluster, following Ray's actor semantics: state, ordering, async and
threaded actors, handles, named actors, errors, restarts after a crash, kill/exit_actor,
ActorPool and GPU resources held by an actor."""
from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest

import ember
from ember import exceptions as ex
from ember.testing import process_gone, wait_for
from ember_common import rpc
from ember_common.gcs_client import SyncGcsClient
from ember_common.proto import common_pb2, raylet_pb2, raylet_pb2_grpc

A = common_pb2.ActorInfo
T = 30  # timeout of every ember.get: a bug fails the test instead of hanging it


# ---------------------------------------------------------------------------------- helpers
def _actor_info(handle) -> common_pb2.ActorInfo:
    """The GCS's record of an actor (state, restarts, death cause)."""
    with SyncGcsClient(ember.get_runtime_context().gcs_address, timeout_s=5) as gcs:
        return gcs.get_actor_info(handle._ember_actor_id)


def _wait_state(handle, state, num_restarts=None, timeout_s=20.0) -> common_pb2.ActorInfo:
    def ok():
        a = _actor_info(handle)
        if a.state == state and (num_restarts is None or a.num_restarts == num_restarts):
            return a
        return None

    return wait_for(ok, timeout_s=timeout_s,
                    what=f"actor to be {A.State.Name(state)} (restarts={num_restarts})")


def _sigkill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: process_gone(pid), timeout_s=10, what=f"process {pid} to die")


def _leased_task_names() -> list[str]:
    """What the leased workers of every raylet run (straight from the raylets)."""
    names = []
    for n in ember.nodes():
        if not n["Alive"]:
            continue
        ch = rpc.sync_channel(f"{n['NodeManagerAddress']}:{n['NodeManagerPort']}")
        try:
            stats = raylet_pb2_grpc.RayletStub(ch).GetNodeStats(raylet_pb2.GetNodeStatsRequest(), timeout=5)
        finally:
            ch.close()
        names += [w.task_name for w in stats.workers if w.leased]
    return names


def _kill_all(*handles) -> None:
    for h in handles:
        ember.kill(h)


@ember.remote
class Counter:
    def __init__(self, start=0):
        self.n = start

    def incr(self, by=1):
        self.n += by
        return self.n

    def value(self):
        return self.n

    def pid(self):
        return os.getpid()

    def reconstructed(self):
        return ember.get_runtime_context().was_current_actor_reconstructed


# ---------------------------------------------------------------------------------- seed article
def load_model(model_path):
    """Stand-in for a real model loader: a callable 'model' remembering its path."""
    return lambda x: {"model": model_path, "output": [v * 2 for v in x]}


@ember.remote(num_gpus=1)
class ModelServer:
    def __init__(self, model_path):
        self.model = load_model(model_path)
        self.request_count = 0

    def predict(self, input_data):
        self.request_count += 1
        return self.model(input_data)

    def get_stats(self):
        return {"total_requests": self.request_count}


def test_seed_section_3_2_model_server(ray_start):
    server = ModelServer.remote("/models/llama-7b")
    try:
        result_ref = server.predict.remote([1, 2, 3])
        assert isinstance(result_ref, ember.ObjectRef)
        assert ember.get(result_ref, timeout=T) == {"model": "/models/llama-7b", "output": [2, 4, 6]}
        # State persists between calls.
        assert ember.get(server.get_stats.remote(), timeout=T) == {"total_requests": 1}
    finally:
        ember.kill(server)


def test_seed_section_3_3_round_robin_worker_pool(ray_start):
    @ember.remote
    class Worker:
        def __init__(self, worker_id):
            self.id = worker_id
            self.processed = 0

        def process(self, item):
            result = (self.id, item * item)  # expensive_computation(item)
            self.processed += 1
            return result

        def stats(self):
            return self.id, self.processed

    workers = [Worker.remote(i) for i in range(4)]
    try:
        work_items = list(range(22))
        futures = []
        for i, item in enumerate(work_items):
            worker = workers[i % len(workers)]
            futures.append(worker.process.remote(item))
        results = ember.get(futures, timeout=T)
        assert results == [(i % 4, item * item) for i, item in enumerate(work_items)]
        stats = ember.get([w.stats.remote() for w in workers], timeout=T)
        assert stats == [(0, 6), (1, 6), (2, 5), (3, 5)]
    finally:
        _kill_all(*workers)


# ---------------------------------------------------------------------------------- ordering, async
def test_calls_from_one_caller_run_in_submission_order(ray_start):
    @ember.remote
    class Recorder:
        def __init__(self):
            self.seen = []

        def append(self, i):
            self.seen.append(i)
            return i

        def get(self):
            return self.seen

    r = Recorder.remote()
    try:
        refs = [r.append.remote(i) for i in range(200)]
        assert ember.get(refs, timeout=T) == list(range(200))
        assert ember.get(r.get.remote(), timeout=T) == list(range(200))
    finally:
        ember.kill(r)


def test_async_actor_runs_1000_calls_concurrently(ray_start):
    @ember.remote
    class AsyncActor:
        async def work(self, i):
            await asyncio.sleep(0.01)
            return i

        async def ping(self):
            return "pong"

    a = AsyncActor.remote()
    try:
        assert ember.get(a.ping.remote(), timeout=T) == "pong"  # created and reachable
        start = time.monotonic()
        refs = [a.work.remote(i) for i in range(1000)]
        assert ember.get(refs, timeout=T) == list(range(1000))
        elapsed = time.monotonic() - start
        assert elapsed < 5, f"1000 concurrent 10 ms calls took {elapsed:.1f}s (sequential would be 10s)"
    finally:
        ember.kill(a)


@ember.remote
def square(x):
    return x * x


def test_seed_section_6_2_async_actor_awaits_another_actor_no_deadlock(ray_start):
    @ember.remote
    class B:
        def method(self, a=None):
            # B calls back into A while A is awaiting B: fine since A is async.
            if a is not None:
                return ("b", ember.get(a.ping.remote(), timeout=20))
            return "b"

    @ember.remote
    class A:
        def __init__(self, b):
            self.b = b

        async def method(self):
            return await self.b.method.remote()

        async def method_with_callback(self, me):
            return await self.b.method.remote(me)

        async def ping(self):
            return "a"

        async def from_task(self, x):
            return await square.remote(x)

    b = B.remote()
    a = A.remote(b)
    try:
        assert ember.get(a.method.remote(), timeout=T) == "b"
        assert ember.get(a.method_with_callback.remote(a), timeout=T) == ("b", "a")
        assert ember.get([a.from_task.remote(i) for i in range(5)], timeout=T) == [0, 1, 4, 9, 16]
        # Let A give back the worker leases of its tasks before it is killed: leases of a dead
        # owner are never released (see test_tasks_of_a_killed_actor_release_their_resources).
        wait_for(lambda: "square" not in _leased_task_names(), timeout_s=10,
                 what="A's task leases to be returned")
    finally:
        _kill_all(a, b)


def test_threaded_actor_max_concurrency_2_runs_calls_at_once(ray_start):
    @ember.remote(max_concurrency=2)
    class Threaded:
        def __init__(self):
            self.barrier = threading.Barrier(2)

        def meet(self, i):
            # Returns only once two calls are inside the method at the same time.
            self.barrier.wait(timeout=10)
            return i

    t = Threaded.remote()
    try:
        assert ember.get([t.meet.remote(0), t.meet.remote(1)], timeout=T) == [0, 1]
    finally:
        ember.kill(t)


def test_default_actor_runs_one_call_at_a_time(ray_start):
    @ember.remote
    class Serial:
        def __init__(self):
            self.lock = threading.Lock()
            self.active = 0
            self.peak = 0

        def work(self):
            with self.lock:
                self.active += 1
                self.peak = max(self.peak, self.active)
            time.sleep(0.05)
            with self.lock:
                self.active -= 1

        def get_peak(self):
            return self.peak

    s = Serial.remote()
    try:
        ember.get([s.work.remote() for _ in range(6)], timeout=T)
        assert ember.get(s.get_peak.remote(), timeout=T) == 1
    finally:
        ember.kill(s)


# ---------------------------------------------------------------------------------- handles
def test_handles_passed_to_tasks_and_actors_and_returned(ray_start):
    @ember.remote
    def bump(c):
        return ember.get(c.incr.remote(), timeout=20)

    @ember.remote
    def bump_nested(cs):
        return ember.get(cs[0].incr.remote(), timeout=20)

    @ember.remote
    def passthrough(c):
        return c

    @ember.remote
    class Caller:
        def call(self, c):
            return ember.get(c.incr.remote(), timeout=20)

    c = Counter.remote()
    caller = Caller.remote()
    try:
        assert ember.get(bump.remote(c), timeout=T) == 1
        assert ember.get(bump_nested.remote([c]), timeout=T) == 2
        assert ember.get(caller.call.remote(c), timeout=T) == 3
        back = ember.get(passthrough.remote(c), timeout=T)
        assert back == c and hash(back) == hash(c)
        assert ember.get(back.incr.remote(), timeout=T) == 4
    finally:
        _kill_all(c, caller)


def test_actor_created_in_a_task_and_returned(ray_start):
    """A task that uses an actor class of the driver (Ray: creating actors from tasks)."""
    @ember.remote
    def make_counter(start):
        c = Counter.remote(start)
        ember.get(c.incr.remote(), timeout=20)
        return c

    made = ember.get(make_counter.remote(10), timeout=T)
    try:
        assert ember.get(made.incr.remote(), timeout=T) == 12
    finally:
        ember.kill(made)


def test_method_num_returns(ray_start):
    @ember.remote
    class Multi:
        @ember.method(num_returns=2)
        def pair(self, x):
            return x, x + 1

        def two(self):
            return "a", "b"

    m = Multi.remote()
    try:
        r1, r2 = m.pair.remote(1)
        assert ember.get([r1, r2], timeout=T) == [1, 2]
        s1, s2 = m.two.options(num_returns=2).remote()
        assert ember.get([s1, s2], timeout=T) == ["a", "b"]
        # Without options the method keeps its single return.
        assert ember.get(m.two.remote(), timeout=T) == ("a", "b")
    finally:
        ember.kill(m)


# ---------------------------------------------------------------------------------- named actors
def test_named_actor_lookup_and_missing_name(ray_start):
    c = Counter.options(name="named-lookup", namespace="ns-a").remote()
    try:
        ember.get(c.incr.remote(), timeout=T)
        found = ember.get_actor("named-lookup", namespace="ns-a")
        assert found == c
        assert ember.get(found.incr.remote(), timeout=T) == 2  # same state
        with pytest.raises(ValueError):
            ember.get_actor("named-lookup", namespace="ns-other")
        with pytest.raises(ValueError):
            ember.get_actor("no-such-actor-anywhere")
        # Without a namespace: the driver's own namespace.
        d = Counter.options(name="named-default-ns").remote()
        try:
            assert ember.get_actor("named-default-ns") == d
        finally:
            ember.kill(d)
    finally:
        ember.kill(c)
    # A killed actor's name is free again.
    wait_for(lambda: _missing("named-lookup", "ns-a"), timeout_s=10, what="the name to be released")


def _missing(name, namespace):
    try:
        ember.get_actor(name, namespace=namespace)
    except ValueError:
        return True
    return False


def test_duplicate_name_raises_and_get_if_exists_returns_existing(ray_start):
    c = Counter.options(name="dup", namespace="ns-dup").remote()
    others = []
    try:
        assert ember.get(c.incr.remote(), timeout=T) == 1
        with pytest.raises(ValueError, match="dup.*already exists"):
            Counter.options(name="dup", namespace="ns-dup").remote()
        same = Counter.options(name="dup", namespace="ns-dup", get_if_exists=True).remote()
        assert same == c
        assert ember.get(same.incr.remote(), timeout=T) == 2
        assert ember.get(c.value.remote(), timeout=T) == 2
        # The same name in another namespace is a different actor.
        other = Counter.options(name="dup", namespace="ns-dup-2").remote(100)
        others.append(other)
        assert other != c
        assert ember.get(other.incr.remote(), timeout=T) == 101
        assert ember.get(c.value.remote(), timeout=T) == 2
        assert ember.get_actor("dup", namespace="ns-dup-2") == other
        # get_if_exists on a fresh name creates the actor.
        fresh = Counter.options(name="fresh", namespace="ns-dup", get_if_exists=True).remote(5)
        others.append(fresh)
        assert ember.get(fresh.value.remote(), timeout=T) == 5
    finally:
        _kill_all(c, *others)


# ---------------------------------------------------------------------------------- errors
def test_bad_calls_fail_at_the_call_site(ray_start):
    c = Counter.remote()
    try:
        with pytest.raises(AttributeError, match="no_such_method"):
            c.no_such_method.remote()
        with pytest.raises(TypeError, match=r"Counter\.remote\(\)"):
            Counter()
        with pytest.raises(TypeError, match=r"incr\.remote\(\)"):
            c.incr()
        assert ember.get(c.incr.remote(), timeout=T) == 1
    finally:
        ember.kill(c)


def test_exception_in_init_surfaces_on_first_call(ray_start):
    @ember.remote
    class Broken:
        def __init__(self):
            self._configure()

        def _configure(self):
            raise ValueError("bad model config xyz-123")

        def ping(self):
            return "pong"

    b = Broken.remote()
    with pytest.raises(ex.RayActorError) as ei:
        ember.get(b.ping.remote(), timeout=T)
    assert isinstance(ei.value, ex.ActorDiedError)
    msg = str(ei.value)
    assert "bad model config xyz-123" in msg
    assert "Traceback" in msg and "_configure" in msg and "ValueError" in msg
    # Later calls fail the same way.
    with pytest.raises(ex.ActorDiedError, match="xyz-123"):
        ember.get(b.ping.remote(), timeout=T)


def test_exception_in_method_raised_as_user_type_and_actor_survives(ray_start):
    class InsufficientFunds(Exception):
        pass

    @ember.remote
    class Account:
        def __init__(self):
            self.balance = 10

        def withdraw(self, amount):
            if amount > self.balance:
                raise InsufficientFunds(f"balance {self.balance} < {amount}")
            self.balance -= amount
            return self.balance

    acct = Account.remote()
    try:
        assert ember.get(acct.withdraw.remote(3), timeout=T) == 7
        with pytest.raises(InsufficientFunds, match="balance 7 < 100") as ei:
            ember.get(acct.withdraw.remote(100), timeout=T)
        assert isinstance(ei.value, ex.RayTaskError)
        assert "withdraw" in str(ei.value)
        with pytest.raises(ex.RayTaskError):
            ember.get(acct.withdraw.remote(50), timeout=T)
        # The actor keeps working, its state untouched by the failed calls.
        assert ember.get(acct.withdraw.remote(2), timeout=T) == 5
    finally:
        ember.kill(acct)


# ---------------------------------------------------------------------------------- crashes, restarts
def test_sigkilled_actor_with_max_restarts_comes_back_fresh(ray_start):
    c = Counter.options(max_restarts=1).remote()
    try:
        assert ember.get([c.incr.remote(), c.incr.remote()], timeout=T) == [1, 2]
        pid = ember.get(c.pid.remote(), timeout=T)
        assert ember.get(c.reconstructed.remote(), timeout=T) is False
        _sigkill(pid)
        _wait_state(c, A.ALIVE, num_restarts=1)
        # The next call runs on the new instance: state reset, another process.
        assert ember.get(c.incr.remote(), timeout=T) == 1
        assert ember.get(c.pid.remote(), timeout=T) != pid
        assert ember.get(c.reconstructed.remote(), timeout=T) is True
    finally:
        ember.kill(c)


def test_sigkilled_actor_without_restarts_is_dead(ray_start):
    c = Counter.remote()
    pid = ember.get(c.pid.remote(), timeout=T)
    _sigkill(pid)
    with pytest.raises(ex.RayActorError):
        ember.get(c.incr.remote(), timeout=T)
    info = _wait_state(c, A.DEAD)
    assert "died" in info.death_cause
    with pytest.raises(ex.ActorDiedError, match="dead"):
        ember.get(c.incr.remote(), timeout=T)


def test_call_in_flight_is_retried_on_restarted_actor(ray_start, tmp_path):
    @ember.remote(max_restarts=1, max_task_retries=1)
    class Slow:
        def pid(self):
            return os.getpid()

        def slow(self, marker):
            with open(marker, "a") as f:
                f.write(f"{os.getpid()}\n")
            time.sleep(2)
            return os.getpid(), ember.get_runtime_context().was_current_actor_reconstructed

    s = Slow.remote()
    try:
        pid = ember.get(s.pid.remote(), timeout=T)
        marker = str(tmp_path / "started")
        ref = s.slow.remote(marker)
        wait_for(lambda: os.path.exists(marker), timeout_s=10, what="the slow call to start")
        _sigkill(pid)
        new_pid, reconstructed = ember.get(ref, timeout=T)
        assert new_pid != pid and reconstructed is True
        with open(marker) as f:
            assert len(f.read().split()) == 2  # ran once on each incarnation
    finally:
        ember.kill(s)


def test_kill_makes_later_calls_fail(ray_start):
    c = Counter.options(max_restarts=2).remote()
    assert ember.get(c.incr.remote(), timeout=T) == 1
    ember.kill(c)  # no_restart=True by default: max_restarts does not bring it back
    with pytest.raises(ex.RayActorError):
        ember.get(c.incr.remote(), timeout=T)
    info = _wait_state(c, A.DEAD)
    assert "ember.kill" in info.death_cause
    with pytest.raises(ex.ActorDiedError):
        ember.get(c.incr.remote(), timeout=T)
    ember.kill(c)  # idempotent


@ember.remote
class Stubborn:
    """Ignores SIGTERM (as user code might, or a call stuck in C)."""

    def ignore_sigterm(self):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        return os.getpid()


def test_killed_actor_that_ignores_sigterm_is_sigkilled_after_the_grace(ray_start):
    """ember.kill stops the actor's worker with SIGTERM (it exports its spans and task events
    first); one that ignores it is SIGKILLed 2 s later (the raylet's KILL_GRACE_S)."""
    s = Stubborn.remote()
    pid = ember.get(s.ignore_sigterm.remote(), timeout=T)
    ember.kill(s)
    start = time.monotonic()
    _wait_state(s, A.DEAD)
    wait_for(lambda: process_gone(pid), timeout_s=20, what="the actor's worker to be SIGKILLed")
    assert time.monotonic() - start >= 1.0  # it did ignore the SIGTERM


def test_kill_with_no_restart_false_restarts(ray_start):
    c = Counter.options(max_restarts=1).remote()
    try:
        assert ember.get(c.incr.remote(), timeout=T) == 1
        pid = ember.get(c.pid.remote(), timeout=T)
        ember.kill(c, no_restart=False)
        _wait_state(c, A.ALIVE, num_restarts=1)
        assert ember.get(c.incr.remote(), timeout=T) == 1
        assert ember.get(c.pid.remote(), timeout=T) != pid
    finally:
        ember.kill(c)


def test_exit_actor_is_not_restarted(ray_start):
    @ember.remote(max_restarts=2)
    class Quitter:
        def __init__(self):
            self.n = 0

        def incr(self):
            self.n += 1
            return self.n

        def quit(self):
            ember.actor.exit_actor()

    q = Quitter.remote()
    assert ember.get(q.incr.remote(), timeout=T) == 1
    quit_ref = q.quit.remote()
    queued_behind = q.incr.remote()  # submitted after exit_actor(): must not run
    with pytest.raises(ex.RayActorError):
        ember.get(quit_ref, timeout=T)
    with pytest.raises(ex.RayActorError):
        ember.get(queued_behind, timeout=T)
    info = _wait_state(q, A.DEAD)
    assert "exit_actor" in info.death_cause
    with pytest.raises(ex.RayActorError):
        ember.get(q.incr.remote(), timeout=T)  # the GCS says DEAD: no more calls run
    time.sleep(1)  # give a (wrong) restart the time to happen
    info = _actor_info(q)
    assert info.state == A.DEAD and info.num_restarts == 0
    with pytest.raises(ex.ActorDiedError):
        ember.get(q.incr.remote(), timeout=T)


def test_exit_actor_outside_an_actor_raises(ray_start):
    with pytest.raises(TypeError, match="outside an actor"):
        ember.actor.exit_actor()


# ---------------------------------------------------------------------------------- ActorPool
@ember.remote
class Doubler:
    def double(self, v):
        time.sleep(0.02 * (v % 3))
        return 2 * v


def test_actor_pool_map_map_unordered_submit(ray_start):
    from ember.util import ActorPool

    actors = [Doubler.remote() for _ in range(2)]
    try:
        pool = ActorPool(actors)
        assert list(pool.map(lambda a, v: a.double.remote(v), range(8))) == [2 * v for v in range(8)]
        got = list(pool.map_unordered(lambda a, v: a.double.remote(v), range(8)))
        assert sorted(got) == [2 * v for v in range(8)]

        for v in (10, 11, 12, 13):  # 2 run at once, 2 wait for a free actor
            pool.submit(lambda a, v: a.double.remote(v), v)
        out = []
        while pool.has_next():
            out.append(pool.get_next(timeout=T))
        assert out == [20, 22, 24, 26]
        assert not pool.has_next()
        with pytest.raises(StopIteration):
            pool.get_next()
    finally:
        _kill_all(*actors)


@ember.remote
class Recorder:
    def __init__(self):
        self.seen = []

    def work(self, v):
        self.seen.append(v)
        return v

    @ember.method(num_returns=2)
    def pair(self, v):
        return v, -v

    def seen_values(self):
        return list(self.seen)


def test_actor_pool_map_starts_work_at_once_and_takes_multi_return_methods(ray_start):
    """As Ray's: map() gives each idle actor a value before the caller reads a result (the rest
    wait for a free actor), and a method with num_returns=2 yields one [a, b] list per value,
    in order or unordered."""
    from ember.util import ActorPool

    actors = [Recorder.remote() for _ in range(2)]
    try:
        pool = ActorPool(actors)
        results = pool.map(lambda a, v: a.work.remote(v), range(6))  # nothing read yet
        wait_for(lambda: sorted(sum(ember.get([a.seen_values.remote() for a in actors], timeout=T), []))
                 == [0, 1], timeout_s=20, what="each idle actor given a value before the first read")
        assert list(results) == list(range(6))
        assert list(pool.map(lambda a, v: a.pair.remote(v), [1, 2, 3])) == [[1, -1], [2, -2], [3, -3]]
        got = list(pool.map_unordered(lambda a, v: a.pair.remote(v), [4, 5, 6]))
        assert sorted(got) == [[4, -4], [5, -5], [6, -6]]
    finally:
        _kill_all(*actors)


# ---------------------------------------------------------------------------------- resources
def _available(resource: str) -> float:
    return ember.available_resources().get(resource, 0)


def _gpus_available() -> float:
    return _available("GPU")


def test_gpu_actor_holds_gpu_until_killed(ray_start):
    @ember.remote(num_gpus=1)
    class GpuActor:
        def gpu_ids(self):
            return ember.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES")

    wait_for(lambda: _gpus_available() == 1, timeout_s=10, what="the GPU to be free")
    g = GpuActor.remote()
    try:
        assert ember.get(g.gpu_ids.remote(), timeout=T) == ([0], "0")
        wait_for(lambda: _gpus_available() == 0, timeout_s=10, what="the GPU to be held by the actor")
        time.sleep(1.2)
        assert _gpus_available() == 0  # still held by the live actor
    finally:
        ember.kill(g)
    wait_for(lambda: _gpus_available() == 1, timeout_s=10, what="the GPU to be released after kill")


def test_tasks_of_a_killed_actor_release_their_resources(ray_start):
    """Ray fate-shares a task with its owner: when the actor that submitted a task dies, the
    task's worker lease is released. (Uses the custom resource so that a leak here cannot starve
    the CPU of other tests.)"""
    @ember.remote(num_cpus=0, resources={"custom": 1})
    def hold(t):
        time.sleep(t)
        return t

    @ember.remote
    class Spawner:
        def spawn(self):
            self.ref = hold.remote(3)
            return "started"

    wait_for(lambda: _available("custom") == 2, timeout_s=10, what="the custom resource to be free")
    s = Spawner.remote()
    assert ember.get(s.spawn.remote(), timeout=T) == "started"
    wait_for(lambda: _available("custom") == 1, timeout_s=10, what="the task to hold custom=1")
    ember.kill(s)
    wait_for(lambda: _available("custom") == 2 and "hold" not in _leased_task_names(), timeout_s=10,
             what="the lease of the killed actor's task to be released")
