"""The chaos suite's workload: a driver run in the compose `driver` service (mounted at /app).

  python /app/chaos_workload.py serve             deploy the Serve app the HTTP load calls, and
                                                  the state kept across the faults (KEPT)
  python /app/chaos_workload.py check JOB_ID      after the faults: the kept state is all there
  python /app/chaos_workload.py run DURATION_S OP_BOUND_S [LOOPS]
                                                  the mixed workload (LOOPS: comma-separated, of
                                                  task,actor,object50MB,data), then a summary line

Every line on stdout is one JSON object. The workload runs one loop per kind of operation, in
threads, until DURATION_S has passed: tasks with retries, calls to actors with max_restarts and
max_task_retries, 50 MB objects made on one node and read on the other, a small Data pipeline.
Each operation is bounded (`ember.get(timeout=OP_BOUND_S)`), its result checked against the value
it must have, and its failure classified: an Ember exception (`ember.exceptions.RayError`) with a
message naming the cause is allowed; anything else, a wrong result, or an operation past its bound
is a violation. The summary line carries the counts; the test asserts on them.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from typing import Any, Callable

import numpy as np

import ember
from ember import exceptions as ex
from ember.util.scheduling_strategies import NodeAffinitySchedulingStrategy

OBJ_BYTES = 50 * 2**20  # the 50 MB objects
_print_lock = threading.Lock()


def emit(**rec: Any) -> None:
    rec["wall"] = round(time.time(), 3)  # to line up with the fault log's wall times
    with _print_lock:
        print(json.dumps(rec, sort_keys=True), flush=True)


class Tally:
    """Counts and classifies the operations of all loops (thread-safe)."""

    def __init__(self, bound_s: float) -> None:
        self.bound_s = bound_s
        self.lock = threading.Lock()
        self.ops: Counter[str] = Counter()
        self.ok: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()      # "kind:ExceptionType" for explicit Ember errors
        self.violations: list[str] = []
        self.max_s: dict[str, float] = {}
        self.in_flight: dict[int, tuple[str, float]] = {}
        self.samples: dict[str, str] = {}          # one message per error type, for the report

    def run(self, kind: str, op: Callable[[], Any], want: Any) -> None:
        t0 = time.monotonic()
        me = threading.get_ident()
        with self.lock:
            self.ops[kind] += 1
            self.in_flight[me] = (kind, t0)
        try:
            got = op()
        except ex.GetTimeoutError as e:
            started = time.strftime("%H:%M:%S", time.localtime(time.time() - (time.monotonic() - t0)))
            self._violation(f"{kind}: hang: no result within {self.bound_s}s of {started} ({e})")
        except ex.RayError as e:
            msg = str(e).strip()
            with self.lock:
                self.errors[f"{kind}:{type(e).__name__}"] += 1
                self.samples.setdefault(type(e).__name__, msg.splitlines()[0][:300] if msg else "")
            if not msg:
                self._violation(f"{kind}: {type(e).__name__} with no message naming the cause")
        except Exception as e:  # not an Ember exception: the invariant says there must be none
            self._violation(f"{kind}: non-Ember exception {type(e).__name__}: {str(e)[:300]}")
        else:
            if _equal(got, want):
                with self.lock:
                    self.ok[kind] += 1
            else:
                self._violation(f"{kind}: wrong result {str(got)[:100]!r}, want {str(want)[:100]!r}")
        finally:
            dt = time.monotonic() - t0
            with self.lock:
                self.in_flight.pop(me, None)
                self.max_s[kind] = max(self.max_s.get(kind, 0.0), dt)

    def _violation(self, text: str) -> None:
        text = f"{time.strftime('%H:%M:%S')} {text}"
        with self.lock:
            self.violations.append(text)
        emit(type="violation", text=text)

    def stuck(self, now: float) -> list[str]:
        with self.lock:
            return [f"{k} in flight for {now - t0:.0f}s" for k, t0 in self.in_flight.values()
                    if now - t0 > self.bound_s + 30]


def _equal(got: Any, want: Any) -> bool:
    return bool(got == want)


@ember.remote(num_cpus=0.5, max_retries=5)
def square(i: int) -> int:
    time.sleep(0.05)
    return i * i


@ember.remote(num_cpus=0.5, max_retries=5)
def produce(k: int) -> np.ndarray:
    return np.full(OBJ_BYTES, k, dtype=np.uint8)


@ember.remote(num_cpus=0.5, max_retries=5)
def consume(a: np.ndarray) -> tuple[int, int]:
    return int(a[0]), int(a.sum(dtype=np.int64))


@ember.remote(num_cpus=0.25, max_restarts=-1, max_task_retries=-1)
class Calc:
    def calc(self, i: int) -> int:
        return 3 * i + 1


def _node_ids() -> list[str]:
    return sorted(n["NodeID"] for n in ember.nodes() if n["Alive"])


def loop_tasks(t: Tally, stop: threading.Event) -> None:
    i = 0
    while not stop.is_set():
        batch = list(range(i, i + 4))
        t.run("task", lambda b=batch: ember.get([square.remote(x) for x in b], timeout=t.bound_s),
              [x * x for x in batch])
        i += 4


def loop_actors(t: Tally, stop: threading.Event) -> None:
    actors = [Calc.remote() for _ in range(2)]
    i = 0
    while not stop.is_set():
        a = actors[i % 2]
        t.run("actor", lambda a=a, i=i: ember.get(a.calc.remote(i), timeout=t.bound_s), 3 * i + 1)
        i += 1
        time.sleep(0.05)


def loop_objects(t: Tally, stop: threading.Event) -> None:
    k = 0
    while not stop.is_set():
        k = k % 250 + 1

        def op(k: int = k) -> tuple[int, int]:
            nodes = _node_ids() or [""]  # made on one node, read on the other (soft: may fall back)
            src, dst = nodes[k % len(nodes)], nodes[(k + 1) % len(nodes)]
            ref = produce.options(scheduling_strategy=NodeAffinitySchedulingStrategy(src, soft=True)).remote(k)
            out = consume.options(scheduling_strategy=NodeAffinitySchedulingStrategy(dst, soft=True)).remote(ref)
            return tuple(ember.get(out, timeout=t.bound_s))

        t.run("object50MB", op, (k, k * OBJ_BYTES))
        time.sleep(0.2)


def loop_data(t: Tally, stop: threading.Event) -> None:
    import ember.data

    n = 2000
    while not stop.is_set():
        def op() -> int:
            ds = ember.data.range(n, parallelism=4).map_batches(
                lambda b: {"id": b["id"] * 2}, batch_format="numpy")
            return int(ds.sum("id"))

        t.run("data", op, 2 * (n * (n - 1) // 2))
        time.sleep(0.5)


LOOPS = {"task": loop_tasks, "actor": loop_actors, "object50MB": loop_objects, "data": loop_data}


def run(duration_s: float, bound_s: float, loops: list[str]) -> int:
    unknown = sorted(set(loops) - set(LOOPS))
    if unknown:
        raise SystemExit(f"unknown workload loops {unknown}; known: {sorted(LOOPS)}")
    ember.init()
    emit(type="ready", nodes=_node_ids())
    t = Tally(bound_s)
    stop = threading.Event()
    threads = [threading.Thread(target=_guard(LOOPS[k], t), args=(t, stop), name=LOOPS[k].__name__,
                                daemon=True) for k in loops]
    for th in threads:
        th.start()
    t_end = time.monotonic() + duration_s
    while time.monotonic() < t_end:
        time.sleep(min(5.0, max(0.0, t_end - time.monotonic())))
        with t.lock:
            emit(type="progress", ops=dict(t.ops), ok=dict(t.ok), errors=dict(t.errors))
        for s in t.stuck(time.monotonic()):
            t._violation(f"watchdog: {s}")
    stop.set()
    deadline = time.monotonic() + bound_s + 30  # the op in flight may take up to its bound
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))
    hung = [th.name for th in threads if th.is_alive()]
    for name in hung:
        t._violation(f"{name}: still in an operation {bound_s + 30:.0f}s after the stop")
    with t.lock:
        emit(type="summary", ops=dict(t.ops), ok=dict(t.ok), errors=dict(t.errors),
             violations=t.violations, max_s={k: round(v, 2) for k, v in t.max_s.items()},
             samples=t.samples)
    if hung:
        import faulthandler
        import os

        sys.stdout.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)  # where each one is stuck
        sys.stderr.flush()
        os._exit(3)  # a thread stuck in the core worker would keep shutdown waiting
    ember.shutdown()
    return 0


def _guard(f: Callable[[Tally, threading.Event], None], t: Tally) -> Callable[..., None]:
    """A loop that dies of an unexpected exception is a violation, not a silent stop."""
    def wrapped(tally: Tally, stop: threading.Event) -> None:
        try:
            f(tally, stop)
        except Exception as e:
            t._violation(f"{f.__name__} died: {type(e).__name__}: {str(e)[:300]}")
    return wrapped


# What must outlive every fault (the GCS's tables on etcd, whichever replica leads): a named
# detached actor, a KV entry, a named detached placement group, and the set-up's job. The actor
# restarts when its node's raylet is killed (its count then starts again; the count says whether
# it did).
KEPT = {"namespace": "chaos", "actor": "chaos-keeper", "pg": "chaos-held", "kv": (b"chaos-key", b"chaos-value")}


@ember.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class Keeper:
    def __init__(self) -> None:
        self.n = 0

    def incr(self) -> int:
        self.n += 1
        return self.n


def keep_state() -> None:
    from ember.experimental import internal_kv
    from ember.util.placement_group import placement_group

    k = Keeper.options(name=KEPT["actor"], namespace=KEPT["namespace"], lifetime="detached").remote()
    assert ember.get(k.incr.remote(), timeout=60) == 1
    pg = placement_group([{"CPU": 0.1}], name=KEPT["pg"], lifetime="detached")
    assert pg.wait(60), "the kept placement group was not placed"
    internal_kv._internal_kv_put(*KEPT["kv"])
    emit(type="kept", job_id=ember.get_runtime_context().get_job_id())


def check_kept(job_id: str) -> int:
    """Prints one `kept_check` line: what of KEPT is missing (empty when nothing is)."""
    from ember.experimental import internal_kv
    from ember.util.placement_group import get_placement_group
    from ember.util.state import list_jobs

    ember.init(namespace=KEPT["namespace"])
    lost = []
    n = 0
    try:
        n = ember.get(ember.get_actor(KEPT["actor"]).incr.remote(), timeout=60)
        if n not in (1, 2):  # 2: never restarted; 1: restarted with its node
            lost.append(f"the keeper actor's count is {n}, want 2 (or 1 after a restart)")
    except Exception as e:
        lost.append(f"the named actor {KEPT['actor']}: {type(e).__name__}: {e}")
    if internal_kv._internal_kv_get(KEPT["kv"][0]) != KEPT["kv"][1]:
        lost.append(f"the KV entry {KEPT['kv'][0]!r}")
    try:
        if not get_placement_group(KEPT["pg"]).wait(60):
            lost.append(f"the placement group {KEPT['pg']} is not placed")
    except Exception as e:
        lost.append(f"the placement group {KEPT['pg']}: {type(e).__name__}: {e}")
    jobs = {j.job_id for j in list_jobs()}
    if job_id not in jobs:
        lost.append(f"the set-up's job {job_id} (jobs: {sorted(jobs)})")
    emit(type="kept_check", lost=lost, jobs=len(jobs), keeper_count=n)
    ember.shutdown()
    return 0


def deploy_serve() -> int:
    from ember import serve

    ember.init(namespace=KEPT["namespace"])  # a named placement group lives in its job's namespace
    keep_state()

    # a quarter CPU each: the task and actor loops keep CPUs while a node is down
    @serve.deployment(num_replicas=2, max_ongoing_requests=32, ray_actor_options={"num_cpus": 0.25})
    class Doubler:
        def __call__(self, request: Any) -> dict[str, int]:
            return {"y": 2 * int(request.query_params.get("x", "0"))}

    serve.run(Doubler.bind(), name="chaos", route_prefix="/chaos")
    emit(type="serve_ready")
    ember.shutdown()
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        sys.exit(deploy_serve())
    if sys.argv[1:2] == ["check"]:
        sys.exit(check_kept(sys.argv[2]))
    sys.exit(run(float(sys.argv[2]), float(sys.argv[3]),
                 sys.argv[4].split(",") if len(sys.argv) > 4 else sorted(LOOPS)))
