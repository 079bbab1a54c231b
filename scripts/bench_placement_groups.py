"""Placement group create -> ready -> remove latency, Ember's services next to Ray 2.60.

Ember side: a one-node cluster (GCS + raylet + object manager, `ember.testing.LocalCluster`)
driven through the kit's GcsClient (the server path alone, one group at a time). Ray side: `ray.init`
with the same CPUs and `ray.util.placement_group(...).wait()` / `remove_placement_group`, run
under the Ray venv's interpreter. Both create the same groups one after another.

Usage (from the repository root):

    .venv/bin/python scripts/bench_placement_groups.py --groups 50 --ray-python .rayvenv/bin/python
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


def _summary(create_ready: list[float], remove: list[float]) -> dict[str, float]:
    return {"create_ready_p50_ms": 1000 * statistics.median(create_ready),
            "create_ready_mean_ms": 1000 * statistics.fmean(create_ready),
            "remove_p50_ms": 1000 * statistics.median(remove)}


def run_ember(groups: int, bundles: int, cpus: int) -> dict[str, float]:
    """Create/ready/remove `groups` groups on a one-node Ember cluster."""
    from ember.testing import LocalCluster
    from ember_common.gcs_client import GcsClient
    from ember_common.gcs_pg_client import spec

    with LocalCluster() as c:
        c.add_node({"CPU": cpus}, num_prestart_workers=0)

        async def main() -> dict[str, float]:
            gcs = GcsClient(c.gcs_address, timeout_s=30)
            try:
                ready_s, remove_s = [], []
                for i in range(groups):
                    strategy = STRATEGIES[i % 2 * 2]  # PACK / STRICT_PACK: one node
                    t0 = time.perf_counter()
                    pg = await gcs.create_placement_group(spec([{"CPU": 1}] * bundles, strategy))
                    ok, got = await gcs.wait_placement_group_until_ready(pg.placement_group_id, 60)
                    assert ok, got.state_message
                    t1 = time.perf_counter()
                    await gcs.remove_placement_group(pg.placement_group_id)
                    remove_s.append(time.perf_counter() - t1)
                    ready_s.append(t1 - t0)
                return _summary(ready_s, remove_s)
            finally:
                await gcs.close()

        return asyncio.run(main())


def run_ray(groups: int, bundles: int, cpus: int) -> dict[str, float]:
    """The same with Ray (run under the Ray venv)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    try:
        ready_s, remove_s = [], []
        for i in range(groups):
            strategy = STRATEGIES[i % 2 * 2]
            t0 = time.perf_counter()
            pg = placement_group([{"CPU": 1}] * bundles, strategy=strategy)
            assert pg.wait(60)  # the GCS's WaitPlacementGroupUntilReady, as Ember's side
            t1 = time.perf_counter()
            remove_placement_group(pg)
            remove_s.append(time.perf_counter() - t1)
            ready_s.append(t1 - t0)
        return _summary(ready_s, remove_s)
    finally:
        ray.shutdown()


def main() -> int:
    """Runs both sides and prints them next to each other."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--groups", type=int, default=50)
    p.add_argument("--bundles", type=int, default=2)
    p.add_argument("--cpus", type=int, default=4)
    p.add_argument("--ray-python", default=".rayvenv/bin/python")
    p.add_argument("--only", choices=("ember", "ray"), default=None, help=argparse.SUPPRESS)
    ns = p.parse_args()
    if ns.only:
        fn = run_ember if ns.only == "ember" else run_ray
        print(json.dumps(fn(ns.groups, ns.bundles, ns.cpus)))
        return 0
    args = ["--groups", str(ns.groups), "--bundles", str(ns.bundles), "--cpus", str(ns.cpus)]
    results = {}
    for impl, py in (("ember", sys.executable), ("ray", ns.ray_python)):
        out = subprocess.run([py, __file__, *args, "--only", impl], capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            print(f"{impl} failed:\n{out.stderr[-2000:]}", file=sys.stderr)
            return 1
        results[impl] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{'metric':24} {'ember':>10} {'ray 2.60':>10}")
    for key in results["ember"]:
        print(f"{key:24} {results['ember'][key]:10.2f} {results['ray'][key]:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
