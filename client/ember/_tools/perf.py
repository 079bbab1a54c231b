"""The engine of `ember microbenchmark`: Ray's `ray microbenchmark` workloads, for Ember or Ray.

The workloads, their shapes, multipliers and printed names mirror Ray's
`ray/_private/ray_perf.py`, so numbers can be compared line by line:

    <name> per second <mean> +- <stddev>

Every workload is written against a module object (`ember` or `ray`) passed in as a
parameter, so the same code drives both runtimes:

    python -m ember._tools.perf --duration-s 1 --filter tasks
    .rayvenv/bin/python client/ember/_tools/perf.py --module ray

This file imports nothing from Ember at module level, so another venv's interpreter can run
it as a plain script. The actor workloads live in perf_actors.py, next to this file, which is
loaded by path for the same reason. "placement group create/removal" runs on a cluster of its
own with Ray's `resources={"custom": 100}` (see SUITES).
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    # Run as a plain script, this file's directory is sys.path[0]; it holds modules such as
    # worker.py and rpc.py that must not shadow top-level imports (nor reach Ray's workers).
    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse
import importlib
import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

Fn = Callable[[], Any]


@dataclass
class Benchmark:
    """One workload: `make(mod)` does the setup and returns the function that is timed; each
    call of it counts as `multiplier` operations (Ray's (name, fn, multiplier))."""

    name: str
    make: Callable[[Any], Fn]
    multiplier: float = 1.0


@dataclass
class Suite:
    """Benchmarks that share one cluster: `mod.init(num_cpus=..., **init_kwargs)` before them,
    `mod.shutdown()` after."""

    benchmarks: list[Benchmark]
    init_kwargs: dict[str, Any] = field(default_factory=dict)
    only_module: str | None = None  # runs only for this runtime (needs its internals)


# ---------------------------------------------------------------------------------------------
# Workloads (same shapes as Ray's). Task bodies are closures over `mod`, so they are pickled by
# value and import `ember` or `ray` by name on the worker.

def _small_value(mod: Any) -> Any:
    def small_value() -> bytes:
        return b"ok"

    return mod.remote(small_value)


def _get_small(mod: Any) -> Fn:
    value = mod.put(0)
    return lambda: mod.get(value)


def _put_small(mod: Any) -> Fn:
    return lambda: mod.put(0)


def _put_multi_small(mod: Any) -> Fn:
    def do_put_small() -> None:
        for _ in range(100):
            mod.put(0)

    task = mod.remote(do_put_small)
    return lambda: mod.get([task.remote() for _ in range(10)])


def _put_large(mod: Any) -> Fn:
    import numpy as np

    arr = np.zeros(100 * 1024 * 1024, dtype=np.int64)  # 800 MiB
    return lambda: mod.put(arr)


def _tasks_and_get_batch(mod: Any) -> Fn:
    small_value = _small_value(mod)
    return lambda: mod.get([small_value.remote() for _ in range(1000)])


def _put_multi_large(mod: Any) -> Fn:
    def do_put() -> None:
        import numpy as np

        for _ in range(10):
            mod.put(np.zeros(10 * 1024 * 1024, dtype=np.int64))  # 80 MiB each

    task = mod.remote(do_put)
    return lambda: mod.get([task.remote() for _ in range(10)])


def _get_containing_refs(mod: Any) -> Fn:
    def create_object_containing_ref() -> list[Any]:
        return [mod.put(1) for _ in range(10000)]

    ref = mod.remote(create_object_containing_ref).remote()
    return lambda: mod.get(ref)


def _wait_1k_refs(mod: Any) -> Fn:
    small_value = _small_value(mod)

    def wait_multiple_refs() -> None:
        not_ready = [small_value.remote() for _ in range(1000)]
        fetch_local = True  # the first wait asks for all of them; later ones need not
        for _ in range(1000):
            _ready, not_ready = mod.wait(not_ready, fetch_local=fetch_local)
            fetch_local = False

    return wait_multiple_refs


def _tasks_sync(mod: Any) -> Fn:
    small_value = _small_value(mod)
    return lambda: mod.get(small_value.remote())


def _tasks_async(mod: Any) -> Fn:
    small_value = _small_value(mod)
    return lambda: mod.get([small_value.remote() for _ in range(1000)])


TASK_AND_OBJECT_BENCHMARKS: list[Benchmark] = [
    Benchmark("single client get calls (Plasma Store)", _get_small),
    Benchmark("single client put calls (Plasma Store)", _put_small),
    Benchmark("multi client put calls (Plasma Store)", _put_multi_small, 1000),
    Benchmark("single client put gigabytes", _put_large, 8 * 0.1),
    Benchmark("single client tasks and get batch", _tasks_and_get_batch),
    Benchmark("multi client put gigabytes", _put_multi_large, 10 * 8 * 0.1),
    Benchmark("single client get object containing 10k refs", _get_containing_refs),
    Benchmark("single client wait 1k refs", _wait_1k_refs),
    Benchmark("single client tasks sync", _tasks_sync),
    Benchmark("single client tasks async", _tasks_async, 1000),
]


def _node_to_node_transfer(mod: Any) -> Fn:
    """Ember only: a second node joins the embedded cluster and makes a 1 GiB object; each call
    has the head's object manager pull it (parallel ReadRange streams over loopback) and then
    drops the pulled copy, so the next call transfers it again."""
    import numpy as np

    from ember._private import node as node_mod
    from ember._private import worker as worker_mod
    from ember_common import rpc
    from ember_common.proto import objmgr_pb2, objmgr_pb2_grpc

    w = worker_mod.global_worker()
    cluster = w.cluster
    if cluster is None:
        raise RuntimeError("needs the embedded cluster of ember.init()")
    size = 2**30
    node, procs = node_mod.start_node(cluster.session_dir, cluster.gcs_address,
                                      resources={"CPU": 1, "transfer_node": 1},
                                      object_store_memory=size + 2**28, is_head=False,
                                      die_with_parent=True)
    cluster.procs[1:1] = procs  # stopped (before the GCS) by mod.shutdown()

    def produce() -> Any:
        return np.ones(size, dtype=np.uint8)

    ref = mod.remote(resources={"transfer_node": 1})(produce).remote()
    mod.wait([ref], timeout=300)
    head = objmgr_pb2_grpc.ObjectManagerStub(rpc.sync_channel(w.core.objmgr_address))
    pull = objmgr_pb2.PullRequest(object_id=ref.binary(), source_address=node.objmgr_address,
                                  owner_worker_id=w.core.worker_id)
    free = objmgr_pb2.FreeRequest(object_ids=[ref.binary()])

    def transfer() -> None:
        head.Pull(pull, timeout=300)
        head.Free(free, timeout=30)

    transfer.keep = ref  # type: ignore[attr-defined]
    return transfer


# Ember only (no Ray name): 1 GiB pulled from a second node on this machine per call.
TRANSFER_BENCHMARKS: list[Benchmark] = [
    Benchmark("node-to-node transfer gigabytes", _node_to_node_transfer, 1.0),
]


def _load_sibling(name: str) -> Any:
    """Loads <name>.py from this file's directory by path, without importing the ember package
    (so it works when this file runs as a plain script under Ray's interpreter). It is not put
    in sys.modules, so the remote code it defines is always pickled by value."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    spec = importlib.util.spec_from_file_location(f"_ember_perf_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# "multi client tasks async" and the "1:1/1:n/n:n (async-)actor calls" workloads.
ACTOR_BENCHMARKS: list[Benchmark] = [Benchmark(*b) for b in _load_sibling("perf_actors").BENCHMARKS]

def _pg_create_removal(mod: Any) -> Fn:
    """Ray's: create 100 groups of one tiny bundle ({"custom": 0.001}), wait for each to be
    ready, then remove them all; one call counts 100."""
    pgmod = importlib.import_module(f"{mod.__name__}.util.placement_group")

    def create_removal() -> None:
        pgs = [pgmod.placement_group(bundles=[{"custom": 0.001}]) for _ in range(100)]
        for pg in pgs:
            if not pg.wait(timeout_seconds=30):
                raise RuntimeError(f"placement group {pg.id.hex()} not ready after 30 s")
        for pg in pgs:
            pgmod.remove_placement_group(pg)

    return create_removal


PLACEMENT_GROUP_BENCHMARKS: list[Benchmark] = [
    Benchmark("placement group create/removal", _pg_create_removal, 100)]

SUITES: list[Suite] = [
    Suite(TASK_AND_OBJECT_BENCHMARKS + ACTOR_BENCHMARKS),
    Suite(PLACEMENT_GROUP_BENCHMARKS, {"resources": {"custom": 100}}),
    Suite(TRANSFER_BENCHMARKS, only_module="ember"),
]


# ---------------------------------------------------------------------------------------------
# Timing, like Ray's ray_microbenchmark_helpers.timeit (without its 10 s pre-sleep).

def measure(fn: Fn, multiplier: float, duration_s: float, trials: int,
            warmup_s: float) -> tuple[float, float]:
    """Warms up for warmup_s, then runs `trials` trials of ~duration_s each, calling fn in steps
    of ~0.1 s; returns (mean, population stddev) of multiplier * calls / second."""
    start, count = time.perf_counter(), 0
    while time.perf_counter() - start < warmup_s or count == 0:
        fn()
        count += 1
    rate = count / max(time.perf_counter() - start, 1e-9)
    step = int(rate / 10) + 1
    stats = []
    for _ in range(trials):
        start, count = time.perf_counter(), 0
        while time.perf_counter() - start < duration_s:
            for _ in range(step):
                fn()
            count += step
        stats.append(multiplier * count / (time.perf_counter() - start))
    return statistics.fmean(stats), statistics.pstdev(stats)


def init_kwargs(module_name: str, num_cpus: int) -> dict[str, Any]:
    if module_name == "ray":
        return {"num_cpus": num_cpus, "include_dashboard": False, "log_to_driver": False}
    return {"num_cpus": num_cpus, "log_to_driver": False}


def release(mod: Any, fn: Fn | None) -> None:
    """Kills the actors a workload made (listed on fn.actors), as Ray does when their handles
    go out of scope, so they do not linger through the later workloads."""
    for actor in getattr(fn, "actors", ()):
        try:
            mod.kill(actor)
        except Exception as e:
            print(f"  (could not kill {actor!r}: {type(e).__name__}: {e})", file=sys.stderr,
                  flush=True)


def selects(name: str, pattern: str, exact: bool = False) -> bool:
    """Whether a workload called name is chosen: its whole name when exact, else a substring."""
    return name == pattern if exact else pattern in name


def run(mod: Any, module_name: str, pattern: str, duration_s: float, trials: int,
        warmup_s: float, num_cpus: int, exact: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """Runs the benchmarks chosen by `pattern` (see selects); returns (results, failed names)."""
    results: list[dict[str, Any]] = []
    failed: list[str] = []
    for suite in SUITES:
        chosen = [b for b in suite.benchmarks if selects(b.name, pattern, exact)]
        if not chosen or suite.only_module not in (None, module_name):
            continue
        mod.init(**init_kwargs(module_name, num_cpus), **suite.init_kwargs)
        try:
            for b in chosen:
                fn = None
                try:
                    fn = b.make(mod)
                    mean, sd = measure(fn, b.multiplier, duration_s, trials, warmup_s)
                except Exception as e:  # report and go on with the others
                    print(f"{b.name} FAILED: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                    failed.append(b.name)
                    continue
                finally:
                    release(mod, fn)
                    fn = None  # drop the workload's objects before the next one
                print(b.name, "per second", round(mean, 2), "+-", round(sd, 2), flush=True)
                results.append({"name": b.name, "per_second": mean, "stddev": sd})
        finally:
            mod.shutdown()
    return results, failed


def all_names(module_name: str | None = None) -> list[str]:
    """Every workload's name, in running order (with module_name: those that runtime runs)."""
    return [b.name for s in SUITES for b in s.benchmarks
            if module_name is None or s.only_module in (None, module_name)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ember microbenchmark",
                                description="Ray's microbenchmark workloads on Ember (or Ray).")
    p.add_argument("--duration-s", type=float, default=2.0, help="seconds per trial (default 2)")
    p.add_argument("--trials", type=int, default=4, help="timed trials per workload (default 4)")
    p.add_argument("--warmup-s", type=float, default=1.0, help="warm-up seconds (default 1)")
    p.add_argument("--filter", default="", metavar="SUBSTRING",
                   help="only run workloads whose name contains SUBSTRING")
    p.add_argument("--name", metavar="NAME",
                   help="only run the workload called exactly NAME (one row; overrides --filter)")
    p.add_argument("--json", metavar="PATH", help="write results as a JSON list to PATH")
    p.add_argument("--module", default="ember", help='runtime to benchmark: "ember" or "ray"')
    p.add_argument("--num-cpus", type=int, default=os.cpu_count() or 1,
                   help="CPUs of the local cluster (default: all)")
    p.add_argument("--list", action="store_true",
                   help="print the names of the workloads --module runs, and exit")
    args = p.parse_args(argv)
    if args.duration_s <= 0 or args.trials < 1 or args.warmup_s < 0:
        p.error("--duration-s must be > 0, --trials >= 1 and --warmup-s >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        print("\n".join(all_names(args.module)))
        return 0
    pattern, exact = (args.name, True) if args.name is not None else (args.filter, False)
    if not any(selects(n, pattern, exact) for n in all_names()):
        what = "is called" if exact else "contains"
        print(f"no workload name {what} {pattern!r}; see --list", file=sys.stderr)
        return 1
    mod = importlib.import_module(args.module)
    version = getattr(mod, "__version__", "?")
    print(f"# {args.module} {version}: {args.trials} x {args.duration_s:g} s per workload, "
          f"num_cpus={args.num_cpus}", file=sys.stderr, flush=True)
    results, failed = run(mod, args.module, pattern, args.duration_s, args.trials,
                          args.warmup_s, args.num_cpus, exact)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
