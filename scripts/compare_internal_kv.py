"""Internal KV round trips from a driver, Ember vs Ray, in one run.

Each system runs in its own process (Ember under this interpreter, Ray under the Ray venv's):
it starts a one-node cluster, then times `rounds` calls each of `_internal_kv_put`, `_get`,
`_exists` and `_list` (64-byte values, distinct keys in one namespace) after a short warm-up,
and prints one JSON line. This script prints both side by side (calls per second, p50 µs).

    .venv/bin/python scripts/compare_internal_kv.py [--rounds 2000] [--ray-python .rayvenv/bin/python]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

WORKER = textwrap.dedent("""
    import json, sys, time
    module, rounds = sys.argv[1], int(sys.argv[2])
    if module == "ray":
        import ray as system
        from ray.experimental import internal_kv as kv
    else:
        import ember as system
        from ember.experimental import internal_kv as kv
    system.init(num_cpus=1, include_dashboard=False) if module == "ray" else system.init(num_cpus=1)
    value = b"v" * 64
    out = {}
    for w in range(min(200, rounds)):  # warm-up
        kv._internal_kv_put(f"warm/{w}", value, namespace="bench")
        kv._internal_kv_get(f"warm/{w}", namespace="bench")
    calls = {
        "put": lambda i: kv._internal_kv_put(f"k/{i}", value, namespace="bench"),
        "get": lambda i: kv._internal_kv_get(f"k/{i}", namespace="bench"),
        "exists": lambda i: kv._internal_kv_exists(f"k/{i}", namespace="bench"),
        "list": lambda i: kv._internal_kv_list(f"k/{i}", namespace="bench"),
    }
    for name, call in calls.items():
        lat = []
        t0 = time.perf_counter()
        for i in range(rounds):
            t = time.perf_counter()
            call(i)
            lat.append(time.perf_counter() - t)
        total = time.perf_counter() - t0
        lat.sort()
        out[name] = {"per_s": rounds / total, "p50_us": lat[len(lat) // 2] * 1e6,
                     "p99_us": lat[int(len(lat) * 0.99)] * 1e6}
    assert kv._internal_kv_get("k/0", namespace="bench") == value
    system.shutdown()
    print("RESULT " + json.dumps(out))
""")


def run(python: str, module: str, rounds: int) -> dict | None:
    """One system's figures, or None (after printing why) when its run failed."""
    try:
        r = subprocess.run([python, "-c", WORKER, module, str(rounds)], capture_output=True,
                           text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"{module}: {e}", file=sys.stderr)
        return None
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    print(f"{module} failed ({r.returncode}):\n{r.stderr[-2000:]}", file=sys.stderr)
    return None


def main() -> int:
    """Runs both systems and prints the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2000)
    p.add_argument("--ray-python", default=".rayvenv/bin/python")
    ns = p.parse_args()
    ember = run(sys.executable, "ember", ns.rounds)
    ray = run(ns.ray_python, "ray", ns.rounds)
    print(f"{'call':8} {'ember/s':>9} {'ray/s':>9} {'ember/ray':>9} {'ember p50':>10} {'ray p50':>9}")
    for name in ("put", "get", "exists", "list"):
        e = (ember or {}).get(name)
        r = (ray or {}).get(name)
        ratio = f"{e['per_s'] / r['per_s']:.2f}x" if e and r else "-"
        print(f"{name:8} {e['per_s'] if e else 0:9,.0f} {r['per_s'] if r else 0:9,.0f} {ratio:>9} "
              f"{(e['p50_us'] if e else 0):8.0f}µs {(r['p50_us'] if r else 0):7.0f}µs")
    return 0 if ember and ray else 1


if __name__ == "__main__":
    sys.exit(main())
