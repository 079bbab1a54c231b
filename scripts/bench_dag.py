"""DAG execution microbenchmark: Ember's ember.dag beside Ray's ray.dag, same code.

Workloads (each a 3-node graph: two tasks on the input and one that adds their results):
  sequential  execute + get, one graph run at a time (latency of a whole graph)
  pipelined   N executes, then one get of all results (graph runs in flight together)
  actor       the same shape with methods bound on two live actor handles, sequential

Each system runs in its own process (Ray from its own venv, never a dependency of the project);
the runs alternate Ember/Ray per trial so both see the same minute of a shared machine.

    .venv/bin/python scripts/bench_dag.py --ray-python /path/to/ray-venv/bin/python -n 1000
    .venv/bin/python scripts/bench_dag.py --module ember -n 200     # one side only, JSON out
"""
from __future__ import annotations

import importlib
import time

import _side_by_side as side_by_side


def run_side(module: str, n: int) -> dict[str, float]:
    """Runs the workloads with `module` (ember or ray) in this process; executions per second."""
    rt = importlib.import_module(module)
    dag_mod = importlib.import_module(f"{module}.dag")
    rt.init(num_cpus=2, include_dashboard=False) if module == "ray" else rt.init(num_cpus=2)

    @rt.remote
    def inc(x):
        return x + 1

    @rt.remote
    def double(x):
        return x * 2

    @rt.remote
    def add(a, b):
        return a + b

    @rt.remote
    class Worker:
        def inc(self, x):
            return x + 1

        def add(self, a, b):
            return a + b

    with dag_mod.InputNode() as inp:
        dag = add.bind(inc.bind(inp), double.bind(inp))
    w1, w2 = Worker.remote(), Worker.remote()
    with dag_mod.InputNode() as inp:
        actor_dag = w2.add.bind(w1.inc.bind(inp), w1.inc.bind(inp))
    assert rt.get(dag.execute(3)) == 10 and rt.get(actor_dag.execute(1)) == 4
    for _ in range(50):  # warm up: workers leased, functions exported
        rt.get(dag.execute(1))
        rt.get(actor_dag.execute(1))
    out = {}
    t = time.perf_counter()
    for i in range(n):
        assert rt.get(dag.execute(i)) == 3 * i + 1
    out["sequential"] = n / (time.perf_counter() - t)
    t = time.perf_counter()
    refs = [dag.execute(i) for i in range(n)]
    assert rt.get(refs) == [3 * i + 1 for i in range(n)]
    out["pipelined"] = n / (time.perf_counter() - t)
    t = time.perf_counter()
    for i in range(n):
        assert rt.get(actor_dag.execute(i)) == 2 * i + 2
    out["actor"] = n / (time.perf_counter() - t)
    rt.shutdown()
    return out


def main() -> None:
    side_by_side.main(__file__, __doc__ or "", run_side, ("sequential", "pipelined", "actor"), "exec/s", 1000,
                      "graph executions per workload")


if __name__ == "__main__":
    main()
