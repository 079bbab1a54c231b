"""Model-multiplexing microbenchmark: Ember's Serve beside Ray's, same code.

One deployment, two replicas, `@serve.multiplexed(max_num_models_per_replica=2)` over four model
ids (a model "loads" in 20 ms). Requests go through a handle with
`.options(multiplexed_model_id=...)`:
  sequential  one request at a time, model ids round-robin
  concurrent  batches of 64 in flight, model ids round-robin
Beside each rate: how many times a model was loaded during it. With 2 replicas of 2 slots for 4
models, routing that sends a model's requests to the replica holding it needs no load at all
once warm.

Each system runs in its own process (Ray from its own venv, never a dependency of the project);
the runs alternate Ember/Ray per trial so both see the same minute of a shared machine.

    .venv/bin/python scripts/bench_multiplex.py --ray-python /path/to/ray-venv/bin/python -n 400
    .venv/bin/python scripts/bench_multiplex.py --module ember -n 200     # one side only, JSON out
"""
from __future__ import annotations

import importlib
import socket
import time

import _side_by_side as side_by_side

MODELS = [f"model-{i}" for i in range(4)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_side(module: str, n: int) -> dict[str, float]:
    """Runs the workloads with `module` (ember or ray) in this process; requests per second."""
    rt = importlib.import_module(module)
    serve = importlib.import_module(f"{module}.serve")
    rt.init(num_cpus=2, include_dashboard=False) if module == "ray" else rt.init(num_cpus=2)
    serve.start(http_options={"host": "127.0.0.1", "port": _free_port()})

    @serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0.5})
    class Multiplexed:
        def __init__(self) -> None:
            self.loads = 0

        @serve.multiplexed(max_num_models_per_replica=2)
        async def get_model(self, model_id: str) -> str:
            import asyncio

            self.loads += 1
            await asyncio.sleep(0.02)
            return model_id.upper()

        async def __call__(self, x: int) -> str:
            model = await self.get_model(serve.get_multiplexed_model_id())
            return f"{model}:{x}"

        def load_count(self) -> tuple[int, int]:
            import os

            return os.getpid(), self.loads

    handle = serve.run(Multiplexed.bind(), name="mux", route_prefix="/mux")

    def call(i: int):
        return handle.options(multiplexed_model_id=MODELS[i % len(MODELS)]).remote(i)

    def total_loads() -> int:
        """Loads so far over both replicas (a call lands on either: asked until both answered)."""
        counts: dict[int, int] = {}
        for _ in range(100):
            pid, loads = handle.load_count.remote().result()
            counts[pid] = loads
            if len(counts) == 2:
                break
        return sum(counts.values())

    for i in range(40):  # warm up: replicas up, each model loaded where the router puts it
        assert call(i).result() == f"{MODELS[i % len(MODELS)].upper()}:{i}"
    out: dict[str, float] = {}
    before = total_loads()
    t = time.perf_counter()
    for i in range(n):
        call(i).result()
    out["sequential"] = n / (time.perf_counter() - t)
    out["sequential_loads"] = total_loads() - before
    before = total_loads()
    t = time.perf_counter()
    for start in range(0, n, 64):
        for r in [call(i) for i in range(start, min(start + 64, n))]:
            r.result()
    out["concurrent"] = n / (time.perf_counter() - t)
    out["concurrent_loads"] = total_loads() - before
    serve.shutdown()
    rt.shutdown()
    return out


def main() -> None:
    results = side_by_side.main(__file__, __doc__ or "", run_side, ("sequential", "concurrent"), "req/s", 400,
                                "requests per workload")
    for w in ("sequential", "concurrent"):
        if results is not None:
            print(f"model loads during {w} (per run): " + ", ".join(
                f"{s} {[int(r[w + '_loads']) for r in results[s]]}" for s in results))


if __name__ == "__main__":
    main()
